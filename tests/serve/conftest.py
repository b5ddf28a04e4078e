"""The server the tests talk to: `posenc serve --port 0`, one per test module, stopped with
Ctrl-C (SIGINT) at the end, which must exit cleanly."""

import os
import re
import select
import signal
import subprocess

import pytest

POSENC = os.environ.get("POSENC_CLI", "build/tools/posenc")


def start_server():
    """(process, URL) of a new `posenc serve --port 0`, once it has printed its URL."""
    process = subprocess.Popen(
        [POSENC, "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ready, _, _ = select.select([process.stdout], [], [], 30)
    assert ready, "posenc serve printed no URL within 30 s"
    line = process.stdout.readline()
    url = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert url, f"no URL in {line!r}"
    return process, url.group(0)


@pytest.fixture(scope="module")
def server_process():
    process = None
    try:
        process, url = start_server()
        yield process, url
        process.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = process.communicate(timeout=20)
        assert process.returncode == 0, err
        assert "posenc serve: stopped" in out
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(server_process):
    return server_process[1]
