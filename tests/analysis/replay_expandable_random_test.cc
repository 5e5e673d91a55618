// Random jobs with expandable segments, several streams, record_stream, empty_cache and OOMs,
// recorded by fragscope's own allocator as an .fslog and as a PyTorch snapshot: both replay with
// every event, address and statistic equal (Note [Stream-ordered frees in a replay] and
// Note [Expandable segments in a replay] in analysis/replay/replay.h), and so does a replay of the
// log whose immediate frees come folded (TraceSource::FoldFreeCompletions), stopped anywhere.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "analysis/replay/replay.h"
#include "analysis/sources/fslog_source.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "gtest/gtest.h"
#include "tests/analysis/replay_verify_util.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/sanitized.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {
namespace {

constexpr uint64_t kCapacity = 600 * kMiB;

// A random job on three streams with record_stream, empty_cache and OOMs on a 600 MiB device,
// recorded as an .fslog (empty_cache recorded) and as a snapshot (inferred).
struct RandomJob {
  std::string conf;
  std::string log_path;
  std::shared_ptr<const PyTorchSnapshot> snapshot;
  DeviceStats stats;  // the job's allocator at the end
};

// Records the job of `seed`. Each operation advances the clock, unless `allocations_tick` is
// false: then an allocation has the time of the operation before it, so that a free it completes
// at once is one combined record (FslogFileWriter combines a free_completed of its
// free_requested's time).
RandomJob RecordRandomJob(uint64_t seed, bool allocations_tick = true) {
  RandomJob job;
  std::mt19937_64 rng(seed);
  job.conf = seed == 3 ? "expandable_segments:True,roundup_power2_divisions:4"
                       : "expandable_segments:True";
  TraceBuilder t(kCapacity, job.conf);
  SnapshotRecorder recorder;
  t.allocator().AddObserver(&recorder);
  std::vector<DevicePtr> live;
  const StreamId streams[] = {0, 0x100, 0x200};
  for (int i = 0; i < 3000; ++i) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 55 || live.empty()) {
      const uint64_t size = uint64_t{1} << (rng() % 27);
      if (allocations_tick) t.Tick();
      absl::StatusOr<DevicePtr> p = t.allocator().Allocate(size + rng() % size, streams[rng() % 3]);
      if (p.ok()) live.push_back(*p);
    } else if (op < 97) {
      const size_t k = rng() % live.size();
      if (rng() % 8 == 0) {
        const StreamId user = streams[rng() % 3] + 1;
        t.backend().SetStreamBusy(user, true);
        EXPECT_OK(t.allocator().RecordStream(live[k], user));
      }
      t.Free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      if (rng() % 16 == 0) t.backend().CompleteStream(streams[rng() % 3] + 1);
    } else {
      t.EmptyCache();
    }
  }
  t.allocator().RemoveObserver(&recorder);
  job.stats = t.allocator().GetStats();
  job.snapshot = MakeSnapshot(t.allocator(), recorder, job.conf);
  job.log_path = t.Finish();
  return job;
}

TEST(ReplayExpandableTest, RandomJobsAreFaithful) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    const RandomJob job = RecordRandomJob(seed);
    EXPECT_GT(job.stats.num_ooms, 0);
    EXPECT_GT(job.stats.num_device_free, 0);
    VerifyResult log = VerifyFile(job.log_path, kCapacity);
    EXPECT_FALSE(log.divergence.has_value()) << Describe(log);
    EXPECT_GT(log.counts.allocations, 1000u);
    EXPECT_GT(log.counts.segment_maps, 0u);
    ExpectSameStats(log.stats, job.stats);
    VerifyResult snap = VerifySnapshot(job.snapshot, kCapacity);
    EXPECT_FALSE(snap.divergence.has_value()) << Describe(snap);
    EXPECT_EQ(snap.counts.allocations, log.counts.allocations);
  }
}

// 40 random jobs. Some free a block that another stream still uses just before an allocation
// that runs the retry ladder: the ladder's synchronization completes that free first, so the
// trace shows free_requested and free_completed back to back, as for an immediate free (seeds 12
// and 25, among others). Read as immediate, the block would serve the allocation from the cache
// and the replay would diverge; see Note [Stream-ordered frees in a replay].
TEST(ReplayExpandableTest, FreesCompletedByTheNextRetryLadderAreFaithful) {
  for (uint64_t seed : SeedsToRun(40, {12, 25})) {
    SCOPED_TRACE(seed);
    const RandomJob job = RecordRandomJob(seed);
    VerifyResult log = VerifyFile(job.log_path, kCapacity);
    EXPECT_FALSE(log.divergence.has_value()) << Describe(log);
    ExpectSameStats(log.stats, job.stats);
    VerifyResult snap = VerifySnapshot(job.snapshot, kCapacity);
    EXPECT_FALSE(snap.divergence.has_value()) << Describe(snap);
    EXPECT_EQ(snap.counts.allocations, log.counts.allocations);
  }
}

