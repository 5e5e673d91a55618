// OOM explanations: one scenario per cause, built on the simulated device so that the cause is
// known by construction, with the figures each explanation must report.
#include "analysis/explain/oom_explainer.h"
#include "absl/strings/str_format.h"
#include "analysis/analyzer.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

using ::fragscope::testing::TraceBuilder;

RankReport Analyze(const std::string& path, bool sweep = false) {
  AnalysisOptions options;
  options.run_sweep = sweep;
  options.threads = 2;
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  EXPECT_OK(opener.status());
  absl::StatusOr<RankReport> report = AnalyzeTrace(*opener, options);
  EXPECT_OK(report.status());
  return *report;
}

// Live tensors plus the request exceed the device.
TEST(OomExplainerTest, CapacityWhenLiveMemoryPlusRequestExceedsTheDevice) {
  TraceBuilder t(64 * kMiB);
  t.Mark("init / weights");
  t.Alloc(40 * kMiB);
  t.Mark("step 0 / forward");
  t.AllocExpectOom(30 * kMiB);
  const RankReport r = Analyze(t.Finish());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_TRUE(x.in_trace);
  EXPECT_TRUE(x.in_replay);
  EXPECT_EQ(x.cause, OomCause::kCapacity);
  EXPECT_EQ(x.allocated_bytes, 40 * kMiB);
  EXPECT_EQ(x.rounded_bytes, 30 * kMiB);
  EXPECT_EQ(x.limit_bytes, 64 * kMiB);
  EXPECT_EQ(x.phase, "step 0 / forward");
  ASSERT_EQ(x.pinning.size(), 1u);  // what holds the memory
  EXPECT_EQ(x.pinning[0].size, 40 * kMiB);
  EXPECT_EQ(x.pinning[0].phase, "init / weights");
  EXPECT_NE(x.headline.find("Capacity"), std::string::npos) << x.headline;
}

// A job that set its memory fraction to 0 (a cap of 0 bytes, logged as an options change) fails
// its next allocation under that cap: capacity, against 0 bytes allowed, not the device's 64 MiB.
TEST(OomExplainerTest, FractionZeroIsACapNotTheDevice) {
  TraceBuilder t(64 * kMiB);
  t.Alloc(4 * kMiB);
  t.SetOptions("per_process_memory_fraction:0");
  t.AllocExpectOom(1 * kMiB);
  const RankReport r = Analyze(t.Finish());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_TRUE(x.in_replay);
  EXPECT_EQ(x.allowed_bytes, std::optional<uint64_t>(0));
  EXPECT_EQ(x.limit_bytes, 0u);
  EXPECT_EQ(x.cause, OomCause::kCapacity);
  EXPECT_NE(x.headline.find("allowed by the memory fraction"), std::string::npos) << x.headline;
}

// Two 20 MiB segments each hold two live 5 MiB blocks and two 5 MiB holes: 20 MiB cached + 24 MiB
// on the device is free, but no hole or device range fits a 24 MiB segment.
std::string FragmentedTrace() {
  TraceBuilder t(64 * kMiB);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) {
    t.Mark(absl::StrFormat("step 0 / layer %d", i));
    blocks.push_back(t.Alloc(5 * kMiB));
  }
  for (int i : {0, 2, 4, 6}) t.Free(blocks[static_cast<size_t>(i)]);
  t.Mark("step 1 / forward");
  t.AllocExpectOom(25 * kMiB);
  return t.Finish();
}

