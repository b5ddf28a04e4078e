// posenc bench's arithmetic on made-up rounds (tools/bench_stats.h) and its CPU naming
// (posenc/cpu.h): no timing, no machine.
#include "bench_stats.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "posenc/cpu.h"

namespace posenc::cli::bench_stats {
namespace {

TEST(BenchStats, SummarizeGivesMedianMinMax) {
  Spread s = Summarize({3.0, 1.0, 2.0});
  EXPECT_EQ(s.rounds, 3u);
  EXPECT_DOUBLE_EQ(s.median, 2.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
  s = Summarize({4.0, 1.0, 3.0, 2.0});
  EXPECT_DOUBLE_EQ(s.median, 2.5);  // the mean of the middle two
  s = Summarize({});
  EXPECT_EQ(s.rounds, 0u);
  EXPECT_DOUBLE_EQ(s.median, 0.0);
}

TEST(BenchStats, RateRatiosPairTheSameRound) {
  // The kernel moves 2 bytes in 1 s (2 B/s), the baseline 4 bytes in 1 s, then in 2 s.
  const std::vector<double> r = RateRatios({1.0, 1.0}, 2.0, {1.0, 2.0}, 4.0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[1], 1.0);
  // A case timed in fewer rounds than its baseline pairs with the baseline's first rounds.
  EXPECT_EQ(RateRatios({1.0}, 1.0, {1.0, 1.0, 1.0}, 1.0).size(), 1u);
  // Times are the inverse: a decode step of 3 s against a floor the baseline reads in 1 s.
  const std::vector<double> t = TimeRatios({3.0}, 4.0, {1.0}, 4.0);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_DOUBLE_EQ(t[0], 3.0);
}

TEST(BenchStats, PerRoundRatiosFollowABaselineThatMovesWithTheKernel) {
  // Another process halves the machine's speed in round 3: kernel and baseline both take twice
  // as long there. The ratio of bests would pair round 1's kernel with round 1's baseline by
  // luck; the per-round ratios stay 0.5 in every round.
  const std::vector<double> baseline = {1.0, 1.0, 2.0, 1.0, 1.0};
  const std::vector<double> kernel = {2.0, 2.0, 4.0, 2.0, 2.0};
  const Spread s = Summarize(RateRatios(kernel, 1.0, baseline, 1.0));
  EXPECT_DOUBLE_EQ(s.median, 0.5);
  EXPECT_DOUBLE_EQ(s.min, 0.5);
  EXPECT_DOUBLE_EQ(s.max, 0.5);
}

TEST(BenchStats, MedianOfRatiosIsRobustToOneSlowRound) {
  // The kernel alone is slowed 10x in one round (a neighbour woke up during it): the median
  // keeps the quiet rounds' ratio and the spread shows the outlier.
  const std::vector<double> baseline = {1.0, 1.0, 1.0, 1.0, 1.0};
  const std::vector<double> kernel = {2.0, 2.0, 20.0, 2.0, 2.0};
  const Spread s = Summarize(RateRatios(kernel, 1.0, baseline, 1.0));
  EXPECT_DOUBLE_EQ(s.median, 0.5);
  EXPECT_DOUBLE_EQ(s.min, 0.05);
  EXPECT_DOUBLE_EQ(s.max, 0.5);
}

TEST(BenchStats, BaselineThatDoublesInRoundThreeWarns) {
  const std::vector<Baseline> moved = {{"in-place bandwidth", {1.0, 1.0, 2.0, 1.0}}};
  EXPECT_DOUBLE_EQ(Drift(moved[0].seconds), 2.0);
  MachineLoad quiet;
  quiet.cores = 2;
  const std::vector<std::string> w = Warnings(moved, quiet);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("in-place bandwidth"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("2.00x"), std::string::npos) << w[0];
}

TEST(BenchStats, SteadyBaselineAndQuietMachineGiveNoWarning) {
  const std::vector<Baseline> steady = {
      {"in-place bandwidth", {1.0, 1.1, 1.05}}, {"FMA peak", {2.0, 2.0}}, {"KV-cache read", {}}};
  EXPECT_DOUBLE_EQ(Drift({}), 1.0);
  EXPECT_DOUBLE_EQ(Drift({5.0}), 1.0);
  MachineLoad load;
  load.cores = 2;
  load.before = ParseLoadavg("0.10 0.20 0.30 1/200 999", 1);
  load.after = ParseLoadavg("1.90 0.80 0.40 3/200 999", 3);  // our own run raised the load
  load.others_share = 0.02;
  load.steal_share = 0.0;
  EXPECT_TRUE(Warnings(steady, load).empty());
  // Just above the limit warns.
  EXPECT_EQ(Warnings({{"FMA peak", {1.0, kMaxBaselineDrift * 1.01}}}, load).size(), 1u);
}

TEST(BenchStats, BusyMachineWarns) {
  MachineLoad load;
  load.cores = 2;
  load.before = ParseLoadavg("2.92 5.13 5.24 3/100 9030", 1);  // two others running
  load.after = ParseLoadavg("3.00 5.00 5.00 2/100 9031", 2);
  load.others_share = 0.45;
  load.steal_share = 0.2;
  const std::vector<std::string> w = Warnings({}, load);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_NE(w[0].find("load average 2.92 on 2 cores"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("2 other runnable tasks before"), std::string::npos) << w[1];
  EXPECT_NE(w[2].find("45%"), std::string::npos) << w[2];
  EXPECT_NE(w[3].find("stole 20%"), std::string::npos) << w[3];
}

TEST(BenchStats, ParsesProcFiles) {
  LoadSample s = ParseLoadavg("0.52 0.58 0.59 3/812 12345\n", 1);
  EXPECT_TRUE(s.valid);
  EXPECT_DOUBLE_EQ(s.load_1m, 0.52);
  EXPECT_EQ(s.runnable_others, 2);
  EXPECT_EQ(ParseLoadavg("0.52 0.58 0.59 1/812 12345", 4).runnable_others, 0);  // never < 0
  EXPECT_FALSE(ParseLoadavg("", 1).valid);
  EXPECT_FALSE(ParseLoadavg("garbage", 1).valid);

  const CpuTimes before = ParseProcStat("cpu  100 0 50 1000 5 0 10 40 0 0\ncpu0 1 2 3\n");
  ASSERT_TRUE(before.valid);
  EXPECT_DOUBLE_EQ(before.busy_ticks, 160);
  EXPECT_DOUBLE_EQ(before.steal_ticks, 40);
  EXPECT_FALSE(ParseProcStat("intr 1 2 3").valid);
  // 10 s on 2 cores; 1200 busy ticks at 100 per second (12 s), of which our own 8 s; 100 steal.
  const CpuTimes after = ParseProcStat("cpu  1300 0 50 2000 5 0 10 140 0 0\n");
  MachineLoad load;
  load.cores = 2;
  SetShares(before, after, 8.0, 10.0, 100.0, load);
  EXPECT_DOUBLE_EQ(load.others_share, 0.2);
  EXPECT_DOUBLE_EQ(load.steal_share, 0.05);
}

}  // namespace
}  // namespace posenc::cli::bench_stats

namespace posenc::cli {
namespace {

TEST(CpuModel, NamesKnownFamiliesAndModels) {
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0xCF, 2), "Emerald Rapids");
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0x8F, 8), "Sapphire Rapids");
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0xAD, 1), "Granite Rapids");
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0x6A, 6), "Ice Lake-SP");
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0x55, 4), "Skylake-SP");
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0x55, 7), "Cascade Lake");
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0x55, 11), "Cooper Lake");
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x19, 0x01, 1), "Zen 3");  // Milan
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x19, 0x11, 1), "Zen 4");  // Genoa
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x19, 0x61, 2), "Zen 4");  // Raphael
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x19, 0x21, 0), "Zen 3");  // Vermeer
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x1A, 0x02, 1), "Zen 5");  // Turin
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x1A, 0x11, 0), "Zen 5");  // Turin dense
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x1A, 0x44, 0), "Zen 5");  // Granite Ridge
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x17, 0x31, 0), "Zen 2");  // Rome
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x17, 0x01, 2), "Zen");    // Naples
  EXPECT_EQ(Microarchitecture("GenuineIntel", 6, 0x01, 0), "unknown");
  EXPECT_EQ(Microarchitecture("AuthenticAMD", 0x15, 0x02, 0), "unknown");
  EXPECT_EQ(Microarchitecture("CentaurHauls", 6, 0x0F, 0), "unknown");
}

TEST(CpuModel, ThisCpuIsNamed) {
  const CpuInfo& cpu = ThisCpu();
  EXPECT_FALSE(cpu.model_name.empty());
  EXPECT_FALSE(cpu.microarchitecture.empty());  // "unknown" at worst
  EXPECT_FALSE(CpuIdentity(cpu).empty());
  EXPECT_NE(CpuExtensions(cpu).find("AMX-BF16 "), std::string::npos);
  if (cpu.amx_permitted) EXPECT_TRUE(cpu.amx_bf16);
}

}  // namespace
}  // namespace posenc::cli
