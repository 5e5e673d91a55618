// `fragscope diff A B` (analysis/cli/diff_command.cc): a log against itself differs by nothing;
// against a changed run, the difference is where the change is, phase by phase.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Two steps; the second step's forward holds `extra_mib` more.
std::string TwoSteps(const std::string& name, uint64_t extra_mib) {
  TraceBuilder t(uint64_t{1} << 30, "", name);
  for (int step = 0; step < 2; ++step) {
    t.Mark("step " + std::to_string(step) + " / forward");
    std::vector<DevicePtr> saved;
    for (int i = 0; i < 4; ++i) saved.push_back(t.Alloc(10 * kMiB));
    if (step == 1 && extra_mib > 0) saved.push_back(t.Alloc(extra_mib * kMiB));
    t.Mark("step " + std::to_string(step) + " / backward");
    for (DevicePtr p : saved) t.Free(p);
  }
  return t.Finish();
}

nlohmann::json Diff(const std::string& a, const std::string& b) {
  CommandRun r = Fragscope({"diff", a, b, "--json", "-"});
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out)["comparison"];
}

TEST(DiffCommandTest, ALogAgainstItselfDiffersByNothing) {
  const std::string log = TwoSteps("same.fslog", 0);
  const nlohmann::json c = Diff(log, log);
  EXPECT_EQ(c["a_figures"], c["b_figures"]);
  ASSERT_EQ(c["phases"].size(), 4u);
  for (const auto& p : c["phases"]) EXPECT_EQ(p["a"], p["b"]) << p["phase"];
  CommandRun text = Fragscope({"diff", log, log});
  EXPECT_THAT(text.out, HasSubstr("peak allocated"));
  EXPECT_THAT(text.out, HasSubstr("+0 bytes (+0.00 %)"));
}

TEST(DiffCommandTest, TheDifferenceIsInThePhaseThatChanged) {
  const nlohmann::json c = Diff(TwoSteps("before.fslog", 0), TwoSteps("after.fslog", 30));
  EXPECT_EQ(c["a_figures"]["peak_allocated_bytes"].get<uint64_t>(), 40 * kMiB);
  EXPECT_EQ(c["b_figures"]["peak_allocated_bytes"].get<uint64_t>(), 70 * kMiB);
  EXPECT_EQ(c["b_figures"]["allocations"].get<uint64_t>(),
            c["a_figures"]["allocations"].get<uint64_t>() + 1);
  // Step 0 is the same; step 1's forward holds the 30 MiB more (and its backward frees them).
  const auto& phases = c["phases"];
  ASSERT_EQ(phases.size(), 4u);
  EXPECT_EQ(phases[0]["a"], phases[0]["b"]);
  EXPECT_EQ(phases[1]["a"], phases[1]["b"]);
  EXPECT_EQ(phases[2]["phase"], "step 1 / forward");
  EXPECT_EQ(phases[2]["b"]["allocations"].get<uint64_t>(),
            phases[2]["a"]["allocations"].get<uint64_t>() + 1);
  EXPECT_EQ(phases[2]["b"]["peak_allocated_bytes"].get<uint64_t>(),
            phases[2]["a"]["peak_allocated_bytes"].get<uint64_t>() + 30 * kMiB);
}

TEST(DiffCommandTest, PhasesOfOnlyOneTraceStandAlone) {
  TraceBuilder t(uint64_t{1} << 30, "", "other_phases.fslog");
  t.Mark("warmup");
  t.Free(t.Alloc(kMiB));
  t.Mark("step 0 / forward");
  t.Free(t.Alloc(kMiB));
  const nlohmann::json c = Diff(TwoSteps("plain.fslog", 0), t.Finish());
  std::vector<std::string> phases;
  for (const auto& p : c["phases"]) phases.push_back(p["phase"]);
  EXPECT_EQ(phases, (std::vector<std::string>{"warmup", "step 0 / forward", "step 0 / backward",
                                              "step 1 / forward", "step 1 / backward"}));
  EXPECT_TRUE(c["phases"][0]["a"].is_null());
  EXPECT_FALSE(c["phases"][1]["a"].is_null());
  EXPECT_FALSE(c["phases"][1]["b"].is_null());
  EXPECT_TRUE(c["phases"][2]["b"].is_null());
}

TEST(DiffCommandTest, UsageAndUnreadableInputs) {
  EXPECT_EQ(Fragscope({"diff", "only_one.fslog"}).code, 2);
  CommandRun missing = Fragscope({"diff", "/nonexistent/a.fslog", "/nonexistent/b.fslog"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/a.fslog"));
}

}  // namespace
}  // namespace fragscope::testing
