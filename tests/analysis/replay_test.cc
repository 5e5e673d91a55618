// Replay and fidelity: traces recorded from fragscope's own allocator replay faithfully (the
// fidelity checker finds no divergence), including stream-ordered frees, empty_cache, options
// changes and OOMs; a replay under other settings is caught diverging; and the PyTorch 2.11
// oracle traces replay faithfully.
#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "analysis/replay/fidelity_check.h"
#include "analysis/replay/hook_list.h"
#include "analysis/replay/replay.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/sources/open_trace.h"
#include "fslog/fslog_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/replay_verify_util.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/sanitized.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {
using ::fragscope::testing::SeedsToRun;

using ::fragscope::testing::TraceBuilder;

struct VerifyResult {
  std::optional<Divergence> divergence;
  FidelityCounts counts;
  uint64_t events = 0;
  std::vector<std::string> warnings;
};

VerifyResult Verify(const std::string& path, std::optional<std::string> conf = std::nullopt,
                    std::optional<uint64_t> allowed = std::nullopt, uint64_t capacity = 0) {
  VerifyResult result;
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  EXPECT_TRUE(opener.ok()) << opener.status();
  if (!opener.ok()) return result;
  std::unique_ptr<TraceSource> source = *opener->Open();
  ReplayConfig config;
  config.options = *ParseAllocatorOptions(conf.value_or(source->info().allocator_options));
  config.follow_options_changes = !conf.has_value();
  config.capacity_bytes = capacity > 0 ? capacity : source->info().capacity_bytes;
  config.allowed_bytes = allowed;
  Replayer replayer(*source, config);
  EXPECT_OK(replayer.Init());
  FidelityChecker checker;
  EXPECT_OK(replayer.Run(&checker));
  result.divergence = checker.divergence();
  result.counts = checker.counts();
  result.events = replayer.events_read();
  result.warnings = replayer.warnings();
  return result;
}

// What a replay of `path` counted; the replay must be faithful (a divergence fails the test).
FidelityCounts FaithfulCounts(const std::string& path) {
  const VerifyResult r = Verify(path);
  EXPECT_FALSE(r.divergence.has_value()) << "event " << r.divergence->event_index << ": "
                                         << r.divergence->expected << " / " << r.divergence->got;
  return r.counts;
}

TEST(ReplayTest, OwnTraceWithSplitsAndEmptyCacheIsFaithful) {
  TraceBuilder t(256 * kMiB);
  DevicePtr a = t.Alloc(3 * kMiB);
  DevicePtr b = t.Alloc(1000);
  DevicePtr c = t.Alloc(12 * kMiB + 1);
  t.Free(a);
  DevicePtr d = t.Alloc(2 * kMiB);
  t.Free(c);
  t.EmptyCache();
  t.Free(b);
  t.Free(d);
  t.EmptyCache();
  const FidelityCounts counts = FaithfulCounts(t.Finish());
  EXPECT_EQ(counts.allocations, 4u);
  // c fits in the first segment's remainder: 2 segment allocs, 2 frees by the last empty_cache.
  EXPECT_EQ(counts.segment_events, 4u);
}

TEST(ReplayTest, StreamOrderedFreesReplayThroughPseudoStreams) {
  TraceBuilder t(512 * kMiB);
  constexpr StreamId kSide = 0x51de;
  DevicePtr a = t.Alloc(30 * kMiB);
  DevicePtr b = t.Alloc(30 * kMiB);
  t.backend().SetStreamBusy(kSide, true);
  ASSERT_OK(t.allocator().RecordStream(a, kSide));
  t.Free(a);                         // pending: the side stream still uses it
  DevicePtr c = t.Alloc(30 * kMiB);  // cannot reuse a: a new segment
  t.backend().CompleteStream(kSide);
  DevicePtr d = t.Alloc(30 * kMiB);  // processes a's event first: reuses a
  EXPECT_EQ(d, a);
  t.Free(b);
  t.Free(c);
  t.Free(d);
  const FidelityCounts counts = FaithfulCounts(t.Finish());
  EXPECT_EQ(counts.allocations, 4u);
}

TEST(ReplayTest, OptionsChangesAndOomsReplayFaithfully) {
  TraceBuilder t(64 * kMiB);
  DevicePtr a = t.Alloc(40 * kMiB);
  t.AllocExpectOom(30 * kMiB);
  t.SetOptions("max_split_size_mb:20");
  DevicePtr b = t.Alloc(12 * kMiB);
  t.Free(a);
  t.Free(b);
  const FidelityCounts counts = FaithfulCounts(t.Finish());
  EXPECT_EQ(counts.ooms, 1u);
}

