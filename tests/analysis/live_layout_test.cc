// LiveLayout (Note [A layout kept current] in analysis/explain/live_layout.h): the layout kept
// current from the allocator's events gives, after every operation of random jobs, the evidence
// that the whole layout gives; and an OOM explanation reads what it reports, not the layout: the
// work is counted, not timed.
#include "analysis/explain/live_layout.h"

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "analysis/explain/oom_collector.h"
#include "analysis/explain/oom_layout_evidence.h"
#include "analysis/explain/segment_map.h"
#include "analysis/replay/replay.h"
#include "gtest/gtest.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/replay_verify_util.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/sanitized.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {
using ::fragscope::testing::kSanitized;

using ::fragscope::testing::TraceBuilder;

constexpr PoolId kGraph{1, 0};
constexpr PoolId kMemPool{0, 1};
constexpr StreamId kStreams[] = {0, 0x100, 0x200};

// A random job on three streams, with record_stream, empty_cache, markers, OOMs and (unless
// expandable) allocations into a CUDA-graph pool and a MemPool.
std::string RecordRandomJob(uint64_t seed, const std::string& conf) {
  std::mt19937_64 rng(seed);
  TraceBuilder t(400 * kMiB, conf, absl::StrFormat("live-layout-%d.fslog", seed));
  CachingAllocator& a = t.allocator();
  const bool pools = conf.find("expandable") == std::string::npos;
  std::vector<DevicePtr> live;
  std::optional<PoolId> routed;
  for (int i = 0; i < 2000; ++i) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 55 || live.empty()) {
      const uint64_t size = uint64_t{1} << (rng() % 26);
      t.Tick();
      absl::StatusOr<DevicePtr> p = a.Allocate(size + rng() % size, kStreams[rng() % 3]);
      if (p.ok()) live.push_back(*p);
    } else if (op < 94) {
      const size_t k = rng() % live.size();
      if (rng() % 8 == 0) {
        const StreamId user = kStreams[rng() % 3] + 1;
        t.backend().SetStreamBusy(user, true);
        EXPECT_OK(a.RecordStream(live[k], user));
      }
      t.Free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      if (rng() % 16 == 0) t.backend().CompleteStream(kStreams[rng() % 3] + 1);
    } else if (op < 96) {
      t.EmptyCache();
    } else if (op < 98) {
      t.Mark(absl::StrFormat("step %d", i));
    } else if (pools) {
      if (routed.has_value()) {
        EXPECT_OK(a.EndAllocateToPool(*routed));
        routed.reset();
      } else {
        routed = rng() % 2 == 0 ? kGraph : kMemPool;
        EXPECT_OK(a.BeginAllocateToPool(*routed, [](StreamId s) { return s == 0; }));
      }
    }
  }
  if (routed.has_value()) EXPECT_OK(a.EndAllocateToPool(*routed));
  return t.Finish();
}

void ExpectSamePinning(const std::vector<PinningBlock>& got, const std::vector<PinningBlock>& want,
                       const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].address, want[i].address) << where << " #" << i;
    EXPECT_EQ(got[i].segment, want[i].segment) << where << " #" << i;
    EXPECT_EQ(got[i].size, want[i].size) << where << " #" << i;
    EXPECT_EQ(got[i].requested_bytes, want[i].requested_bytes) << where << " #" << i;
    EXPECT_EQ(got[i].pending_free, want[i].pending_free) << where << " #" << i;
    EXPECT_EQ(got[i].origin.index, want[i].origin.index) << where << " #" << i;
    EXPECT_EQ(got[i].origin.time_ns, want[i].origin.time_ns) << where << " #" << i;
    EXPECT_EQ(got[i].origin.before_trace, want[i].origin.before_trace) << where << " #" << i;
    EXPECT_EQ(got[i].phase, want[i].phase) << where << " #" << i;
  }
}

void ExpectSameEvidence(const OomLayoutEvidence& got, const OomLayoutEvidence& want,
                        const std::string& where) {
  EXPECT_EQ(got.totals.reserved_bytes, want.totals.reserved_bytes) << where;
  EXPECT_EQ(got.totals.allocated_bytes, want.totals.allocated_bytes) << where;
  EXPECT_EQ(got.totals.free_cached_bytes, want.totals.free_cached_bytes) << where;
  EXPECT_EQ(got.totals.holes, want.totals.holes) << where;
  EXPECT_EQ(got.totals.largest_hole, want.totals.largest_hole) << where;
  EXPECT_EQ(got.totals.fragmented_segments, want.totals.fragmented_segments) << where;
  EXPECT_EQ(got.private_pool_count, want.private_pool_count) << where;
  EXPECT_EQ(got.graph_pool_count, want.graph_pool_count) << where;
  EXPECT_EQ(got.private_pool_reserved_bytes, want.private_pool_reserved_bytes) << where;
  EXPECT_EQ(got.private_pool_free_bytes, want.private_pool_free_bytes) << where;
  EXPECT_EQ(got.other_stream_fitting_bytes, want.other_stream_fitting_bytes) << where;
  ASSERT_EQ(got.fragmented.size(), want.fragmented.size()) << where;
  for (size_t i = 0; i < got.fragmented.size(); ++i) {
    const FragmentedSegment &g = got.fragmented[i], &w = want.fragmented[i];
    EXPECT_EQ(g.address, w.address) << where << " segment #" << i;
    EXPECT_EQ(g.size, w.size) << where << " segment #" << i;
    EXPECT_EQ(g.free_bytes, w.free_bytes) << where << " segment #" << i;
    EXPECT_EQ(g.holes, w.holes) << where << " segment #" << i;
    EXPECT_EQ(g.largest_hole, w.largest_hole) << where << " segment #" << i;
    EXPECT_EQ(g.live_blocks, w.live_blocks) << where << " segment #" << i;
  }
  ExpectSamePinning(got.fragmented_pinning, want.fragmented_pinning, where + " fragmented");
  ExpectSamePinning(got.largest_live, want.largest_live, where + " largest live");
}

