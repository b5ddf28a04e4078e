#!/usr/bin/env python3
"""`make study QUICK=1`, end to end: runs posenc_study --quick and checks that every artefact is
produced and well formed, and that an interrupted study (--stop-after-steps, and Ctrl-C: a
SIGINT) says what it kept and how to resume, and resumes to the same result. It never looks at
what the numbers say (the study is not a test); only that they are there and finite.

usage: study_quick_test.py POSENC_STUDY WORK_DIR
"""

import json
import math
import pathlib
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys

ARMS = [
    "learned",
    "sinusoidal",
    "rope",
    "alibi",
    "nope",
    "t5",
    "xpos",
    "kerple",
    "fire",
    "rope-randomized",
    "rope-pi",
    "rope-ntk",
    "rope-dynamic",
    "rope-yarn",
    "rope-pi-ft",
    "rope-yarn-ft",
    "rope-self-extend",
    "rope-dual-chunk",
    "rope-sinks",
    "rope-sinks-text",
]
BASE_RUNS = [
    "rope",
    "alibi",
    "sinusoidal",
    "learned",
    "nope",
    "t5",
    "xpos",
    "kerple",
    "fire",
    "rope-randomized",
]
FINE_TUNES = ["rope-pi-ft", "rope-yarn-ft"]
SEEDS = [1, 2]
TRAIN_LENGTH = 32  # quick settings
LENGTHS = [TRAIN_LENGTH * m for m in (1, 2, 4, 8, 16)]
CHARTS = ["loss_vs_length_nonoverlapping", "loss_vs_length_sliding", "training", "fine_tuning"]


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(binary, out, *extra):
    result = subprocess.run(
        [binary, "--quick", "--threads", "2", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result.returncode, result.stdout + result.stderr


def same_results(whole, other, what):
    """The loss logs (but their timings) and every result file, number for number."""
    for seed in SEEDS:
        for run_name in BASE_RUNS + FINE_TUNES:
            name = f"{run_name}-s{seed}"
            a, b = (
                [
                    row.split("\t")[:2]
                    for row in (out / "runs" / name / "loss.tsv").read_text().splitlines()
                ]
                for out in (whole, other)
            )
            if a != b:
                fail(
                    f"{name}: the {what} run's losses differ from the uninterrupted run's:\n"
                    f"{a}\n{b}"
                )
        for arm in ARMS:
            a = json.loads((whole / "results" / f"{arm}-s{seed}.json").read_text())["nats_per_char"]
            b = json.loads((other / "results" / f"{arm}-s{seed}.json").read_text())["nats_per_char"]
            if a != b:
                fail(f"{arm} seed {seed}: the {what} study measured {b}, the uninterrupted one {a}")


def interrupt_with_ctrl_c(binary, out):
    """Starts the quick study, checkpointing after every step, and sends it SIGINT once the second
    run has logged its first steps (so the first is finished and the second has checkpoints):
    it must stop with 130, say what it kept and print the command that resumes it."""
    command = [binary, "--quick", "--threads", "2", "--out", str(out), "--checkpoint-seconds", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = ""
    try:
        for line in process.stdout:
            log += line
            if re.search(r"alibi-s1 +step +10/30", line):
                process.send_signal(signal.SIGINT)
                break
        log += process.stdout.read()
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    if code != 130:
        fail(f"Ctrl-C should stop the study with exit status 130, got {code}:\n{log}")
    for expected in (
        "stopped by Ctrl-C (SIGINT)",
        "runs trained (1 of 24): rope-s1",
        f"arms evaluated (0 of {len(ARMS)})",
        "Run again to resume",
    ):
        if expected not in log:
            fail(f"the interrupted study does not say {expected!r}:\n{log}")
    where = re.search(r"continue from their checkpoint: (alibi-s1) at step (\d+) of 30", log)
    if not where:
        fail(f"the interrupted study does not say where its run stopped:\n{log}")
    step_file = out / "runs" / where.group(1) / "step.txt"
    if not step_file.is_file() or step_file.read_text().split()[0] != where.group(2):
        fail(f"{step_file} does not hold the step the study reported ({where.group(2)})")
    lines = log.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Run again to resume, from "))
    folder = lines[at].removeprefix("Run again to resume, from ").rstrip(":")
    resume = shlex.split(lines[at + 1])
    if resume != command:
        fail(f"the resume command {resume} is not the command that started it, {command}")
    return resume, folder


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
    for heading in (
        "## Set-up",
        "## Protocols",
        "### Non-overlapping windows",
        "### Sliding window",
        "## Beside the published shapes",
        "## YaRN's beta for this model",
        "## NoPE",
        "## Training and fine-tuning",
    ):
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
    whole, interrupted, ctrl_c = work / "whole", work / "interrupted", work / "ctrl-c"

    code, log = run(binary, whole)
    if code != 0:
        fail(f"posenc_study --quick exited with {code}:\n{log}")
    for expected in ("BLAS:", "step", "loss", "left", "evaluated", "STUDY.md"):
        if expected not in log:
            fail(f"the progress output does not mention {expected!r}:\n{log}")
    check_artefacts(whole)

    # Stop in the middle of the second run (30 steps each, checkpoints every 20, and where it
    # stops), then resume.
    code, log = run(binary, interrupted, "--stop-after-steps", "55")
    if code != 3 or "Run again to resume" not in log:
        fail(f"--stop-after-steps 55 should stop with exit code 3, got {code}:\n{log}")
    if "alibi-s1 at step 25 of 30" not in log:
        fail(f"the stopped study does not say where it stopped:\n{log}")
    if not (interrupted / "runs" / "alibi-s1" / "checkpoint.pt").is_file():
        fail("the interrupted run left no checkpoint to resume from")
    code, log = run(binary, interrupted)
    if code != 0 or "rope-s1: finished earlier, kept" not in log:
        fail(f"the resumed study did not keep the finished run:\n{log}")
    same_results(whole, interrupted, "resumed")
    check_artefacts(interrupted)

    # Ctrl-C, then the command it prints.
    resume, folder = interrupt_with_ctrl_c(binary, ctrl_c)
    result = subprocess.run(resume, cwd=folder, capture_output=True, text=True, timeout=600)
    if result.returncode != 0 or "rope-s1: finished earlier, kept" not in result.stdout:
        fail(f"the printed resume command failed:\n{result.stdout}{result.stderr}")
    same_results(whole, ctrl_c, "Ctrl-C and resumed")
    check_artefacts(ctrl_c)

    code, log = run(binary, interrupted)  # a finished study only rewrites its report
    if code != 0 or "step" in log.replace("steps", ""):
        fail(f"a finished study trained again:\n{log}")
    print(
        "study --quick: every artefact present and well formed; a study stopped by "
        "--stop-after-steps and one stopped by Ctrl-C resumed to the same losses and results"
    )


if __name__ == "__main__":
    main()
