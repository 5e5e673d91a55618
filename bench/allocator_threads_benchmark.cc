// The random workload on several threads sharing one CachingAllocator (simulated backend), each
// thread on its own stream, as the threads of one job share their device's allocator. The
// warm-pair counterpart is allocator_benchmark's BM_ConcurrentStreams.
//
//   BM_ConcurrentRandom/max_live/threads:T   per thread and iteration: RMM's random_allocations
//       (2 * max_live steps, allocate with 73 % probability below max_live live blocks and the
//       thread's share of a 16000 MiB cap, else free a random live block; sizes uniform in
//       [1 B, 1 MiB]), then free what is still live, as RMM does. ns_per_op is wall time per
//       operation over all threads together (the allocator's throughput, lock included).
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "benchmark/benchmark.h"

namespace fragscope {
namespace {

constexpr uint64_t kCapBytes = 16000 * kMiB;

CachingAllocator* shared_allocator = nullptr;
SimulatedBackend* shared_backend = nullptr;

void BM_ConcurrentRandom(benchmark::State& state) {
  if (state.thread_index() == 0) {
    shared_backend = new SimulatedBackend(4 * kCapBytes);
    shared_allocator = new CachingAllocator(*shared_backend, AllocatorOptions());
  }
  // Google Benchmark starts every thread's loop together, after the setup above.
  const auto max_live = static_cast<size_t>(state.range(0));
  const uint64_t cap_bytes = kCapBytes / static_cast<uint64_t>(state.threads());
  const auto stream = static_cast<StreamId>(state.thread_index() + 1);
  std::mt19937_64 rng(42 + static_cast<uint64_t>(state.thread_index()));
  std::uniform_int_distribution<uint64_t> size_dist(1, kMiB);
  std::vector<std::pair<DevicePtr, uint64_t>> live;
  live.reserve(max_live);
  int64_t ops = 0;
  for (auto _ : state) {
    uint64_t live_bytes = 0;
    for (size_t step = 0; step < 2 * max_live; ++step) {
      const bool allocate = live.empty() || (rng() % 100 < 73 && live.size() < max_live);
      const uint64_t size = size_dist(rng);
      if (allocate && live_bytes + size <= cap_bytes) {
        absl::StatusOr<DevicePtr> p = shared_allocator->Allocate(size, stream);
        if (p.ok()) {
          live.emplace_back(*p, size);
          live_bytes += size;
        }
      } else if (!live.empty()) {
        const size_t i = rng() % live.size();
        (void)shared_allocator->Free(live[i].first);
        live_bytes -= live[i].second;
        live[i] = live.back();
        live.pop_back();
      }
      ++ops;
    }
    for (const auto& [ptr, bytes] : live) (void)shared_allocator->Free(ptr);
    ops += static_cast<int64_t>(live.size());
    live.clear();
  }
  state.SetItemsProcessed(ops);
  state.counters["ns_per_op"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  if (state.thread_index() == 0) {
    // Every thread has left its loop (Google Benchmark waits for all), and each frees its blocks
    // inside the loop, so nothing touches the allocator any more.
    delete shared_allocator;
    delete shared_backend;
  }
}
BENCHMARK(BM_ConcurrentRandom)
    ->Arg(1000)
    ->Arg(10000)
    ->Threads(1)
    ->Threads(4)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fragscope

BENCHMARK_MAIN();
