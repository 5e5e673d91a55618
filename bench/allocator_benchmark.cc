// Hot-path benchmarks of CachingAllocator on the simulated backend (no GPU): the host-side cost
// of the allocator's bookkeeping, which is what a real job pays per tensor on top of the kernels.
//
//   BM_WarmPair          malloc+free of one size, always served from the cache.
//   BM_WarmPairLogged    the same with the .fslog writer attached.
//   BM_WarmPairObserved  the same with an observer that does nothing: the dispatch's share of
//                        the logged pair's overhead.
//   BM_WarmPairPaced, BM_WarmPairLoggedPaced
//                        the pairs in timed bursts of 400 with 200 us pauses (a job's rhythm:
//                        the log's writer keeps up, and each burst starts cold).
//   BM_RandomAllocations RMM's random_allocations: 2N steps, each allocates with 73 % probability
//                        (below N live blocks and a 16000 MiB cap), else frees a random live
//                        block; sizes uniform in [1, max_size MiB]. Reported per operation.
//                        Under the cap, sizes up to 1 MiB stop at ~38k live blocks;
//   BM_RandomAllocationsUncapped
//                        the same without the cap: /100000/1 reaches 100k live blocks.
//   BM_ConcurrentStreams 4 threads, each on its own stream, warm pairs on one shared allocator.
// Targets: warm pair <= 100 ns; per-op cost at 100k live blocks within 2x of 1k.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "bench/random_mix.h"
#include "benchmark/benchmark.h"
#include "fslog/fslog_writer.h"

namespace fragscope {
namespace {

AllocatorOptions DefaultOptions() { return AllocatorOptions{}; }

// The timed loop of the warm-pair benchmarks: malloc+free of state.range(0) bytes, warm cache.
void RunWarmPairs(benchmark::State& state, CachingAllocator& allocator) {
  const auto size = static_cast<uint64_t>(state.range(0));
  (void)allocator.Free(*allocator.Allocate(size, 0));  // warm the cache
  for (auto _ : state) {
    absl::StatusOr<DevicePtr> p = allocator.Allocate(size, 0);
    benchmark::DoNotOptimize(p);
    (void)allocator.Free(*p);
  }
  state.SetItemsProcessed(state.iterations());
}

// Paced: each iteration is a timed burst of kPacedBurstPairs pairs (800 records, about one 64 KiB
// chunk of log) followed by an untimed kPacedGap pause, about the rate at which a training job's
// forward pass allocates (a few million events/s at most). The writer's background thread then
// keeps up, as in a job, instead of copying 2 GB/s of log into the page cache and dropping
// records, as it does under the unpaced BM_WarmPairLogged.
constexpr int kPacedBurstPairs = 400;
constexpr auto kPacedGap = std::chrono::microseconds(200);

void RunPacedWarmPairs(benchmark::State& state, CachingAllocator& allocator) {
  const auto size = static_cast<uint64_t>(state.range(0));
  (void)allocator.Free(*allocator.Allocate(size, 0));  // warm the cache
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kPacedBurstPairs; ++i) {
      absl::StatusOr<DevicePtr> p = allocator.Allocate(size, 0);
      benchmark::DoNotOptimize(p);
      (void)allocator.Free(*p);
    }
    const auto end = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
    std::this_thread::sleep_for(kPacedGap);
  }
  state.SetItemsProcessed(state.iterations() * kPacedBurstPairs);
}

void BM_WarmPair(benchmark::State& state) {
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, DefaultOptions());
  RunWarmPairs(state, allocator);
}
BENCHMARK(BM_WarmPair)->Arg(4096)->Arg(1 << 20)->Arg(32 << 20)->Arg(512 << 20);

// Runs `run` with the .fslog writer observing `allocator`, writing to /tmp (deleted after), and
// reports the records it dropped (every buffer awaiting the disk).
template <typename Run>
void RunLogged(benchmark::State& state, const SimulatedBackend& backend,
               CachingAllocator& allocator, Run run) {
  FslogHeaderInfo info;
  info.device_name = backend.name();
  info.device_total_bytes = backend.capacity_bytes();
  absl::StatusOr<std::unique_ptr<FslogWriter>> writer =
      FslogWriter::Open("/tmp/fragscope_bench_%p.fslog", info);
  if (!writer.ok()) {
    state.SkipWithError(std::string(writer.status().message()).c_str());
    return;
  }
  allocator.AddObserver(writer->get());
  run();
  state.counters["dropped_records"] = static_cast<double>((*writer)->dropped_records());
  allocator.RemoveObserver(writer->get());
  const std::string path = (*writer)->path();
  writer->reset();
  std::remove(path.c_str());
}