// What a replay ended with: every statistic, the layout, and how far it read.
struct ReplayEnd {
  DeviceStats stats;
  std::string layout;  // every segment and block
  uint64_t events_read = 0;
  uint64_t last_index = 0;
  uint64_t last_time_ns = 0;
  std::vector<std::string> warnings;
};

// Hooks that look at every event: the replay does not ask its source to fold.
class SeesEvents final : public ReplayHooks {
 public:
  uint32_t callbacks() const override { return kHookTraceEvent; }
};

// Replays the log up to `stop_after`, with its immediate frees folded (Run with no hooks) or not.
ReplayEnd ReplayLog(const std::string& path, bool fold, uint64_t stop_after) {
  std::unique_ptr<FslogSource> source = *FslogSource::Open(path, FslogReading::kCallingThread);
  ReplayConfig config;
  config.options = *ParseAllocatorOptions(source->info().allocator_options);
  config.capacity_bytes = kCapacity;
  config.stop_after_index = stop_after;
  Replayer replayer(*source, config);
  EXPECT_OK(replayer.Init());
  SeesEvents sees;
  EXPECT_OK(replayer.Run(fold ? nullptr : &sees));
  ReplayEnd end{replayer.allocator().GetStats(), "",
                replayer.events_read(),          replayer.last_index(),
                replayer.last_time_ns(),         replayer.warnings()};
  for (const SegmentInfo& segment : replayer.allocator().Snapshot().segments) {
    absl::StrAppendFormat(&end.layout, "segment 0x%x %d stream %d:", segment.address,
                          segment.total_size, segment.stream);
    for (const BlockInfo& b : segment.blocks) {
      absl::StrAppendFormat(&end.layout, " 0x%x %d %d %d", b.address, b.size, b.requested_size,
                            static_cast<int>(b.state));
    }
    end.layout += "\n";
  }
  return end;
}

void ExpectSameEnd(const ReplayEnd& folded, const ReplayEnd& unfolded) {
  ExpectSameStats(folded.stats, unfolded.stats);
  EXPECT_EQ(folded.layout, unfolded.layout);
  EXPECT_EQ(folded.events_read, unfolded.events_read);
  EXPECT_EQ(folded.last_index, unfolded.last_index);
  EXPECT_EQ(folded.last_time_ns, unfolded.last_time_ns);
  EXPECT_EQ(folded.warnings, unfolded.warnings);
}

// The indices of the log's folded frees.
std::vector<uint64_t> FoldedFrees(const std::string& path) {
  std::unique_ptr<FslogSource> source = *FslogSource::Open(path, FslogReading::kCallingThread);
  EXPECT_TRUE(source->FoldFreeCompletions());
  std::vector<uint64_t> indices;
  TraceEvent e;
  while (*source->Next(&e)) {
    if ((e.flags & kEventFlagCompletionFolded) != 0) indices.push_back(e.index);
  }
  return indices;
}

// Folded frees replay as their pairs do: to the end (the job's own statistics), and stopped at a
// folded free (between its halves), just after it, and elsewhere. The jobs' allocations take the
// time of the operation before them, so that a free completed by the next allocation's retry
// ladder (seeds 12 and 25, above) is a combined record too, and so folded.
TEST(ReplayExpandableTest, FoldedFreesReplayAsTheirPairs) {
  for (uint64_t seed : SeedsToRun(40, {12, 25})) {
    SCOPED_TRACE(seed);
    const RandomJob job = RecordRandomJob(seed, /*allocations_tick=*/false);
    const ReplayEnd folded = ReplayLog(job.log_path, true, UINT64_MAX);
    ExpectSameStats(folded.stats, job.stats);
    ExpectSameEnd(folded, ReplayLog(job.log_path, false, UINT64_MAX));
    const std::vector<uint64_t> frees = FoldedFrees(job.log_path);
    ASSERT_GT(frees.size(), 500u);
    for (size_t i = 0; i < frees.size(); i += 97) {
      for (uint64_t stop : {frees[i], frees[i] + 1, frees[i] + 2}) {
        SCOPED_TRACE(absl::StrFormat("stop after event %d", stop));
        ExpectSameEnd(ReplayLog(job.log_path, true, stop), ReplayLog(job.log_path, false, stop));
      }
    }
  }
}

}  // namespace
}  // namespace fragscope::testing
