// posenc bench's arithmetic on its rounds, kept apart from the timing so that it can be tested on
// made-up numbers: per-round ratios of a kernel to the baseline measured in the same round, their
// median and spread, and the warnings that say when the figures should not be believed (the
// baseline moved between rounds, or other processes shared the machine).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace posenc::cli::bench_stats {

// A quiet machine repeats the bandwidth and FMA loops within a few percent from one round to the
// next; under another process the in-place bandwidth read anywhere from 25 to 100 GB/s within
// minutes. A baseline whose slowest round is more than 1.25x its fastest has moved far beyond
// quiet noise, and every ratio to it then says as much about the neighbours as about the kernel.
constexpr double kMaxBaselineDrift = 1.25;

// Busy before the run: a load average (last minute) above a quarter of a task per core. On a
// 2-core machine that is 0.5: one core busy half the time, enough to slow a 2-thread kernel
// whose threads wait for each other at every split.
constexpr double kBusyLoadPerCore = 0.25;

// Busy during the run: other processes (or the hypervisor's other guests, as steal time) took
// more than a tenth of the machine's CPU time.
constexpr double kBusyCpuShare = 0.10;

// A sample's median, smallest and largest value, and how many values it had.
struct Spread {
  double median = 0, min = 0, max = 0;
  size_t rounds = 0;
};

// The median (the mean of the middle two for an even count), min and max; all zero when empty.
Spread Summarize(std::vector<double> values);

// Per-round ratios of two rates: round r gives (work / kernel_s[r]) / (baseline_work /
// baseline_s[r]), the kernel's rate over the baseline's rate in the same round. A case timed in
// fewer rounds than its baseline (the slow ones) pairs its rounds with the baseline's first ones,
// which ran in the same rounds.
std::vector<double> RateRatios(const std::vector<double>& kernel_s, double work,
                               const std::vector<double>& baseline_s, double baseline_work);

// Per-round ratios of times: the kernel's time over the time the baseline needs for floor_work at
// its rate of the same round (a decode step over one read of its KV cache): the inverse of
// RateRatios.
std::vector<double> TimeRatios(const std::vector<double>& kernel_s, double floor_work,
                               const std::vector<double>& baseline_s, double baseline_work);

// How far a baseline moved between rounds: its slowest round over its fastest (1 when steady or
// with fewer than two rounds).
double Drift(const std::vector<double>& seconds);

// One baseline's per-round times, for the drift warning.
struct Baseline {
  std::string name;  // "in-place bandwidth"
  std::vector<double> seconds;
};

// /proc/loadavg at one moment: the load average of the last minute and the runnable tasks,
// less the runnable threads of this process itself.
struct LoadSample {
  bool valid = false;
  double load_1m = 0;
  int runnable_others = 0;
};

// Parses /proc/loadavg ("0.52 0.58 0.59 3/812 12345"); own_runnable is subtracted from the
// runnable count (never below zero). Invalid when the text does not parse.
LoadSample ParseLoadavg(std::string_view text, int own_runnable);

// The aggregate line of /proc/stat in clock ticks: time busy (user, nice, system, irq, softirq)
// and time stolen by the hypervisor.
struct CpuTimes {
  bool valid = false;
  double busy_ticks = 0, steal_ticks = 0;
};

CpuTimes ParseProcStat(std::string_view text);

// The machine around a run: load before and after, and the share of all cores' time that other
// processes (busy time less this process's own CPU time) and the hypervisor (steal) took during
// it; a share is negative when unknown.
struct MachineLoad {
  int cores = 0;
  LoadSample before, after;
  double others_share = -1, steal_share = -1;
};

// The shares of MachineLoad from /proc/stat before and after a run, this process's CPU seconds
// (user + system) over the run, its wall seconds, the cores and the clock ticks per second.
void SetShares(const CpuTimes& before, const CpuTimes& after, double own_cpu_s, double wall_s,
               double ticks_per_s, MachineLoad& load);

// Why the figures may not be believed, one sentence each (empty: no reason found): each baseline
// that drifted more than kMaxBaselineDrift, a load above kBusyLoadPerCore per core before the
// run, other runnable tasks before or after it, other processes or steal above kBusyCpuShare
// during it. The load after the run is reported, not judged: the run itself raised it.
std::vector<std::string> Warnings(const std::vector<Baseline>& baselines, const MachineLoad& load);

// Reads /proc/loadavg and this process's runnable threads now (an invalid sample where /proc is
// missing).
LoadSample SampleLoad();

// Reads /proc/stat now.
CpuTimes SampleCpuTimes();

}  // namespace posenc::cli::bench_stats
