// The trace's demand (analysis/metrics/demand.h) and the verdict it decides (Note [Demand against
// the cap]): a job whose requests alone exceed its device is capacity-bound by their factor,
// whatever its first OOM in the replay looks like, and no setting is recommended.
#include "analysis/metrics/demand.h"

#include <string>
#include <vector>

#include "analysis/replay/replay.h"
#include "analysis/sources/open_trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TraceEvent Event(EventKind kind, DevicePtr ptr, uint64_t requested, uint64_t index) {
  TraceEvent e;
  e.kind = kind;
  e.ptr = ptr;
  e.requested_bytes = requested;
  e.bytes = requested;
  e.index = index;
  return e;
}

TEST(DemandTest, CountsRoundedRequestsFreesAndRefusedRequests) {
  TraceInfo info;
  InitialSegment before;
  before.allocated.push_back({.address = 0x1000, .size = 2 * kMiB, .requested_bytes = 1000});
  info.initial_segments.push_back(before);
  DemandCollector d(info);
  EXPECT_EQ(d.live_bytes(), 1024u);  // PyTorch's rounding: 512-byte multiples
  TraceEvent marker;
  marker.kind = EventKind::kMarker;
  marker.text = "step 0 / forward";
  d.OnTraceEvent(marker);
  d.OnTraceEvent(Event(EventKind::kAlloc, 0x2000, 1, 1));  // 512 B at least
  d.OnTraceEvent(Event(EventKind::kAlloc, 0x3000, 10 * kMiB, 2));
  EXPECT_EQ(d.live_bytes(), 1024u + 512u + 10 * kMiB);
  d.OnTraceEvent(Event(EventKind::kFreeRequested, 0x3000, 10 * kMiB, 3));
  d.OnTraceEvent(Event(EventKind::kFreeRequested, 0x9000, 1, 4));  // never allocated: ignored
  EXPECT_EQ(d.live_bytes(), 1024u + 512u);
  EXPECT_EQ(d.summary().peak.bytes, 1024u + 512u + 10 * kMiB);
  EXPECT_EQ(d.summary().peak.event_index, 2u);
  EXPECT_EQ(d.summary().peak.phase, "step 0 / forward");
  EXPECT_FALSE(d.summary().peak.refused_request);
  // A refused request counts at its moment, with what the device shows held outside PyTorch.
  TraceEvent oom = Event(EventKind::kOom, 0, 20 * kMiB, 5);
  oom.device_total_bytes = 100 * kMiB;
  oom.device_free_bytes = 60 * kMiB;
  oom.reserved_bytes = 30 * kMiB;
  d.OnTraceEvent(oom);
  EXPECT_EQ(d.summary().peak.bytes, 1024u + 512u + 20 * kMiB);
  EXPECT_TRUE(d.summary().peak.refused_request);
  EXPECT_EQ(d.summary().outside_bytes, 10 * kMiB);
  EXPECT_EQ(d.summary().refused_requests, 1u);
  EXPECT_EQ(d.live_bytes(), 1024u + 512u);
}

