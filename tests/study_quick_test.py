#!/usr/bin/env python3
"""`make study QUICK=1`, end to end: runs posenc_study --quick and checks that every artefact is
produced and well formed, and that an interrupted study resumes to the same result. It never
looks at what the numbers say (the study is not a test); only that they are there and finite.

usage: study_quick_test.py POSENC_STUDY WORK_DIR
"""
import json
import math
import pathlib
import shutil
import struct
import subprocess
import sys

ARMS = ["learned", "sinusoidal", "rope", "alibi", "nope", "rope-pi", "rope-ntk", "rope-dynamic",
        "rope-yarn", "rope-pi-ft", "rope-yarn-ft", "rope-self-extend", "rope-sinks",
        "rope-sinks-text"]
BASE_RUNS = ["rope", "alibi", "sinusoidal", "learned", "nope"]
FINE_TUNES = ["rope-pi-ft", "rope-yarn-ft"]
SEEDS = [1, 2]
TRAIN_LENGTH = 32  # quick settings
LENGTHS = [TRAIN_LENGTH * m for m in (1, 2, 4, 8, 16)]
CHARTS = ["loss_vs_length_nonoverlapping", "loss_vs_length_sliding", "training", "fine_tuning"]


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(binary, out, *extra):
    result = subprocess.run([binary, "--quick", "--threads", "2", "--out", str(out), *extra],
                            capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr


def check_png(path):
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        fail(f"{path} is not a PNG file")
    width, height = struct.unpack(">II", data[16:24])
    if width < 400 or height < 300:
        fail(f"{path} is {width}x{height}, too small for a chart")


def check_artefacts(out):
    for seed in SEEDS:
        for run_name in BASE_RUNS + FINE_TUNES:
            run_dir = out / "runs" / f"{run_name}-s{seed}"
            if not (run_dir / "model.pt").is_file():
                fail(f"no final weights in {run_dir}")
            for leftover in ("checkpoint.pt", "optimizer.pt", "step.txt"):
                if (run_dir / leftover).exists():
                    fail(f"{run_dir / leftover} left behind by a finished run")
            rows = [line.split("\t") for line in (run_dir / "loss.tsv").read_text().splitlines()]
            width = 4 if run_name in FINE_TUNES else 3
            if not rows or any(len(r) != width for r in rows):
                fail(f"{run_dir}/loss.tsv: expected rows of {width} columns, got {rows[:3]}")
            if not all(math.isfinite(float(v)) for r in rows for v in r):
                fail(f"{run_dir}/loss.tsv holds a non-finite value")
        for arm in ARMS:
            path = out / "results" / f"{arm}-s{seed}.json"
            result = json.loads(path.read_text())
            if result["arm"] != arm or result["seed"] != seed:
                fail(f"{path} names arm {result['arm']} seed {result['seed']}")
            for protocol in ("nonoverlapping", "sliding"):
                cells = result["nats_per_char"][protocol]
                if sorted(int(k) for k in cells) != LENGTHS:
                    fail(f"{path}: {protocol} lengths {sorted(cells)}, expected {LENGTHS}")
                if not all(math.isfinite(v) and v > 0 for v in cells.values()):
                    fail(f"{path}: {protocol} holds a non-finite or non-positive loss")

    docs = out / "docs"
    study = (docs / "STUDY.md").read_text()
    for heading in ("## Set-up", "## Protocols", "### Non-overlapping windows", "### Sliding window",
                    "## Beside the published shapes", "## YaRN's beta for this model", "## NoPE",
                    "## Training and fine-tuning"):
        if heading not in study:
            fail(f"STUDY.md has no section {heading!r}")
    if "—" in study.split("## Beside")[0]:
        fail("STUDY.md's results tables have an empty cell")
    for chart in CHARTS:
        check_png(docs / "study" / f"{chart}.png")
        if f"study/{chart}.png" not in study:
            fail(f"STUDY.md does not show study/{chart}.png")


def main():
    binary, work = sys.argv[1], pathlib.Path(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    whole, interrupted = work / "whole", work / "interrupted"

    code, log = run(binary, whole)
    if code != 0:
        fail(f"posenc_study --quick exited with {code}:\n{log}")
    for expected in ("BLAS:", "step", "loss", "left", "evaluated", "STUDY.md"):
        if expected not in log:
            fail(f"the progress output does not mention {expected!r}:\n{log}")
    check_artefacts(whole)

    # Stop in the middle of the second run (30 steps each, checkpoints every 20), then resume.
    code, log = run(binary, interrupted, "--stop-after-steps", "55")
    if code != 3 or "run again to resume" not in log:
        fail(f"--stop-after-steps 55 should stop with exit code 3, got {code}:\n{log}")
    if not (interrupted / "runs" / "alibi-s1" / "checkpoint.pt").is_file():
        fail("the interrupted run left no checkpoint to resume from")
    code, log = run(binary, interrupted)
    if code != 0 or "rope-s1: finished earlier, kept" not in log:
        fail(f"the resumed study did not keep the finished run:\n{log}")
    for seed in SEEDS:
        for run_name in BASE_RUNS + FINE_TUNES:
            name = f"{run_name}-s{seed}"
            a = [r.split("\t")[:2] for r in (whole / "runs" / name / "loss.tsv").read_text().splitlines()]
            b = [r.split("\t")[:2] for r in (interrupted / "runs" / name / "loss.tsv").read_text().splitlines()]
            if a != b:
                fail(f"{name}: the resumed run's losses differ from the uninterrupted run's:\n{a}\n{b}")
    check_artefacts(interrupted)

    code, log = run(binary, interrupted)  # a finished study only rewrites its report
    if code != 0 or "step" in log.replace("steps", ""):
        fail(f"a finished study trained again:\n{log}")
    print("study --quick: every artefact present and well formed; an interrupted study resumed to "
          "the same losses")


if __name__ == "__main__":
    main()
