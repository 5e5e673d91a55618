// Seeded randomized stress (invariants after every step) and a multi-threaded stress test.
#include <random>
#include <thread>
#include <vector>

#include "allocator/caching_allocator.h"
#include "tests/allocator/allocator_fixture.h"

namespace fragscope {
namespace {

using CachingAllocatorStressTest = testing::AllocatorFixture;

struct Live {
  DevicePtr ptr;
  uint64_t size;
};

// Log-uniform sizes from 1 B to 256 MiB, the shape of tensor sizes in training.
uint64_t RandomSize(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> log_size(0.0, 28.0);
  return static_cast<uint64_t>(std::exp2(log_size(rng))) + 1;
}

void CheckNoOverlap(std::vector<Live> live) {
  std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.ptr < b.ptr; });
  for (size_t i = 1; i < live.size(); ++i) {
    ASSERT_GE(live[i].ptr, live[i - 1].ptr + live[i - 1].size) << "live allocations overlap";
  }
}

void RunRandomWorkload(CachingAllocator& allocator, SimulatedBackend& backend, uint64_t seed,
                       int steps) {
  std::mt19937_64 rng(seed);
  std::vector<Live> live;
  constexpr StreamId kStreams[] = {0, 0xa, 0xb};
  for (int step = 0; step < steps; ++step) {
    const int action = static_cast<int>(rng() % 100);
    if (action < 55 || live.empty()) {
      const uint64_t size = RandomSize(rng);
      const StreamId stream = kStreams[rng() % 3];
      absl::StatusOr<DevicePtr> p = allocator.Allocate(size, stream);
      if (p.ok()) {
        live.push_back({*p, size});
      } else {
        ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
      }
    } else if (action < 93) {
      const size_t i = rng() % live.size();
      if (rng() % 4 == 0) {
        ASSERT_OK(allocator.RecordStream(live[i].ptr, kStreams[rng() % 3]));
        backend.SetStreamBusy(kStreams[rng() % 3], true);
      }
      ASSERT_OK(allocator.Free(live[i].ptr));
      live[i] = live.back();
      live.pop_back();
    } else if (action < 97) {
      backend.CompleteStream(kStreams[rng() % 3]);
    } else {
      allocator.EmptyCache();
    }
    absl::Status status = allocator.CheckInvariants();
    ASSERT_TRUE(status.ok()) << "step " << step << ": " << status;
  }
  CheckNoOverlap(live);
  for (const Live& l : live) ASSERT_OK(allocator.Free(l.ptr));
  for (StreamId s : kStreams) backend.CompleteStream(s);
  allocator.EmptyCache();
  ASSERT_OK(allocator.CheckInvariants());
  const DeviceStats s = allocator.GetStats();
  EXPECT_EQ(s.reserved_bytes[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.allocated_bytes[0].allocated, s.allocated_bytes[0].freed);
}

TEST_F(CachingAllocatorStressTest, RandomWorkloadKeepsEveryInvariantDefaultOptions) {
  Init("", 4 * kGiB);
  RunRandomWorkload(*allocator_, *backend_, 1, 4000);
}

TEST_F(CachingAllocatorStressTest, RandomWorkloadKeepsEveryInvariantWithMaxSplit) {
  Init("max_split_size_mb:64,roundup_power2_divisions:[256:4,>:8]", 3 * kGiB);
  RunRandomWorkload(*allocator_, *backend_, 2, 4000);
}

TEST_F(CachingAllocatorStressTest, RandomWorkloadKeepsEveryInvariantWithGcAndFraction) {
  Init("garbage_collection_threshold:0.6,per_process_memory_fraction:0.8,max_split_size_mb:100",
       4 * kGiB);
  RunRandomWorkload(*allocator_, *backend_, 3, 4000);
}

TEST_F(CachingAllocatorStressTest, RandomWorkloadKeepsEveryInvariantWithFirstFit) {
  Init("placement:first_fit,max_split_size_mb:64", 3 * kGiB);
  RunRandomWorkload(*allocator_, *backend_, 4, 4000);
}

TEST_F(CachingAllocatorStressTest, RandomWorkloadKeepsEveryInvariantWithExpandableSegments) {
  Init("expandable_segments:True", 3 * kGiB);
  RunRandomWorkload(*allocator_, *backend_, 5, 4000);
  EXPECT_EQ(backend_->reservation_count(), 0u);  // everything unmapped and released at the end
}

TEST_F(CachingAllocatorStressTest, RandomWorkloadKeepsEveryInvariantExpandableWithMaxSplit) {
  Init("expandable_segments:True,max_split_size_mb:64,placement:first_fit", 3 * kGiB);
  RunRandomWorkload(*allocator_, *backend_, 6, 4000);
}

// test_allocator_fuzz: random 2-20 MiB allocations, frees and empty_cache; live ranges never
// overlap.
TEST_F(CachingAllocatorStressTest, AllocatorFuzzLikeTestCuda) {
  Init("", 64 * kGiB);
  std::mt19937_64 rng(7);
  std::vector<Live> live;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t r = rng() % 10;
    if (r < 5 || live.empty()) {
      const uint64_t size = (2 + rng() % 19) * kMiB;
      ASSERT_OK_AND_ASSIGN(DevicePtr p, allocator_->Allocate(size, 0));
      live.push_back({p, size});
    } else if (r < 9) {
      const size_t j = rng() % live.size();
      ASSERT_OK(allocator_->Free(live[j].ptr));
      live[j] = live.back();
      live.pop_back();
    } else {
      allocator_->EmptyCache();
    }
    if (i % 97 == 0) CheckNoOverlap(live);
  }
  ASSERT_OK(allocator_->CheckInvariants());
}

// Several threads allocate and free concurrently on their own streams (run under TSan in the
// sanitizer job).
TEST_F(CachingAllocatorStressTest, ConcurrentThreadsKeepInvariants) {
  Init("", 8 * kGiB);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      std::mt19937_64 rng(100 + static_cast<uint64_t>(t));
      std::vector<DevicePtr> live;
      const StreamId stream = static_cast<StreamId>(t);
      for (int i = 0; i < 5000; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          absl::StatusOr<DevicePtr> p = allocator_->Allocate(1 + rng() % (8 * kMiB), stream);
          if (p.ok()) live.push_back(*p);
        } else {
          const size_t j = rng() % live.size();
          EXPECT_OK(allocator_->Free(live[j]));
          live[j] = live.back();
          live.pop_back();
        }
        if (i % 1000 == 0) (void)allocator_->GetStats();
      }
      for (DevicePtr p : live) EXPECT_OK(allocator_->Free(p));
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_OK(allocator_->CheckInvariants());
  EXPECT_EQ(Stats().allocated_bytes[0].current, 0);
}

}  // namespace
}  // namespace fragscope