// Tag records (Note [Tag records]): a block's role is its last tag's, a tag right after its alloc
// counts at the alloc's moment, and the roles always sum to the demand.
TEST(DemandTest, RolesFollowTheTagsAndSumToTheDemand) {
  TraceBuilder t(uint64_t{1} << 30, "", "roles.fslog");
  t.Mark("init / weights");
  const DevicePtr weight = t.Alloc(100 * kMiB);
  t.Tag(weight, AllocationRole::kWeights);
  t.Mark("step 0 / forward");
  const DevicePtr saved = t.Alloc(50 * kMiB);
  t.Tag(saved, AllocationRole::kTemporaries);
  t.Tag(saved, AllocationRole::kSavedActivations);  // known later: the last tag counts
  const DevicePtr peak = t.Alloc(30 * kMiB);        // the peak, tagged at once
  t.Tag(peak, AllocationRole::kTemporaries);
  t.Free(peak);
  t.Free(saved);
  t.Tag(saved, AllocationRole::kGradients);  // no block there any more: passed over
  const std::string log = t.Finish();
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(log, {});
  ASSERT_TRUE(opener.ok()) << opener.status();
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
  ASSERT_TRUE(source.ok()) << source.status();
  DemandCollector demand((*source)->info());
  Replayer replayer(**source, {.capacity_bytes = uint64_t{1} << 30});
  ASSERT_TRUE(replayer.Init().ok());
  ASSERT_TRUE(replayer.Run(&demand).ok());
  const DemandSummary& d = demand.summary();
  EXPECT_TRUE(d.has_roles);
  EXPECT_EQ(d.peak.bytes, 180 * kMiB);
  EXPECT_EQ(d.peak.roles[static_cast<size_t>(AllocationRole::kWeights)], 100 * kMiB);
  EXPECT_EQ(d.peak.roles[static_cast<size_t>(AllocationRole::kSavedActivations)], 50 * kMiB);
  EXPECT_EQ(d.peak.roles[static_cast<size_t>(AllocationRole::kTemporaries)], 30 * kMiB);
  EXPECT_EQ(d.peak.roles[static_cast<size_t>(AllocationRole::kUnknown)], 0u);
  EXPECT_EQ(demand.live_roles()[static_cast<size_t>(AllocationRole::kWeights)], 100 * kMiB);
  EXPECT_EQ(demand.live_roles()[static_cast<size_t>(AllocationRole::kGradients)], 0u);
  // The verdict's demand line names the parts by role, largest first.
  CommandRun r =
      Fragscope({"analyze", log, "--capacity", "128MiB", "--no-summary", "--threads", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("largest parts (the log's allocation roles): weights 100.00 MiB,"));
  EXPECT_THAT(r.out, HasSubstr("saved_activations 50.00 MiB,"));
  // dump shows each tag.
  CommandRun dump = Fragscope({"dump", log});
  EXPECT_THAT(dump.out, HasSubstr("role=saved_activations"));
}

// Each OOM says who holds the memory when the job ran out: its live requests by role (text, JSON).
TEST(DemandTest, AnOomNamesTheRolesThatHoldTheMemory) {
  TraceBuilder t(256 * kMiB, "", "held.fslog");
  const DevicePtr weight = t.Alloc(100 * kMiB);
  t.Tag(weight, AllocationRole::kWeights);
  const DevicePtr state = t.Alloc(60 * kMiB);
  t.Tag(state, AllocationRole::kOptimizerStates);
  const DevicePtr scratch = t.Alloc(20 * kMiB);  // no tag: unknown
  (void)scratch;
  t.AllocExpectOom(120 * kMiB);
  const std::string log = t.Finish();
  CommandRun text = Fragscope({"analyze", log, "--no-sweep", "--no-summary"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("held by role (the job's live requests): weights 100.00 MiB, "
                                  "optimizer_states 60.00 MiB,\n      unknown 20.00 MiB"));
  CommandRun json = Fragscope({"analyze", log, "--no-sweep", "--json", "-"});
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json held =
      nlohmann::json::parse(json.out)["ranks"][0]["ooms"]["explained"][0]["held_by_role"];
  EXPECT_EQ(held, nlohmann::json::parse(R"({"unknown": 20971520, "weights": 104857600, )"
                                        R"("optimizer_states": 62914560})"));
  // A log without tags: no line (everything would be unknown), the JSON says so.
  const std::string untagged = FragmentedOomLog();
  CommandRun plain = Fragscope({"analyze", untagged, "--no-sweep", "--no-summary"});
  EXPECT_THAT(plain.out, Not(HasSubstr("held by role")));
}

// A whole step recorded on a large device (as a prediction is), analyzed for a 128 MiB one: its
// 300 MiB of forward activations cannot fit, whatever the replay's first OOM leaves.
std::string WholeStepLog(const std::string& name) {
  TraceBuilder t(uint64_t{1} << 30, "", name);
  t.Mark("step 0 / forward");
  std::vector<DevicePtr> saved;
  for (int i = 0; i < 10; ++i) saved.push_back(t.Alloc(30 * kMiB));
  t.Mark("step 0 / backward");
  for (DevicePtr p : saved) t.Free(p);
  return t.Finish();
}

TEST(DemandTest, RequestsAboveTheDeviceMakeTheJobCapacityBoundByTheirFactor) {
  const std::string log = WholeStepLog("whole_step.fslog");
  CommandRun json = Fragscope(
      {"analyze", log, "--capacity", "128MiB", "--no-summary", "--threads", "1", "--json", "-"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"basis\": \"demand\""));
  EXPECT_THAT(json.out, HasSubstr("\"capacity_bound\": true"));
  EXPECT_THAT(json.out, HasSubstr("\"recommended\": null"));
  EXPECT_THAT(json.out, HasSubstr("\"peak_bytes\": 314572800"));
  EXPECT_THAT(json.out, HasSubstr("\"factor\": 2.34375"));
  EXPECT_THAT(json.out, HasSubstr("\"whole_job\": true"));
  EXPECT_THAT(json.out, HasSubstr("\"phase\": \"step 0 / forward\""));
  CommandRun text =
      Fragscope({"analyze", log, "--capacity", "128MiB", "--no-summary", "--threads", "1"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Verdict: capacity-bound (the requests need 2.34x what the job "
                                  "may use)"));
  EXPECT_THAT(text.out, HasSubstr("Recommended: none"));
  // On a device that holds it, the same log is judged by nothing but its own OOMs (none).
  CommandRun fits = Fragscope(
      {"analyze", log, "--capacity", "512MiB", "--no-summary", "--threads", "1", "--json", "-"});
  ASSERT_EQ(fits.code, 0) << fits.err;
  EXPECT_THAT(fits.out, HasSubstr("\"capacity_bound\": false"));
  EXPECT_THAT(fits.out, HasSubstr("\"exceeds_limit\": false"));
  EXPECT_THAT(fits.out, Not(HasSubstr("\"basis\": \"demand\"")));
}

// A cap decides as the device does: the demand is set against what the job may use.
TEST(DemandTest, TheCapIsTheLimit) {
  const std::string log = WholeStepLog("whole_step_cap.fslog");
  CommandRun r = Fragscope({"analyze", log, "--capacity", "1GiB", "--allowed", "256MiB",
                            "--no-summary", "--threads", "1", "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"basis\": \"demand\""));
  EXPECT_THAT(r.out, HasSubstr("\"limit_bytes\": 268435456"));
}

}  // namespace
}  // namespace fragscope::testing
