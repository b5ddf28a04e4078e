#include "bench_stats.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace posenc::cli::bench_stats {

Spread Summarize(std::vector<double> values) {
  Spread s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.rounds = n;
  s.min = values.front();
  s.max = values.back();
  s.median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return s;
}

std::vector<double> RateRatios(const std::vector<double>& kernel_s, double work,
                               const std::vector<double>& baseline_s, double baseline_work) {
  std::vector<double> ratios;
  const size_t n = std::min(kernel_s.size(), baseline_s.size());
  for (size_t r = 0; r < n; ++r) {
    if (kernel_s[r] <= 0 || baseline_s[r] <= 0 || baseline_work <= 0) continue;
    ratios.push_back((work / kernel_s[r]) / (baseline_work / baseline_s[r]));
  }
  return ratios;
}

std::vector<double> TimeRatios(const std::vector<double>& kernel_s, double floor_work,
                               const std::vector<double>& baseline_s, double baseline_work) {
  std::vector<double> ratios = RateRatios(kernel_s, floor_work, baseline_s, baseline_work);
  for (double& r : ratios) r = 1.0 / r;
  return ratios;
}

double Drift(const std::vector<double>& seconds) {
  if (seconds.size() < 2) return 1.0;
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  return *lo > 0 ? *hi / *lo : 1.0;
}

LoadSample ParseLoadavg(std::string_view text, int own_runnable) {
  LoadSample s;
  std::istringstream in{std::string(text)};
  double five = 0, fifteen = 0;
  std::string tasks;
  if (!(in >> s.load_1m >> five >> fifteen >> tasks)) return s;
  const size_t slash = tasks.find('/');
  if (slash == std::string::npos || slash == 0) return s;
  int runnable = 0;
  try {
    runnable = std::stoi(tasks.substr(0, slash));
  } catch (...) {
    return s;
  }
  s.runnable_others = std::max(0, runnable - own_runnable);
  s.valid = true;
  return s;
}

CpuTimes ParseProcStat(std::string_view text) {
  CpuTimes t;
  std::istringstream in{std::string(text)};
  std::string label;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq) ||
      label != "cpu") {
    return t;
  }
  if (!(in >> steal)) steal = 0;  // kernels before 2.6.11 have no steal column
  t.busy_ticks = user + nice + system + irq + softirq;
  t.steal_ticks = steal;
  t.valid = true;
  return t;
}

void SetShares(const CpuTimes& before, const CpuTimes& after, double own_cpu_s, double wall_s,
               double ticks_per_s, MachineLoad& load) {
  if (!before.valid || !after.valid || wall_s <= 0 || ticks_per_s <= 0 || load.cores <= 0) return;
  const double machine_s = wall_s * load.cores;
  const double busy_s = (after.busy_ticks - before.busy_ticks) / ticks_per_s;
  // Clock ticks are coarse (10 ms): a short run can count less busy time than its own CPU time.
  load.others_share = std::max(0.0, busy_s - own_cpu_s) / machine_s;
  load.steal_share =
      std::max(0.0, (after.steal_ticks - before.steal_ticks) / ticks_per_s) / machine_s;
}

std::vector<std::string> Warnings(const std::vector<Baseline>& baselines, const MachineLoad& load) {
  std::vector<std::string> warnings;
  char text[240];
  for (const Baseline& b : baselines) {
    const double drift = Drift(b.seconds);
    if (drift > kMaxBaselineDrift) {
      std::snprintf(text, sizeof text, "the %s baseline moved %.2fx between rounds (limit %.2fx)",
                    b.name.c_str(), drift, kMaxBaselineDrift);
      warnings.push_back(text);
    }
  }
  if (load.before.valid && load.cores > 0 && load.before.load_1m > kBusyLoadPerCore * load.cores) {
    std::snprintf(text, sizeof text, "load average %.2f on %d cores before the run",
                  load.before.load_1m, load.cores);
    warnings.push_back(text);
  }
  for (const auto& [when, sample] : {std::pair{"before", &load.before}, {"after", &load.after}}) {
    if (sample->valid && sample->runnable_others > 0) {
      std::snprintf(text, sizeof text, "%d other runnable task%s %s the run",
                    sample->runnable_others, sample->runnable_others == 1 ? "" : "s", when);
      warnings.push_back(text);
    }
  }
  if (load.others_share > kBusyCpuShare) {
    std::snprintf(text, sizeof text, "other processes took %.0f%% of the CPU time during the run",
                  100 * load.others_share);
    warnings.push_back(text);
  }
  if (load.steal_share > kBusyCpuShare) {
    std::snprintf(text, sizeof text, "the hypervisor stole %.0f%% of the CPU time during the run",
                  100 * load.steal_share);
    warnings.push_back(text);
  }
  return warnings;
}

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Threads of this process in state R (running or runnable): the reader itself, and OpenMP
// workers still spinning after a parallel region.
int OwnRunnableThreads() {
  int runnable = 0;
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
    const std::string stat = ReadAll((task.path() / "stat").string());
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'R') {
      ++runnable;
    }
  }
  return std::max(runnable, 1);
}

}  // namespace

LoadSample SampleLoad() {
  // The runnable count is one instant: take the median of five, 20 ms apart. Our own threads are
  // read first: a worker that stops spinning in between is then not counted as another's task.
  std::vector<LoadSample> samples;
  for (int i = 0; i < 5; ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int own = OwnRunnableThreads();
    samples.push_back(ParseLoadavg(ReadAll("/proc/loadavg"), own));
    if (!samples.back().valid) return samples.back();
  }
  std::sort(samples.begin(), samples.end(), [](const LoadSample& a, const LoadSample& b) {
    return a.runnable_others < b.runnable_others;
  });
  LoadSample median = samples[2];
  median.load_1m = samples.front().load_1m;
  for (const LoadSample& s : samples) median.load_1m = std::max(median.load_1m, s.load_1m);
  return median;
}

CpuTimes SampleCpuTimes() { return ParseProcStat(ReadAll("/proc/stat")); }

}  // namespace posenc::cli::bench_stats
