#!/usr/bin/env python3
"""Runs the code blocks of the documentation that are marked as runnable.

A block is runnable when the line right before its opening fence is the HTML comment

    <!-- runnable -->

(invisible on GitHub and in any other Markdown renderer). Its fence must say `sh`, `bash`
or `shell` (run with `bash -euo pipefail`) or `python` (run with the interpreter that runs this
script, or --python). Each block runs on its own, as a reader pastes it into a fresh shell or
interpreter, in a scratch directory that looks like the repository's root: every top-level entry
of the source tree that git tracks is a symbolic link there, and `build` is the build tree, so
`build/tools/posenc` and `tests/configs/llama3.1-8b.json` resolve as they do from a checkout.
The files a block writes to new names stay in the scratch directory, which is removed after
the block. PATH starts with the build's tools/ (`posenc` alone works
too) and PYTHONPATH is the build's python/ (`import posenc`), as the README says.

Blocks that need root, the network, a GPU, a server that keeps running or minutes of time stay
unmarked. A marker before a block in another language, or not followed by a fence, is an
error, so a marker is never ignored silently.

Exit status 0 when every block ran with status 0; otherwise 1, after printing each failure
with its file, line, code and output.
"""

import argparse
import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

MARKER = "<!-- runnable -->"
SHELLS = {"sh", "bash", "shell"}
PYTHONS = {"python", "python3", "py"}
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")


class DocError(Exception):
    """A marker that does not sit on a block this runner can run."""


@dataclasses.dataclass
class Block:
    path: str  # as given (relative to the source tree when found by --source)
    line: int  # 1-based line of the opening fence
    kind: str  # "sh" or "python"
    code: str


def extract(text, path="<text>"):
    """The runnable blocks of a Markdown text, in order. Raises DocError for a stray marker."""
    lines = text.splitlines()
    blocks = []
    marked_at = None  # line index of a marker waiting for its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            indent, ticks, info = fence.group(1), fence.group(2), fence.group(3).lower()
            body = []
            j = i + 1
            while j < len(lines):
                close = lines[j].strip()
                if close.startswith(ticks[0] * len(ticks)) and set(close) == {ticks[0]}:
                    break
                body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
                j += 1
            if marked_at is not None:
                if info in SHELLS:
                    kind = "sh"
                elif info in PYTHONS:
                    kind = "python"
                else:
                    raise DocError(
                        f"{path}:{marked_at + 1}: {MARKER} marks a block in "
                        f"'{info or 'no language'}'; only sh, bash, shell and python "
                        "blocks run"
                    )
                blocks.append(Block(path, i + 1, kind, "\n".join(body) + "\n"))
                marked_at = None
            i = j + 1
            continue
        if marked_at is not None:
            raise DocError(
                f"{path}:{marked_at + 1}: {MARKER} must be the line right before a code fence"
            )
        if line.strip() == MARKER:
            marked_at = i
        i += 1
    if marked_at is not None:
        raise DocError(
            f"{path}:{marked_at + 1}: {MARKER} must be the line right before a code fence"
        )
    return blocks


def source_entries(source):
    """The top-level entries of the source tree a scratch directory links to: those git knows
    (not build trees or a demo's output folder left in a checkout, which a block would otherwise
    write into), or, outside a git checkout, every entry not hidden."""
    root = pathlib.Path(source)
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"],
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ).stdout
        names = {name.split(b"/")[0].decode() for name in listed.split(b"\0") if name}
    except (OSError, subprocess.CalledProcessError):
        names = set()
    if not names:
        names = {entry.name for entry in root.iterdir() if not entry.name.startswith(".")}
    return sorted(name for name in names if name != "build" and (root / name).exists())


def scratch_tree(directory, source, build, entries):
    """Fills directory with links to source's entries, and to build as `build`."""
    if source is not None:
        for name in entries:
            os.symlink((pathlib.Path(source) / name).resolve(), os.path.join(directory, name))
    if build is not None:
        os.symlink(pathlib.Path(build).resolve(), os.path.join(directory, "build"))


