#!/usr/bin/env python3
"""The study over MPI: `mpirun -n 2 posenc_study --quick` must give exactly what one process
gives. Runs the quick study once alone and once over two ranks (with one libtorch thread each, so
that both sum in the same order: the thread count changes the last bits of the evaluation), then
compares every result, every loss log (but its timings) and the report (but its timing line).

usage: study_mpi_test.py MPIEXEC POSENC_STUDY WORK_DIR
"""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

TIMEOUT = 400  # seconds per study; the ctest TIMEOUT is above twice this


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(command):
    # A session of its own, so that a timeout ends mpirun and every rank, leaving nothing behind.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        log, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        fail(f"{' '.join(command)} ran past {TIMEOUT} s")
    if process.returncode != 0:
        fail(f"{' '.join(command)} exited with {process.returncode}:\n{log}")
    return log


def results(out):
    found = {}
    for path in sorted((out / "results").glob("*.json")):
        found[path.name] = json.loads(path.read_text())["nats_per_char"]
    return found


def loss_logs(out):
    found = {}
    for run_dir in sorted((out / "runs").iterdir()):
        rows = [line.split("\t") for line in (run_dir / "loss.tsv").read_text().splitlines()]
        found[run_dir.name] = [row[:2] + row[3:] for row in rows]  # column 3: seconds
    return found


def report(out):
    lines = (out / "docs" / "STUDY.md").read_text().splitlines()
    return [line for line in lines if not line.startswith("Machine:")]  # threads and timings


def main():
    mpiexec, binary, work = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    shutil.rmtree(work, ignore_errors=True)
    alone, ranks = work / "alone", work / "ranks"
    common = ["--quick", "--threads", "1"]
    run([binary, *common, "--out", str(alone)])
    log = run([mpiexec, "-n", "2", "--oversubscribe", "--allow-run-as-root", binary, *common,
               "--out", str(ranks)])
    if "2 MPI ranks" not in log or "rank 1:" not in log:
        fail(f"the study did not run over two ranks:\n{log}")

    a, b = results(alone), results(ranks)
    if len(a) != 28 or sorted(a) != sorted(b):
        fail(f"result files differ: {sorted(a)} against {sorted(b)}")
    for name in a:
        if a[name] != b[name]:
            fail(f"{name}: one process gave {a[name]}, two ranks {b[name]}")
    a, b = loss_logs(alone), loss_logs(ranks)
    if sorted(a) != sorted(b):
        fail(f"runs differ: {sorted(a)} against {sorted(b)}")
    for name in a:
        if a[name] != b[name]:
            fail(f"{name}: the loss logs differ:\n{a[name]}\n{b[name]}")
    if report(alone) != report(ranks):
        fail("STUDY.md differs beyond its machine line")
    print(f"study --quick over 2 MPI ranks: {len(a)} runs and every result identical to one process")


if __name__ == "__main__":
    main()