// A memory fraction set during the job (logged as an options change) caps the replay from there
// on, as it capped the job, and lifting it lifts the replay's cap too.
TEST(ReplayTest, MemoryFractionChangesInTheLogCapTheReplay) {
  TraceBuilder t(64 * kMiB);
  DevicePtr a = t.Alloc(24 * kMiB);
  t.SetOptions("per_process_memory_fraction:0.5");
  t.AllocExpectOom(12 * kMiB);  // 24 + 12 > 32 MiB allowed
  t.SetOptions("");
  DevicePtr b = t.Alloc(12 * kMiB);
  t.Free(a);
  t.Free(b);
  const FidelityCounts counts = FaithfulCounts(t.Finish());
  EXPECT_EQ(counts.ooms, 1u);
  EXPECT_EQ(counts.allocations, 2u);
}

// A random job on four streams with record_stream, frees, empty_cache and OOMs on a 600 MiB
// device (TCMalloc-style randomized test with a fixed seed); the path of its log.
std::string RecordRandomJob(uint64_t seed, DeviceStats* stats = nullptr) {
  std::mt19937_64 rng(seed);
  TraceBuilder t(600 * kMiB, seed == 3 ? "max_split_size_mb:64,roundup_power2_divisions:4" : "");
  std::vector<DevicePtr> live;
  const StreamId streams[] = {0, 0x100, 0x200, 0x300};
  for (int i = 0; i < 4000; ++i) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 55 || live.empty()) {
      const uint64_t size = uint64_t{1} << (rng() % 27);
      const StreamId s = streams[rng() % 4];
      absl::StatusOr<DevicePtr> p = [&] {
        t.Tick();
        return t.allocator().Allocate(size + rng() % size, s);
      }();
      if (p.ok()) live.push_back(*p);
    } else if (op < 97) {
      const size_t k = rng() % live.size();
      if (rng() % 8 == 0) {
        const StreamId user = streams[rng() % 4] + 1;
        t.backend().SetStreamBusy(user, true);
        EXPECT_OK(t.allocator().RecordStream(live[k], user));
      }
      t.Free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      if (rng() % 16 == 0) t.backend().CompleteStream(streams[rng() % 4] + 1);
    } else {
      t.EmptyCache();
    }
  }
  if (stats != nullptr) *stats = t.allocator().GetStats();
  return t.Finish();
}

TEST(ReplayTest, RandomJobsAreFaithful) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    EXPECT_GT(FaithfulCounts(RecordRandomJob(seed)).allocations, 1000u);
  }
}

bool IsAllocatorDecision(EventKind kind) {
  return kind != EventKind::kOptionsChange && kind != EventKind::kMarker;
}

// An allocator event as compared below: kind, address, block or segment size.
using EventKey = std::tuple<EventKind, DevicePtr, uint64_t>;

// `events` with each run of consecutive free_completed events sorted by address: the order in
// which one poll of stream events (or one synchronization) frees several blocks.
std::vector<EventKey> WithCompletionRunsSorted(const std::vector<AllocatorEvent>& events) {
  std::vector<EventKey> keys;
  for (const AllocatorEvent& e : events) keys.emplace_back(e.kind, e.ptr, e.bytes);
  for (size_t i = 0; i < keys.size();) {
    size_t j = i;
    while (j < keys.size() && std::get<0>(keys[j]) == EventKind::kFreeCompleted) ++j;
    std::sort(keys.begin() + static_cast<std::ptrdiff_t>(i),
              keys.begin() + static_cast<std::ptrdiff_t>(j));
    i = j > i ? j : i + 1;
  }
  return keys;
}

class EventRecorder final : public ReplayHooks {
 public:
  void OnAllocatorEvent(const AllocatorEvent& e) override {
    if (IsAllocatorDecision(e.kind)) events.push_back(e);
  }
  std::vector<AllocatorEvent> events;
};