def run_block(block, *, source, build, python, timeout, entries=None):
    """Runs one block in a fresh scratch directory: (exit status, combined output)."""
    if source is not None and entries is None:
        entries = source_entries(source)
    with tempfile.TemporaryDirectory(prefix="posenc-doc-", ignore_cleanup_errors=True) as directory:
        scratch_tree(directory, source, build, entries)
        env = dict(os.environ)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if build is not None:
            build = pathlib.Path(build).resolve()
            env["PATH"] = f"{build / 'tools'}{os.pathsep}{env.get('PATH', '')}"
            env["PYTHONPATH"] = str(build / "python")
        if block.kind == "sh":
            script = os.path.join(directory, ".block.sh")
            command = ["bash", "-euo", "pipefail", script]
        else:
            script = os.path.join(directory, ".block.py")
            command = [python, script]
        with open(script, "w", encoding="utf-8") as f:
            # Blank lines first, so that an error's line number (a traceback, bash's
            # "line N") is the line in the Markdown file.
            f.write("\n" * block.line + block.code)
        try:
            done = subprocess.run(
                command,
                cwd=directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            output = (e.stdout or b"").decode("utf-8", "replace")
            return None, output + f"\n[still running after {timeout} s; stopped]\n"
        return done.returncode, done.stdout.decode("utf-8", "replace")


def report(block, status, output):
    numbered = "\n".join(
        f"{block.line + n:5d}  {code}" for n, code in enumerate(block.code.splitlines(), start=1)
    )
    what = "did not finish" if status is None else f"exited with status {status}"
    return (
        f"{block.path}:{block.line}: {block.kind} block {what}\n"
        f"{numbered}\n"
        f"--- output ---\n{output.rstrip()}\n--- end of output ---\n"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "files", nargs="*", help="Markdown files (default: README.md and docs/*.md of --source)"
    )
    parser.add_argument(
        "--source",
        help="the source tree (its top-level entries are linked into each scratch directory)",
    )
    parser.add_argument(
        "--build",
        help="the build tree: build/ in the scratch directory, its "
        "tools/ on PATH, its python/ on PYTHONPATH",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter of the python blocks (default: this one, %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=600,
        help="seconds after which a block that still runs is stopped and fails "
        "(a guard against hangs, not a time limit; default: %(default)s)",
    )
    parser.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    args = parser.parse_args(argv)

    files = [pathlib.Path(f) for f in args.files]
    if not files:
        if args.source is None:
            parser.error("give files, or --source for README.md and docs/*.md")
        root = pathlib.Path(args.source)
        files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))

    blocks = []
    try:
        for f in files:
            name = str(f)
            if args.source is not None:  # README.md, docs/PYTHON.md: as the tree names them
                inside = os.path.relpath(f, args.source)
                name = name if inside.startswith("..") else inside
            blocks += extract(f.read_text(encoding="utf-8"), name)
    except DocError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    if args.list:
        for b in blocks:
            print(f"{b.path}:{b.line}: {b.kind}, {len(b.code.splitlines())} lines")
        return 0

    entries = source_entries(args.source) if args.source is not None else None
    failures = 0
    for b in blocks:
        start = time.monotonic()
        status, output = run_block(
            b,
            source=args.source,
            build=args.build,
            python=args.python,
            timeout=args.timeout,
            entries=entries,
        )
        took = f"{time.monotonic() - start:.1f} s"  # for the reader only: nothing depends on it
        if status == 0:
            print(f"ok      {b.path}:{b.line} ({b.kind}, {took})", flush=True)
        else:
            failures += 1
            print(f"FAILED  {b.path}:{b.line} ({b.kind}, {took})", flush=True)
            print(report(b, status, output), file=sys.stderr, flush=True)
    print(f"{len(blocks) - failures} of {len(blocks)} runnable blocks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