TEST(OomExplainerTest, FragmentationNamesHolesAndPinningBlocks) {
  const RankReport r = Analyze(FragmentedTrace());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cause, OomCause::kFragmentation);
  EXPECT_EQ(x.rule, PolicyRule::kNone);
  EXPECT_EQ(x.reserved_bytes, 40 * kMiB);
  EXPECT_EQ(x.allocated_bytes, 20 * kMiB);
  EXPECT_EQ(x.reserved_but_unallocated_bytes, 20 * kMiB);
  EXPECT_EQ(x.free_cached_bytes, 20 * kMiB);
  EXPECT_EQ(x.holes, 4u);
  EXPECT_EQ(x.largest_hole, 5 * kMiB);
  EXPECT_EQ(x.segment_bytes, 26 * kMiB);  // 25 MiB rounded up to 2 MiB
  EXPECT_EQ(x.fragmented_segment_count, 2u);
  ASSERT_EQ(x.fragmented.size(), 2u);
  EXPECT_EQ(x.fragmented[0].holes, 2u);
  EXPECT_EQ(x.fragmented[0].live_blocks, 2u);
  ASSERT_EQ(x.pinning.size(), 4u);
  for (const PinningBlock& p : x.pinning) {
    EXPECT_EQ(p.size, 5 * kMiB);
    EXPECT_NE(p.phase.find("step 0 / layer"), std::string::npos);
  }
  EXPECT_EQ(x.pinning[0].phase, "step 0 / layer 1");  // ties: lowest address first
  EXPECT_NE(x.headline.find("no hole held"), std::string::npos) << x.headline;
  ASSERT_TRUE(x.layout.has_value());
  EXPECT_EQ(x.layout->maps.size(), 2u);
}

// A block split while max_split_size was unlimited becomes an oversize cached block when the
// setting changes: it is refused for small requests and, being split, cannot be released.
TEST(OomExplainerTest, AllocatorPolicyOversizeRule) {
  TraceBuilder t(64 * kMiB);
  DevicePtr a = t.Alloc(60 * kMiB);
  t.Free(a);
  t.Alloc(30 * kMiB);  // splits the cached 60 MiB block: 30 MiB free remains, split
  t.SetOptions("max_split_size_mb:20");
  t.AllocExpectOom(12 * kMiB);
  const RankReport r = Analyze(t.Finish());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cause, OomCause::kAllocatorPolicy);
  EXPECT_EQ(x.rule, PolicyRule::kOversizeRule);
  EXPECT_EQ(x.oversize_rejected_bytes, 30 * kMiB);
  EXPECT_NE(x.headline.find("max_split_size"), std::string::npos) << x.headline;
}

// A cached block big enough sits on another stream; the allocator never crosses streams.
TEST(OomExplainerTest, AllocatorPolicyOtherStream) {
  constexpr StreamId kSide = 0x51de;
  TraceBuilder t(48 * kMiB);
  DevicePtr a = t.Alloc(40 * kMiB, kSide);
  t.Free(a);
  t.Alloc(20 * kMiB, kSide);  // splits it: a 20 MiB split hole stays on the side stream
  t.AllocExpectOom(12 * kMiB, /*stream=*/0);
  const RankReport r = Analyze(t.Finish());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_EQ(x.cause, OomCause::kAllocatorPolicy);
  EXPECT_EQ(x.rule, PolicyRule::kOtherStream);
  EXPECT_EQ(x.other_stream_fitting_bytes, 20 * kMiB);
}

// 30 MiB of the device is held by someone else: the request fits the device, not what is left.
TEST(OomExplainerTest, OutsidePyTorch) {
  TraceBuilder t(64 * kMiB);
  t.backend().set_external_bytes(30 * kMiB);
  t.Alloc(20 * kMiB);
  t.AllocExpectOom(20 * kMiB);
  const RankReport r = Analyze(t.Finish());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_TRUE(x.in_replay) << "the replay takes the outside memory from the trace's OOM record";
  EXPECT_EQ(x.cause, OomCause::kOutsidePyTorch);
  EXPECT_EQ(x.outside_bytes, 30 * kMiB);
  EXPECT_EQ(x.available_bytes, 34 * kMiB);
  EXPECT_EQ(x.device_free_bytes, 14 * kMiB);
}

