"""Tests of run_doc_blocks.py, the runner of the documentation's runnable blocks: which blocks it
takes, the directory and environment it runs them in, and that a broken block fails the run
with its file, line, code and output (tests/docs/fixture.md holds two broken blocks)."""

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run_doc_blocks as docs  # noqa: E402

RUNNER = HERE / "run_doc_blocks.py"
FIXTURE = HERE / "fixture.md"


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, str(RUNNER), "--python", sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def test_extracts_marked_blocks_only():
    blocks = docs.extract(FIXTURE.read_text(), "fixture.md")
    assert [(b.line, b.kind) for b in blocks] == [
        (12, "sh"),
        (17, "python"),
        (22, "sh"),
        (29, "python"),
    ]
    assert blocks[0].code == 'echo "shell block ran"\n'
    assert all("exit 7" not in b.code for b in blocks)


def test_fences_of_every_form():
    text = "\n".join(
        [
            "<!-- runnable -->",
            "~~~bash",
            "echo tilde",
            "~~~",
            "<!-- runnable -->",
            "````python",
            "```",
            "print('inner fence')",
            "```",
            "````",
            "<!-- runnable -->",
            "   ```shell",
            "   echo indented",
            "   ```",
            "```python",
            "<!-- runnable --> inside an unmarked block is just text",
            "```",
        ]
    )
    blocks = docs.extract(text)
    assert [(b.line, b.kind, b.code) for b in blocks] == [
        (2, "sh", "echo tilde\n"),
        (6, "python", "```\nprint('inner fence')\n```\n"),
        (12, "sh", "echo indented\n"),
    ]


@pytest.mark.parametrize(
    "text, line",
    [
        ("<!-- runnable -->\n```cpp\nint main() {}\n```\n", 1),  # a language that does not run
        ("<!-- runnable -->\n```\necho\n```\n", 1),  # no language
        ("<!-- runnable -->\n\n```sh\necho\n```\n", 1),  # not right before the fence
        ("text\n<!-- runnable -->\n", 2),  # at the end
    ],
)
def test_a_stray_marker_is_an_error(text, line):
    with pytest.raises(docs.DocError, match=rf"^doc.md:{line}: "):
        docs.extract(text, "doc.md")


def test_a_broken_block_fails_the_run_with_file_line_code_and_output():
    done = run(str(FIXTURE))
    assert done.returncode == 1
    assert "ok      " in done.stdout and "2 of 4 runnable blocks passed" in done.stdout
    fixture = str(FIXTURE)
    # The shell block stops at its first failing command (bash -euo pipefail).
    assert f"{fixture}:22: sh block exited with status 1" in done.stderr
    assert "   24  false" in done.stderr
    shell_output = done.stderr.split("--- output ---\n")[1].split("--- end of output ---")[0]
    assert shell_output == "before the break\n"
    assert f"{fixture}:29: python block exited with status 1" in done.stderr
    assert "before the exception" in done.stderr
    assert "RuntimeError: deliberately broken" in done.stderr
    assert "line 31, in <module>" in done.stderr  # the traceback's line is the file's
    # The good blocks and the unmarked one are not reported.
    assert ":12:" not in done.stderr and ":17:" not in done.stderr and "exit 7" not in done.stderr


def test_good_blocks_pass(tmp_path):
    doc = tmp_path / "good.md"
    doc.write_text(
        "<!-- runnable -->\n```sh\ntrue | cat\n```\n"
        "<!-- runnable -->\n```python\nassert 1 + 1 == 2\n```\n"
    )
    done = run(str(doc))
    assert done.returncode == 0, done.stderr
    assert "2 of 2 runnable blocks passed" in done.stdout


def test_pipefail_and_unset_variables_fail(tmp_path):
    doc = tmp_path / "strict.md"
    doc.write_text(
        "<!-- runnable -->\n```sh\nfalse | cat\n```\n"
        '<!-- runnable -->\n```sh\necho "$NOT_SET_ANYWHERE"\n```\n'
    )
    done = run(str(doc))
    assert done.returncode == 1
    assert "0 of 2 runnable blocks passed" in done.stdout


def test_a_stray_marker_fails_the_run(tmp_path):
    doc = tmp_path / "stray.md"
    doc.write_text("<!-- runnable -->\n```cpp\nint main() {}\n```\n")
    done = run(str(doc))
    assert done.returncode == 1 and "only sh, bash, shell and python blocks run" in done.stderr


def test_scratch_directory_and_environment(tmp_path):
    """Each block runs in its own directory that looks like the source root, with build/, the
    build's tools/ on PATH and its python/ on PYTHONPATH; what it writes stays there."""
    source, build = tmp_path / "source", tmp_path / "objects"
    (source / "tests" / "configs").mkdir(parents=True)
    (source / "tests" / "configs" / "model.json").write_text("{}")
    (source / "build").mkdir()  # a build tree inside the checkout: not linked
    (build / "tools").mkdir(parents=True)
    (build / "python").mkdir()
    tool = build / "tools" / "posenc"
    tool.write_text('#!/bin/sh\necho "fake posenc $*"\n')
    tool.chmod(0o755)
    (build / "python" / "fakepkg.py").write_text("NAME = 'from the build tree'\n")
    doc = source / "README.md"
    doc.write_text(
        "\n".join(
            [
                "<!-- runnable -->",
                "```sh",
                "test -f tests/configs/model.json",
                "build/tools/posenc inspect tests/configs/model.json",
                "posenc alibi",  # the tools dir is on PATH
                'test "$(readlink -f build)" = "$EXPECTED_BUILD"',
                "test ! -e written.txt                 # each block starts in a fresh directory",
                "echo hello > written.txt",
                "```",
                "<!-- runnable -->",
                "```python",
                "import os, fakepkg",
                "assert fakepkg.NAME == 'from the build tree'",
                "assert not os.path.exists('written.txt')",
                "open('written.txt', 'w').write('python')",
                "```",
                "",
            ]
        )
    )
    env = dict(os.environ, EXPECTED_BUILD=str(build.resolve()))
    done = subprocess.run(
        [
            sys.executable,
            str(RUNNER),
            "--python",
            sys.executable,
            "--source",
            str(source),
            "--build",
            str(build),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      README.md:2 (sh, " in done.stdout
    assert "2 of 2 runnable blocks passed" in done.stdout
    assert not (source / "written.txt").exists() and not (build / "written.txt").exists()
