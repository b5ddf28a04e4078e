"""How fast posenc serve answers each panel's default request.

Starts `posenc serve --port 0`, warms every endpoint up, then times each default request (the
one the page makes when it opens) round-robin, and prints the best and the median per endpoint.

    /usr/bin/python3 bench/serve_requests.py [--posenc build/tools/posenc] [--rounds 50]
"""

import argparse
import re
import select
import signal
import statistics
import subprocess
import time
import urllib.request

DEFAULTS = {  # what the page asks for when it opens
    "waves": "api/waves?d=64&base=10000&position=0&span=100&columns=0,8,16,32",
    "similarity": "api/similarity?query=20",
    "order": "api/order?tokens=the,cat,sat,on,the,mat",
    "rope": "api/rope?position=5&pair=0",
    "stretch": "api/stretch?rope_type=yarn&factor=4&original=4096",
    "alibi": "api/alibi?heads=8",
    "checks": "api/checks",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posenc", default="build/tools/posenc")
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    server = subprocess.Popen(
        [args.posenc, "serve", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        ready, _, _ = select.select([server.stdout], [], [], 30)
        url = re.search(r"http://\S+/", server.stdout.readline()).group(0) if ready else None
        if url is None:
            raise SystemExit("posenc serve printed no URL")
        times = {name: [] for name in DEFAULTS}
        for _ in range(args.rounds + 1):  # the first round warms up and is dropped
            for name, path in DEFAULTS.items():
                start = time.perf_counter()
                with urllib.request.urlopen(url + path, timeout=30) as response:
                    response.read()
                times[name].append(time.perf_counter() - start)
        print(f"{'endpoint':<12} {'best':>9} {'median':>9}   ({args.rounds} rounds, round-robin)")
        for name, samples in times.items():
            samples = samples[1:]
            fastest, median = min(samples) * 1e3, statistics.median(samples) * 1e3
            print(f"{name:<12} {fastest:6.2f} ms {median:6.2f} ms")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