// PyTorch's ladder synchronizes events before failing, so pending frees are resolved before an
// OOM is raised (outside graph capture); the class is checked on the arithmetic directly.
TEST(OomExplainerTest, AllocatorPolicyPendingFreeArithmetic) {
  TraceEvent event;
  event.index = 7;
  event.requested_bytes = 20 * kMiB;
  ReplayOom oom;
  oom.event = &event;
  oom.in_trace = oom.in_replay = true;
  oom.report.rounded_bytes = 20 * kMiB;
  oom.report.segment_bytes = 20 * kMiB;
  oom.report.device_total_bytes = 64 * kMiB;
  oom.report.device_free_bytes = 4 * kMiB;
  oom.report.reserved_bytes = 60 * kMiB;
  oom.report.allocated_bytes = 30 * kMiB;
  oom.report.pending_free_bytes = 30 * kMiB;
  const OomExplanation x =
      ExplainOom(oom, LayoutSummary(), "step 2 / backward", {.capacity_bytes = 64 * kMiB});
  EXPECT_EQ(x.cause, OomCause::kAllocatorPolicy);
  EXPECT_EQ(x.rule, PolicyRule::kPendingFree);
  EXPECT_EQ(x.outside_bytes, 0u);
}

TEST(OomExplainerTest, SweepNamesTheSmallestFix) {
  const RankReport r = Analyze(FragmentedTrace(), /*sweep=*/true);
  ASSERT_EQ(r.ooms.size(), 1u);
  // No max_split_size setting can merge the holes of this trace: it says so.
  EXPECT_FALSE(r.ooms[0].avoided_by.empty());
  ASSERT_FALSE(r.sweep.empty());
  EXPECT_TRUE(r.sweep[0].config.is_trace_config);
  EXPECT_EQ(r.sweep[0].first_oom_index, r.ooms[0].event_index);
}

TEST(OomExplainerTest, TraceWithoutOomHasNoExplanations) {
  TraceBuilder t(64 * kMiB);
  t.Free(t.Alloc(10 * kMiB));
  const RankReport r = Analyze(t.Finish());
  EXPECT_TRUE(r.ooms.empty());
  EXPECT_EQ(r.oom_count, 0u);
}

// A CUDA graph captured 30 MiB into its private pool and freed it inside the capture; the graph is
// still alive, so the pool keeps its 30 MiB segment, free but out of reach of the default pool's
// 30 MiB request on a 64 MiB device (10 MiB live, 24 MiB left on the device).
TEST(OomExplainerTest, PrivatePoolsWhenAGraphPoolHoldsTheFreeMemory) {
  TraceBuilder t(64 * kMiB);
  ASSERT_OK(t.allocator().BeginAllocateToPool(PoolId{1, 0}, [](StreamId s) { return s == 0; }));
  t.Free(t.Alloc(30 * kMiB));
  ASSERT_OK(t.allocator().EndAllocateToPool(PoolId{1, 0}));
  t.Alloc(10 * kMiB);
  t.AllocExpectOom(30 * kMiB);
  const RankReport r = Analyze(t.Finish());
  ASSERT_EQ(r.ooms.size(), 1u);
  const OomExplanation& x = r.ooms[0];
  EXPECT_TRUE(x.in_trace);
  EXPECT_TRUE(x.in_replay);
  EXPECT_EQ(x.cause, OomCause::kPrivatePools);
  EXPECT_EQ(x.pool_id, kDefaultPoolId);
  EXPECT_EQ(x.private_pool_count, 1u);
  EXPECT_EQ(x.graph_pool_count, 1u);
  EXPECT_EQ(x.private_pool_reserved_bytes, 30 * kMiB);
  EXPECT_EQ(x.private_pool_free_bytes, 30 * kMiB);
  EXPECT_EQ(x.headline,
            "Private pools: 30.00 MiB reserved in 1 CUDA-graph pool, 30.00 MiB of it free, "
            "unusable by this allocation; without that free memory held apart the request of "
            "30.00 MiB would have fit.");
}

// The same job without the graph: the 30 MiB are the default pool's, released by the retry.
TEST(OomExplainerTest, NoPrivatePoolCauseWithoutPrivatePools) {
  TraceBuilder t(64 * kMiB);
  t.Free(t.Alloc(30 * kMiB));
  t.Alloc(10 * kMiB);
  t.Alloc(30 * kMiB);  // the OOM retry frees the cached 30 MiB segment
  const RankReport r = Analyze(t.Finish());
  EXPECT_TRUE(r.ooms.empty());
}

}  // namespace
}  // namespace fragscope
