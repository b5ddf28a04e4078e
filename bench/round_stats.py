"""Round statistics and machine conditions for the Python benchmarks, by the rules `posenc bench`
follows (tools/bench_stats.h and docs/PERFORMANCE.md, "Reading posenc bench"): a ratio is taken
round by round between two things timed in the same round, and reported as the median of those
per-round ratios with their min-max; warnings say when the figures should not be believed (the
baseline drifted more than 1.25x between rounds, or the machine was busy before or during the run).
The CPU is named by the posenc CLI (CPUID: microarchitecture and extensions) where it is found,
else from /proc/cpuinfo.
"""

import json
import os
import subprocess
import time

# The thresholds of tools/bench_stats.h (kMaxBaselineDrift, kBusyLoadPerCore, kBusyCpuShare).
MAX_BASELINE_DRIFT = 1.25
BUSY_LOAD_PER_CORE = 0.25
BUSY_CPU_SHARE = 0.10


def summarize(values):
    """(median, min, max) of a non-empty sample; the median of an even count is the mean of the
    middle two."""
    s = sorted(values)
    n = len(s)
    median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return median, s[0], s[-1]


def drift(seconds):
    """A baseline's slowest round over its fastest (1 with fewer than two rounds)."""
    return max(seconds) / min(seconds) if len(seconds) > 1 else 1.0


def _read(path):
    with open(path) as f:
        return f.read()


def _own_runnable_threads():
    """This process's threads in state R: the reader itself and OpenMP workers still spinning."""
    runnable = 0
    for task in os.listdir("/proc/self/task"):
        try:
            stat = _read(f"/proc/self/task/{task}/stat")
        except OSError:
            continue
        paren = stat.rfind(")")
        runnable += stat[paren + 2 : paren + 3] == "R"
    return max(runnable, 1)


def sample_load():
    """(1-minute load average, other runnable tasks): the highest load and the median runnable
    count of five samples 20 ms apart, this process's own runnable threads subtracted."""
    loads, others = [], []
    for i in range(5):
        if i:
            time.sleep(0.02)
        own = _own_runnable_threads()
        fields = _read("/proc/loadavg").split()
        loads.append(float(fields[0]))
        others.append(max(0, int(fields[3].split("/")[0]) - own))
    return max(loads), sorted(others)[2]


def _cpu_ticks():
    """(busy, steal) clock ticks of all cores from /proc/stat's first line."""
    fields = [float(x) for x in _read("/proc/stat").split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return user + nice + system + irq + softirq, fields[7] if len(fields) > 7 else 0.0


class MachineWatch:
    """The machine around a run: load before and after, and the share of all cores' time that
    other processes and the hypervisor (steal) took during it."""

    def __init__(self):
        self.cores = os.cpu_count() or 1
        self.before = sample_load()
        self._ticks = _cpu_ticks()
        self._own = time.process_time()
        self._wall = time.perf_counter()
        self.after = None
        self.others_share = self.steal_share = None

    def stop(self):
        busy, steal = _cpu_ticks()
        own_s = time.process_time() - self._own
        machine_s = (time.perf_counter() - self._wall) * self.cores
        hz = os.sysconf("SC_CLK_TCK")
        # Clock ticks are coarse (10 ms): a short run can count less busy time than its own.
        self.others_share = max(0.0, (busy - self._ticks[0]) / hz - own_s) / machine_s
        self.steal_share = max(0.0, (steal - self._ticks[1]) / hz) / machine_s
        self.after = sample_load()

    def describe(self):
        text = (
            f"load average {self.before[0]:.2f} before, {self.after[0]:.2f} after, on "
            f"{self.cores} cores; other runnable tasks {self.before[1]} before, "
            f"{self.after[1]} after"
        )
        return text + (
            f"; during the run other processes took {100 * self.others_share:.0f}% "
            f"of the CPU time, the hypervisor stole {100 * self.steal_share:.0f}%"
        )

    def warnings(self, baselines):
        """Sentences saying why the figures may not be believed; baselines: {name: seconds per
        round}. The load after the run is reported, not judged: the run itself raised it."""
        out = [
            f"the {name} baseline moved {drift(s):.2f}x between rounds (limit "
            f"{MAX_BASELINE_DRIFT:.2f}x)"
            for name, s in baselines.items()
            if drift(s) > MAX_BASELINE_DRIFT
        ]
        if self.before[0] > BUSY_LOAD_PER_CORE * self.cores:
            out.append(f"load average {self.before[0]:.2f} on {self.cores} cores before the run")
        for when, (_, others) in (("before", self.before), ("after", self.after)):
            if others:
                out.append(f"{others} other runnable task{'s' * (others != 1)} {when} the run")
        if self.others_share > BUSY_CPU_SHARE:
            out.append(
                f"other processes took {100 * self.others_share:.0f}% of the CPU time "
                "during the run"
            )
        if self.steal_share > BUSY_CPU_SHARE:
            out.append(
                f"the hypervisor stole {100 * self.steal_share:.0f}% of the CPU time during the run"
            )
        return out


def _posenc_cli(explicit):
    """The posenc CLI: the one given, $POSENC_CLI, or the one of the build tree whose python/
    folder this posenc package was imported from."""
    if explicit:
        return explicit
    if os.environ.get("POSENC_CLI"):
        return os.environ["POSENC_CLI"]
    import posenc

    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(posenc.__file__))))
    candidate = os.path.join(build, "tools", "posenc")
    return candidate if os.access(candidate, os.X_OK) else None


def cpu_name(posenc_cli=None):
    """'Intel(R) Xeon(R) Processor: Emerald Rapids (GenuineIntel family 6 model 0xcf stepping
    2), under a hypervisor, AVX-512 yes, AVX512-BF16 yes, AMX-BF16 no': CPUID through the posenc
    CLI's `bench --quick --json` (a few seconds, run before any timing) where the CLI is found,
    else the brand, family, model and stepping of /proc/cpuinfo (no microarchitecture)."""
    cli = _posenc_cli(posenc_cli)
    if cli:
        try:
            report = subprocess.run(
                [cli, "bench", "--quick", "--repeats", "1", "--json"],
                check=True,
                capture_output=True,
                text=True,
                timeout=120,
            )
            c = json.loads(report.stdout)["cpu"]
            yes = lambda flag: "yes" if c[flag] else "no"
            return (
                f"{c['model_name']}: {c['microarchitecture']} ({c['vendor']} family "
                f"{c['family']} model {c['model']:#x} stepping {c['stepping']})"
                f"{', under a hypervisor' if c['hypervisor'] else ''}, AVX-512 "
                f"{yes('avx512f')}, AVX512-BF16 {yes('avx512_bf16')}, AMX-BF16 "
                f"{yes('amx_bf16')}"
            )
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            pass
    info = {}
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
        if not line.strip():
            break
    flags = info.get("flags", "").split()
    yes = lambda flag: "yes" if flag in flags else "no"
    return (
        f"{info.get('model name', 'unknown CPU')} ({info.get('vendor_id', '?')} family "
        f"{info.get('cpu family', '?')} model {int(info.get('model', '0')):#x} stepping "
        f"{info.get('stepping', '?')}; microarchitecture not named: no posenc CLI), AVX-512 "
        f"{yes('avx512f')}, AVX512-BF16 {yes('avx512_bf16')}, AMX-BF16 {yes('amx_bf16')}"
    )