// 40 random jobs replay faithfully, event by event, and end with the job's statistics, except
// the running totals of inactive_split and inactive_split_bytes.
//
// Why those: when one poll of stream events (the process_events() at the start of a malloc, or the
// retry ladder's synchronization) completes several stream-ordered frees, the allocator frees the
// blocks in the iteration order of its per-stream event table, an absl::flat_hash_map, whose order
// depends on the stream ids and on a per-process hash seed. The replay's pending frees wait on
// pseudo-streams of its own (Note [Stream-ordered frees in a replay]), so it frees the same blocks
// at the same point in another order. Merging the same blocks in another order ends in the same
// layout (every other statistic, and the current inactive_split values, agree) but creates and
// absorbs a different number of intermediate inactive split blocks on the way, which the
// accumulated counts (allocated, freed) and possibly the peaks record. No public allocator call
// lets the replay free pending blocks one at a time, so it cannot choose the order. Which seeds
// differ changes from run to run with the hash seed.
TEST(ReplayTest, RandomJobsMatchTheJobsEventsAndStatsUpToTheOrderOfOnePoll) {
  for (uint64_t seed : SeedsToRun(40)) {
    SCOPED_TRACE(seed);
    DeviceStats job;
    const std::string path = RecordRandomJob(seed, &job);
    ASSERT_OK_AND_ASSIGN(testing::LogReplay replay,
                         testing::OpenReplay(path, testing::ReplaySettings::kRecorded));
    Replayer& replayer = *replay.replayer;
    FidelityChecker checker;
    EventRecorder recorder;
    HookList hooks;
    hooks.Add(&checker);
    hooks.Add(&recorder);
    ASSERT_OK(replayer.Run(&hooks));
    EXPECT_FALSE(checker.divergence().has_value())
        << "event " << checker.divergence()->event_index << ": " << checker.divergence()->expected
        << " / " << checker.divergence()->got;

    std::vector<AllocatorEvent> logged;
    ASSERT_OK_AND_ASSIGN(FslogReader reader, FslogReader::Open(path));
    LogEntry entry;
    for (;;) {
      ASSERT_OK_AND_ASSIGN(bool more, reader.Next(&entry));
      if (!more) break;
      if (IsAllocatorDecision(entry.kind())) logged.push_back(entry.event());
    }
    EXPECT_TRUE(WithCompletionRunsSorted(recorder.events) == WithCompletionRunsSorted(logged));
    // In the job's own order, every statistic is the job's.
    bool same_order = recorder.events.size() == logged.size();
    for (size_t i = 0; same_order && i < logged.size(); ++i) {
      same_order =
          recorder.events[i].kind == logged[i].kind && recorder.events[i].ptr == logged[i].ptr;
    }

    const auto ours = FlattenStats(replayer.allocator().GetStats());
    const auto theirs = FlattenStats(job);
    ASSERT_EQ(ours.size(), theirs.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      const std::string& name = ours[i].first;
      const bool order_dependent =
          !same_order && name.rfind("inactive_split", 0) == 0 && !absl::EndsWith(name, ".current");
      if (!order_dependent) {
        EXPECT_EQ(ours[i], theirs[i]);
      }
    }
  }
}

TEST(ReplayTest, ReplayUnderOtherSettingsIsCaughtDiverging) {
  TraceBuilder t(512 * kMiB);
  std::vector<DevicePtr> live;
  for (uint64_t i = 0; i < 20; ++i) live.push_back(t.Alloc((i % 5 + 1) * 7 * kMiB));
  for (size_t i = 0; i < live.size(); i += 2) t.Free(live[i]);
  for (int i = 0; i < 10; ++i) t.Alloc(5 * kMiB);
  const std::string path = t.Finish();
  EXPECT_FALSE(Verify(path).divergence.has_value());
  VerifyResult r = Verify(path, "roundup_power2_divisions:2");
  ASSERT_TRUE(r.divergence.has_value());
  EXPECT_FALSE(r.divergence->context.empty());
}

std::string Oracle(const std::string& name) {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/" + name + ".pickle";
}

class OracleVerifyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleVerifyTest, PyTorchTraceReplaysFaithfully) {
  // The fraction traces ran under set_per_process_memory_fraction(3 GiB / H200), which snapshots
  // do not record (tests/data/oracle/*.ops carry it).
  const bool capped = GetParam().find("fraction_3g") != std::string::npos;
  VerifyResult r = Verify(Oracle(GetParam()), std::nullopt,
                          capped ? std::optional<uint64_t>(3 * kGiB) : std::nullopt, 150109880320);
  EXPECT_FALSE(r.divergence.has_value()) << "event " << r.divergence->event_index << ": "
                                         << r.divergence->expected << " / " << r.divergence->got;
  EXPECT_GT(r.counts.allocations, 1500u);
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
  if (capped) {
    EXPECT_GT(r.counts.ooms, 10u);
  }
}