// After every `stride`th operation from the `start`th on (the live layout follows each one): the
// live layout's evidence against the whole layout's, for requests of each pool, stream and a few
// sizes.
class CompareEveryOperation final : public ReplayHooks {
 public:
  CompareEveryOperation(Replayer& replayer, uint64_t start, uint64_t stride)
      : replayer_(replayer), start_(start), stride_(stride) {}
  uint32_t callbacks() const override { return kHookOpDone; }
  void OnOpDone(const TraceEvent& event) override {
    if (++ops_ < start_ || ::testing::Test::HasFailure()) return;
    if (!live_.has_value()) live_.emplace(replayer_);
    if ((ops_ - start_) % stride_ != 0) return;
    const LayoutSummary whole = CurrentLayout(replayer_);
    for (PoolId pool : {kDefaultPoolId, kGraph, kMemPool}) {
      for (StreamId stream : kStreams) {
        for (uint64_t rounded : {uint64_t{512}, 3 * kMiB}) {
          const OomRequest request{pool, stream, rounded};
          ExpectSameEvidence(live_->Evidence(request), EvidenceFromLayout(whole, request),
                             absl::StrFormat("after event %d, request %d on stream 0x%x",
                                             event.index, rounded, stream));
          ++compared_;
        }
      }
    }
  }
  uint64_t compared() const { return compared_; }

 private:
  Replayer& replayer_;
  uint64_t start_;
  uint64_t stride_;
  uint64_t ops_ = 0;
  uint64_t compared_ = 0;
  std::optional<LiveLayout> live_;
};

TEST(LiveLayoutTest, GivesTheWholeLayoutsEvidenceAfterEveryOperation) {
  const struct {
    uint64_t seed;
    std::string conf;
  } jobs[] = {{1, ""},
              {2, "max_split_size_mb:40"},
              {3, "expandable_segments:True"},
              {4, "expandable_segments:True,roundup_power2_divisions:4"}};
  for (const auto& job : jobs) {
    SCOPED_TRACE(absl::StrFormat("seed %d, conf \"%s\"", job.seed, job.conf));
    const std::string path = RecordRandomJob(job.seed, job.conf);
    ASSERT_OK_AND_ASSIGN(testing::LogReplay replay, testing::OpenReplay(path));
    Replayer& replayer = *replay.replayer;
    // Made after some operations: the layout is read whole once, then kept current. Under a
    // sanitizer it is compared after every 16th operation (tests/testing/sanitized.h).
    CompareEveryOperation compare(replayer, 200, kSanitized ? 16 : 1);
    ASSERT_OK(replayer.Run(&compare));
    EXPECT_GT(compare.compared(), kSanitized ? 60u : 1000u);
  }
}

// Many OOM records over many fragmented segments (each a 12 MiB segment with one live 10.5 MiB
// block and a 1.5 MiB hole): every explanation reads its 5 segments' blocks and a few index
// entries, whatever the number of segments, and the layout is read from the allocator once.
struct ManyOoms {
  uint64_t explained = 0;
  uint64_t blocks_read = 0;
  uint64_t entries_read = 0;
  OomExplanation first;
};

ManyOoms ExplainManyOoms(uint64_t segments, uint64_t ooms) {
  const std::string path =
      testing::ManyOomsLog(segments, ooms, absl::StrFormat("many-ooms-%d.fslog", segments));
  absl::StatusOr<testing::LogReplay> replay = testing::OpenReplay(path);
  EXPECT_OK(replay.status());
  if (!replay.ok()) return {};
  Replayer& replayer = *replay->replayer;
  OomCollector collector(replayer, {.capacity_bytes = replayer.config().capacity_bytes});
  EXPECT_OK(replayer.Run(&collector));
  ManyOoms result;
  result.explained = collector.explanations().size();
  if (const LiveLayout* layout = collector.layout()) {
    result.blocks_read = layout->blocks_read();
    result.entries_read = layout->entries_read();
  }
  if (!collector.explanations().empty()) result.first = collector.explanations().front();
  return result;
}

TEST(LiveLayoutTest, AnOomExplanationReadsWhatItReports) {
  constexpr uint64_t kOoms = 500;
  for (uint64_t segments : {uint64_t{1000}, uint64_t{8000}}) {
    SCOPED_TRACE(absl::StrFormat("%d segments", segments));
    const ManyOoms r = ExplainManyOoms(segments, kOoms);
    ASSERT_EQ(r.explained, kOoms);
    EXPECT_EQ(r.first.cause, OomCause::kFragmentation);
    EXPECT_EQ(r.first.fragmented_segment_count, segments);
    EXPECT_EQ(r.first.holes, segments);
    ASSERT_EQ(r.first.fragmented.size(), kMaxFragmentedSegments);
    ASSERT_EQ(r.first.pinning.size(), kMaxFragmentedSegments);  // one live block each
    // The layout's blocks are read from the allocator once (two per segment), and no OOM record
    // changes a segment: a whole layout per explanation would be kOoms times that.
    EXPECT_LE(r.blocks_read, 2 * segments + 16);
    // Per explanation: the 5 segments' 2 blocks each, the 12 largest live blocks, and the pool's
    // holes that fit (none: the request is of the large pool and wider than every hole).
    EXPECT_LE(r.entries_read, kOoms * (2 * kMaxFragmentedSegments + kMaxPinningBlocks + 2));
  }
}

}  // namespace
}  // namespace fragscope
