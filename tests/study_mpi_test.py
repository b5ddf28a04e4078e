#!/usr/bin/env python3
"""The study over MPI: `mpirun -n 2 posenc_study --quick` must give exactly what one process
gives. Runs the quick study once alone and once over two ranks (with one libtorch thread each, so
that both sum in the same order: the thread count changes the last bits of the evaluation), then
compares every result, every loss log (but its timings) and the report (but its timing line).
Then Ctrl-C on one rank: SIGINT to rank 1 must stop both ranks (exit status 130, rank 0 saying what
is kept), and the study resumed must again give exactly what one process gives.

usage: study_mpi_test.py MPIEXEC POSENC_STUDY WORK_DIR
"""

import json
import os
import pathlib
import re
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
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        log, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        fail(f"{' '.join(command)} ran past {TIMEOUT} s")
    if process.returncode != 0:
        fail(f"{' '.join(command)} exited with {process.returncode}:\n{log}")
    return log


def rank_process(launcher, rank):
    """The process of `rank` among the children of the MPI launcher."""
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            environ = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == launcher and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(stat.parent.name)
    fail(f"no process of rank {rank} under mpirun")


def interrupt_rank_1(command):
    """Runs `command` (two ranks, a checkpoint after every step) and sends SIGINT to rank 1 once it
    has logged steps of its first run: both ranks must stop, and rank 0 say how to resume."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    log = ""
    try:
        for line in process.stdout:
            log += line
            if re.search(r"^rank 1: .* step +10/30", line):
                os.kill(rank_process(process.pid, 1), signal.SIGINT)
                break
        log += process.stdout.read()
        code = process.wait(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    if code != 130:
        fail(f"SIGINT to rank 1 should end the job with exit status 130, got {code}:\n{log}")
    for expected in (
        "rank 0: stopped by Ctrl-C (SIGINT)",
        "rank 1: stopped by Ctrl-C (SIGINT)",
        "posenc_study: stopped by Ctrl-C (SIGINT)",
        "Run again to resume",
    ):
        if expected not in log:
            fail(f"the interrupted job does not say {expected!r}:\n{log}")


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
    log = run(
        [
            mpiexec,
            "-n",
            "2",
            "--oversubscribe",
            "--allow-run-as-root",
            binary,
            *common,
            "--out",
            str(ranks),
        ]
    )
    if "2 MPI ranks" not in log or "rank 1:" not in log:
        fail(f"the study did not run over two ranks:\n{log}")

    a, b = results(alone), results(ranks)
    if len(a) != 40 or sorted(a) != sorted(b):  # the quick study's 20 arms x 2 seeds
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

    stopped = work / "stopped"
    command = [
        mpiexec,
        "-n",
        "2",
        "--oversubscribe",
        "--allow-run-as-root",
        binary,
        *common,
        "--out",
        str(stopped),
        "--checkpoint-seconds",
        "0",
    ]
    interrupt_rank_1(command)
    run(command)
    if results(alone) != results(stopped) or loss_logs(alone) != loss_logs(stopped):
        fail("the study stopped by SIGINT on rank 1 and resumed differs from one process")
    print(
        f"study --quick over 2 MPI ranks: {len(a)} runs and every result identical to one "
        "process, also when stopped by SIGINT on one rank and resumed"
    )


if __name__ == "__main__":
    main()