INSTANTIATE_TEST_SUITE_P(Oracle, OracleVerifyTest,
                         ::testing::Values("micro_default", "micro_max_split_128", "micro_roundup4",
                                           "micro_roundup_list", "micro_fraction_3g",
                                           "micro_fraction_3g_gc", "micro_expandable", "gpt2_plain",
                                           "gpt2_side_stream", "gpt2_tuned"));

TEST(OracleVerifyTest, FractionTraceWithoutItsCapDivergesAtTheFirstOom) {
  VerifyResult r = Verify(Oracle("micro_fraction_3g"), std::nullopt, std::nullopt, 150109880320);
  ASSERT_TRUE(r.divergence.has_value());
  EXPECT_EQ(r.divergence->expected.rfind("oom", 0), 0u) << r.divergence->expected;
}

TEST(OracleVerifyTest, SnapshotStateBeforeRecordingIsRebuilt) {
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(Oracle("gpt2_plain"));
  ASSERT_OK(opener.status());
  const TraceInfo info = (*opener->Open())->info();
  // GPT-2's weights were loaded before _record_memory_history: 9 segments already existed.
  EXPECT_EQ(info.initial_segments.size(), 9u);
  size_t blocks = 0;
  for (const InitialSegment& s : info.initial_segments) blocks += s.allocated.size();
  EXPECT_EQ(blocks, 52u);  // the weights and the small tensors still allocated at the end
}

// A block that existed before the trace is rebuilt with the caller's request where that rounds
// to the block, so requested_bytes counts the request (it counted the block's size); a block
// with an unsplit remainder still counts its size.
TEST(ReplayTest, RebuiltBlocksKeepTheirRequests) {
  class StateOnlySource final : public TraceSource {
   public:
    absl::StatusOr<bool> Next(TraceEvent*) override { return false; }
  };
  StateOnlySource source;
  source.mutable_info().capacity_bytes = kGiB;
  constexpr DevicePtr kBase = 0x7f0000000000;
  InitialSegment seg{kBase, 20 * kMiB, PoolKind::kLarge, 0, {}};
  seg.allocated.push_back({kBase, 2 * kMiB, 2 * kMiB - 100});       // rounds to the block
  seg.allocated.push_back({kBase + 4 * kMiB, 3 * kMiB, 2 * kMiB});  // 1 MiB left unsplit
  source.mutable_info().initial_segments.push_back(seg);
  ReplayConfig config;
  config.capacity_bytes = kGiB;
  Replayer replayer(source, config);
  ASSERT_OK(replayer.Init());
  const DeviceStats stats = replayer.allocator().GetStats();
  EXPECT_EQ(stats.requested_bytes[0].current, static_cast<int64_t>(2 * kMiB - 100 + 3 * kMiB));
  EXPECT_EQ(stats.allocated_bytes[0].current, static_cast<int64_t>(5 * kMiB));
  EXPECT_TRUE(replayer.warnings().empty());
}

// Pre-trace segments that do not fit the device are skipped without an allocator call: each
// refused call walks every segment (the allocator's out-of-memory report), which made rebuilding
// 10^6 segments quadratic. The work is counted, not timed: 4 allocator calls (the segment, its
// block, its free gap in two small-pool pieces of at most 1 MiB) per segment that fits, none
// per segment that does not.
TEST(ReplayTest, PreTraceSegmentsThatDoNotFitCostNoAllocatorCall) {
  class StateOnlySource final : public TraceSource {
   public:
    absl::StatusOr<bool> Next(TraceEvent*) override { return false; }
  };
  StateOnlySource source;
  constexpr DevicePtr kBase = 0x7f0000000000;
  constexpr int kSegments = 20000;
  for (int i = 0; i < kSegments; ++i) {
    const DevicePtr at = kBase + static_cast<DevicePtr>(i) * 2 * kMiB;
    InitialSegment seg{at, 2 * kMiB, PoolKind::kSmall, 0, {}};
    seg.allocated.push_back({at, 512, 500});
    source.mutable_info().initial_segments.push_back(seg);
  }
  ReplayConfig config;
  config.capacity_bytes = 64 * kMiB;  // room for 32 of them
  Replayer replayer(source, config);
  ASSERT_OK(replayer.Init());
  EXPECT_EQ(replayer.initial_state_allocations(), 32u * 4);
  EXPECT_EQ(replayer.allocator().GetStats().reserved_bytes[0].current,
            static_cast<int64_t>(64 * kMiB));
  ASSERT_EQ(replayer.warnings().size(), 1u);
  EXPECT_THAT(replayer.warnings()[0],
              ::testing::HasSubstr("19968 segments (39.00 GiB) that existed before the trace were "
                                   "not rebuilt: they do not fit the 64.00 MiB device"));
}

