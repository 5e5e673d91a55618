// `fragscope diff A B` (cli/diff_command.cc): a log against itself differs by nothing;
// against a changed run, the difference is where the change is, phase by phase.
#include <fstream>
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

// Two steps; the second step's forward holds `extra_mib` more, of temporaries (the rest are saved
// activations: every block has its role in a context, as a prediction's).
std::string TwoSteps(const std::string& name, uint64_t extra_mib) {
  TraceBuilder t(uint64_t{1} << 30, "", name);
  t.DefineString(1, "model.layers.0");
  t.DefineString(2, "model.head");
  t.DefineContext(
      {.id = 1, .role = static_cast<uint8_t>(AllocationRole::kSavedActivations), .module = 1});
  t.DefineContext(
      {.id = 2, .role = static_cast<uint8_t>(AllocationRole::kTemporaries), .module = 2});
  for (int step = 0; step < 2; ++step) {
    t.Mark("step " + std::to_string(step) + " / forward");
    std::vector<DevicePtr> saved;
    t.SetContext(1);
    for (int i = 0; i < 4; ++i) saved.push_back(t.Alloc(10 * kMiB));
    t.SetContext(2);
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
  EXPECT_TRUE(c["differences"].empty());
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
  // Where the difference is: that phase and the backward it carries into (its peak is at its
  // start), all of it temporaries.
  ASSERT_EQ(c["differences"].size(), 2u);
  EXPECT_EQ(c["differences"][0]["phase"], "step 1 / forward");
  EXPECT_EQ(c["differences"][1]["phase"], "step 1 / backward");
  for (const auto& d : c["differences"]) {
    EXPECT_EQ(d["peak_demand_bytes"].get<int64_t>(), 30 * static_cast<int64_t>(kMiB));
    ASSERT_EQ(d["roles"].size(), 1u);
    EXPECT_EQ(d["roles"][0]["role"], "temporaries");
    EXPECT_EQ(d["roles"][0]["bytes"].get<int64_t>(), 30 * static_cast<int64_t>(kMiB));
    ASSERT_EQ(d["modules"].size(), 1u) << d.dump();
    EXPECT_EQ(d["modules"][0]["module"], "model.head");
    EXPECT_EQ(d["modules"][0]["bytes"].get<int64_t>(), 30 * static_cast<int64_t>(kMiB));
  }
  const std::string before = TwoSteps("b2.fslog", 0), after = TwoSteps("a2.fslog", 30);
  CommandRun text = Fragscope({"diff", before, after});
  EXPECT_THAT(text.out, HasSubstr("step 1 / forward: +30.00 MiB (temporaries +30.00 MiB; by "
                                  "module: model.head +30.00 MiB)"));
  const std::string html = TempPath("diff.html");
  ASSERT_EQ(Fragscope({"diff", before, after, "--html", html}).code, 0);
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), {});
  EXPECT_THAT(page, HasSubstr("Where the difference is"));
  EXPECT_THAT(page, HasSubstr("step 1 / forward: +30.00 MiB (temporaries +30.00 MiB; by module: "
                              "model.head +30.00 MiB)"));
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
