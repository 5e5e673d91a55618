// StatsTracker and the allocator's two ways of feeding it (caching_allocator.h, EmitMade): the
// hot events go straight into the stats when no observer is attached and through Emit when one
// is. Both must give the same stats, and a StatsTracker that observes the events from outside (as
// the analyzer's does with a log) must rebuild exactly the stats the allocator reports. Two
// allocators in one process also check that nothing depends on where their tables live: the
// order of stream-ordered frees once did (a hash map's), and with it the inactive_split peaks.
#include "allocator/stats_tracker.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/device_stats.h"
#include "allocator/simulated_backend.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

constexpr StreamId kStreams[] = {0, 0xa, 0xb};

// One allocator and its backend, optionally watched by an outside StatsTracker.
struct Subject {
  Subject(const AllocatorOptions& options, bool observed)
      : backend(2 * kGiB), allocator(backend, options) {
    if (observed) {
      tracker.set_max_split_size(allocator.GetStats().max_split_size);
      allocator.AddObserver(&tracker);
    }
  }
  SimulatedBackend backend;
  CachingAllocator allocator;
  StatsTracker tracker;
  std::vector<DevicePtr> live;
};

// One seeded step of a workload that reaches every stats update: allocations of 1 B to 256 MiB
// on three streams (splits, oversize blocks, new segments, OOMs on the 2 GiB device with their
// retry ladder), frees with and without other streams' uses (immediate and deferred frees),
// stream completions, and empty_cache.
void Step(Subject& s, uint64_t draw, uint64_t size_draw) {
  const int action = static_cast<int>(draw % 100);
  const StreamId stream = kStreams[(draw / 100) % 3];
  if (action < 55 || s.live.empty()) {
    const uint64_t size = static_cast<uint64_t>(std::exp2(size_draw % 2800 / 100.0)) + 1;
    absl::StatusOr<DevicePtr> p = s.allocator.Allocate(size, stream);
    if (p.ok()) {
      s.live.push_back(*p);
    } else {
      ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
    }
  } else if (action < 93) {
    const size_t i = size_draw % s.live.size();
    if (action % 4 == 0) {
      ASSERT_OK(s.allocator.RecordStream(s.live[i], stream));
      s.backend.SetStreamBusy(stream, true);
    }
    ASSERT_OK(s.allocator.Free(s.live[i]));
    s.live[i] = s.live.back();
    s.live.pop_back();
  } else if (action < 97) {
    s.backend.CompleteStream(stream);
  } else {
    s.allocator.EmptyCache();
  }
}

// The stats in which `a` and `b` differ ("key: a/b" lines, memory_stats() keys), for failure
// messages.
std::string Differences(const DeviceStats& a, const DeviceStats& b) {
  const auto flat_a = FlattenStats(a);
  const auto flat_b = FlattenStats(b);
  std::string out;
  for (size_t i = 0; i < flat_a.size(); ++i) {
    if (flat_a[i].second != flat_b[i].second) {
      absl::StrAppendFormat(&out, "%s: %d/%d\n", flat_a[i].first, flat_a[i].second,
                            flat_b[i].second);
    }
  }
  return out;
}

class StatsTrackerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StatsTrackerTest, AnObserverChangesNoStatAndRebuildsThemAll) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(GetParam());
  ASSERT_OK(options.status());
  Subject plain(*options, /*observed=*/false);
  Subject observed(*options, /*observed=*/true);
  std::mt19937_64 rng(0x57a75);
  for (int step = 0; step < 4000; ++step) {
    const uint64_t draw = rng();
    const uint64_t size_draw = rng();
    Step(plain, draw, size_draw);
    Step(observed, draw, size_draw);
    if (HasFatalFailure()) return;
    const DeviceStats stats = plain.allocator.GetStats();
    ASSERT_TRUE(observed.allocator.GetStats() == stats)
        << "step " << step << ", observed/plain:\n"
        << Differences(observed.allocator.GetStats(), stats);
    ASSERT_TRUE(observed.tracker.stats() == stats) << "step " << step << ", tracker/allocator:\n"
                                                   << Differences(observed.tracker.stats(), stats);
  }
  // The workload reached the rare paths too.
  const DeviceStats stats = plain.allocator.GetStats();
  EXPECT_GT(stats.num_ooms, 0);
  EXPECT_GT(stats.num_device_free, 0);
  if (!options->expandable_segments) {
    EXPECT_GT(stats.inactive_split[0].peak, 0);
  }
  if (options->max_split_size_set()) {
    EXPECT_GT(stats.oversize_allocations.peak, 0);
  }

  // Peak resets: the allocator's own and the observer's, the same way.
  plain.allocator.ResetPeakStats();
  observed.allocator.ResetPeakStats();
  observed.tracker.ResetPeak();
  EXPECT_EQ(observed.allocator.GetStats(), plain.allocator.GetStats());
  EXPECT_EQ(observed.tracker.stats(), plain.allocator.GetStats());
}

std::string OptionsName(const ::testing::TestParamInfo<std::string>& info) {
  static const char* const kNames[] = {"Defaults", "MaxSplit", "Expandable", "GcAndMaxSplit"};
  return kNames[info.index];
}

INSTANTIATE_TEST_SUITE_P(Options, StatsTrackerTest,
                         ::testing::Values("", "max_split_size_mb:40", "expandable_segments:True",
                                           "garbage_collection_threshold:0.6,max_split_size_mb:40"),
                         OptionsName);

}  // namespace
}  // namespace fragscope