// A trace with many OOM records over many segments: each record's replay runs the allocator's
// retry ladder and out-of-memory report, which once walked every free block and segment
// (quadratic). The work is counted, not timed: the replay's allocator visits O(segments) free
// blocks in all, and every OOM is still reproduced and verified.
TEST(ReplayTest, ManyOomRecordsOverManySegmentsWalkLinearly) {
  constexpr uint64_t kSegments = 4000, kOoms = 4000;
  const std::string path = testing::ManyOomsLog(kSegments, kOoms);

  ASSERT_OK_AND_ASSIGN(testing::LogReplay replay, testing::OpenReplay(path));
  Replayer& replayer = *replay.replayer;
  class OomCounter final : public ReplayHooks {
   public:
    uint32_t callbacks() const override { return kHookOom; }
    void OnOom(const ReplayOom& oom) override {
      if (oom.in_trace && oom.in_replay) ++reproduced;
    }
    uint64_t reproduced = 0;
  } counter;
  FidelityChecker checker;
  HookList hooks;
  hooks.Add(&counter);
  hooks.Add(&checker);
  ASSERT_OK(replayer.Run(&hooks));
  EXPECT_FALSE(checker.divergence().has_value()) << checker.divergence()->got;
  EXPECT_EQ(counter.reproduced, kOoms);
  // One walk of the pools at the first ladder, one to start the releasable index; a walk per
  // OOM would be 16 million.
  EXPECT_LE(replayer.allocator().PoolBlocksWalked(), 3 * kSegments);
}

// An observed PyTorch log (the observe mode) only knows requests: a 299 MiB request carved from a
// new 300 MiB segment is logged as a 299 MiB block, while PyTorch (and fragscope) hand out all
// 300 MiB because a 1 MiB remainder is not split. kEventFlagSizeInferred makes verify take the
// logged size as a lower bound; without the flag the same sizes are a divergence.
std::string ObservedLog(bool size_inferred) {
  const std::string path =
      ::testing::TempDir() + (size_inferred ? "/inferred.fslog" : "/exact.fslog");
  FslogHeader header;
  header.device_total_bytes = 4 * kGiB;
  header.device_name = "observed";
  absl::StatusOr<std::unique_ptr<FslogFileWriter>> writer = FslogFileWriter::Open(path, header);
  EXPECT_OK(writer);
  constexpr DevicePtr kSegment = 0x7fc49c000000;
  AllocatorEvent segment;
  segment.kind = EventKind::kSegmentAlloc;
  segment.ptr = kSegment;
  segment.segment = kSegment;
  segment.bytes = 300 * kMiB;
  segment.pool = PoolKind::kLarge;
  (*writer)->Append(segment, 1000);
  AllocatorEvent block = segment;
  block.bytes = 299 * kMiB;
  block.requested_bytes = 299 * kMiB;
  block.flags = size_inferred ? kEventFlagSizeInferred : 0;
  for (EventKind kind : {EventKind::kAlloc, EventKind::kFreeRequested, EventKind::kFreeCompleted}) {
    block.kind = kind;
    (*writer)->Append(block, 2000);
  }
  EXPECT_OK((*writer)->Close());
  return path;
}

TEST(ReplayTest, InferredBlockSizesOfObservedLogsAreLowerBounds) {
  VerifyResult inferred = Verify(ObservedLog(true));
  EXPECT_FALSE(inferred.divergence.has_value()) << inferred.divergence->got;
  EXPECT_EQ(inferred.counts.allocations, 1u);
  VerifyResult exact = Verify(ObservedLog(false));
  ASSERT_TRUE(exact.divergence.has_value());
  EXPECT_THAT(exact.divergence->got, ::testing::HasSubstr("300.00 MiB"));
}

}  // namespace
}  // namespace fragscope