// The same pair with the .fslog writer attached (three events per pair: alloc, free_requested,
// free_completed; two records, the free's combined). Target: <= 10 % over BM_WarmPair.
void BM_WarmPairLogged(benchmark::State& state) {
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, DefaultOptions());
  RunLogged(state, backend, allocator, [&] { RunWarmPairs(state, allocator); });
}
BENCHMARK(BM_WarmPairLogged)->Arg(1 << 20)->Arg(32 << 20);

void BM_WarmPairPaced(benchmark::State& state) {
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, DefaultOptions());
  RunPacedWarmPairs(state, allocator);
}
BENCHMARK(BM_WarmPairPaced)->Arg(1 << 20)->Arg(32 << 20)->UseManualTime();

void BM_WarmPairLoggedPaced(benchmark::State& state) {
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, DefaultOptions());
  RunLogged(state, backend, allocator, [&] { RunPacedWarmPairs(state, allocator); });
}
BENCHMARK(BM_WarmPairLoggedPaced)->Arg(1 << 20)->Arg(32 << 20)->UseManualTime();

// The floor under BM_WarmPairLogged: the three observer calls per pair without any work.
void BM_WarmPairObserved(benchmark::State& state) {
  struct NoOpObserver : AllocatorObserver {
    void OnEvent(const AllocatorEvent& event) override { benchmark::DoNotOptimize(&event); }
  };
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, DefaultOptions());
  NoOpObserver observer;
  allocator.AddObserver(&observer);
  RunWarmPairs(state, allocator);
  allocator.RemoveObserver(&observer);
}
BENCHMARK(BM_WarmPairObserved)->Arg(1 << 20)->Arg(32 << 20);

void RunRandomAllocations(benchmark::State& state, uint64_t cap_bytes) {
  SimulatedBackend backend(RandomAllocationMix::DeviceBytesFor(cap_bytes));
  CachingAllocator allocator(backend, DefaultOptions());
  RandomAllocationMix mix(allocator, static_cast<size_t>(state.range(0)),
                          static_cast<uint64_t>(state.range(1)) * kMiB, cap_bytes);
  int64_t ops = 0;
  for (auto _ : state) {
    for (int64_t step = 0; step < 2 * state.range(0); ++step) mix.Step();
    ops += 2 * state.range(0);
  }
  state.SetItemsProcessed(ops);
  state.counters["ns_per_op"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["live_blocks"] = static_cast<double>(mix.live_blocks());
}
void BM_RandomAllocations(benchmark::State& state) {
  RunRandomAllocations(state, RandomAllocationMix::kCapBytes);
}
BENCHMARK(BM_RandomAllocations)
    ->ArgsProduct({{1000, 10000, 100000}, {1, 64, 1024}})
    ->Unit(benchmark::kMillisecond);
// Without RMM's cap, so that sizes up to 1 MiB reach 100k live blocks (38k under the cap).
void BM_RandomAllocationsUncapped(benchmark::State& state) {
  RunRandomAllocations(state, RandomAllocationMix::kUncappedBytes);
}
BENCHMARK(BM_RandomAllocationsUncapped)
    ->ArgsProduct({{1000, 100000}, {1}})
    ->Unit(benchmark::kMillisecond);

// Threads share one allocator (one per device in a job), each on its own stream.
CachingAllocator* shared_allocator = nullptr;
SimulatedBackend* shared_backend = nullptr;

void BM_ConcurrentStreams(benchmark::State& state) {
  if (state.thread_index() == 0) {
    shared_backend = new SimulatedBackend(80 * kGiB);
    shared_allocator = new CachingAllocator(*shared_backend, DefaultOptions());
  }
  // Google Benchmark starts all threads' loops together after the setup above.
  const auto stream = static_cast<StreamId>(state.thread_index() + 1);
  for (auto _ : state) {
    absl::StatusOr<DevicePtr> p = shared_allocator->Allocate(1 << 20, stream);
    benchmark::DoNotOptimize(p);
    (void)shared_allocator->Free(*p);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    delete shared_allocator;
    delete shared_backend;
  }
}
BENCHMARK(BM_ConcurrentStreams)->Threads(1)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace fragscope

BENCHMARK_MAIN();
