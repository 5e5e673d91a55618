// The C ABI's hot path (libfragscope_alloc.so on simulated devices, no GPU): what
// fragscope_malloc/fragscope_free add around CachingAllocator (finding the registry and the
// device's allocator, the exception guard, the statuses).
//
//   BM_DirectPair            CachingAllocator::Allocate+Free on a SimulatedBackend: the floor.
//   BM_PluggablePair         fragscope_malloc+fragscope_free of the same size.
//   BM_PluggablePairStreams  1 and 4 threads, each on its own stream, one shared device.
//   BM_PluggablePairDevices  1 and 4 threads, each on its own device: nothing shared but what
//                            the C ABI itself shares (a per-call shared counter would show here).
#include <cstdint>
#include <cstdlib>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "benchmark/benchmark.h"
#include "hooks/fragscope_alloc.h"

namespace fragscope {
namespace {

constexpr uint64_t kDeviceBytes = uint64_t{8} << 30;

void BM_DirectPair(benchmark::State& state) {
  SimulatedBackend backend(kDeviceBytes, 0, AddressOrder::kHighestFirst);
  CachingAllocator allocator(backend, AllocatorOptions{});
  const auto size = static_cast<uint64_t>(state.range(0));
  (void)allocator.Free(*allocator.Allocate(size, 0));  // warm the cache
  for (auto _ : state) {
    absl::StatusOr<DevicePtr> p = allocator.Allocate(size, 0);
    benchmark::DoNotOptimize(p);
    (void)allocator.Free(*p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DirectPair)->Arg(4096)->Arg(1 << 20);

void RunPluggablePairs(benchmark::State& state, int device, cudaStream_t stream) {
  const auto size = static_cast<size_t>(state.range(0));
  fragscope_free(fragscope_malloc(size, device, stream), size, device, stream);  // warm
  for (auto _ : state) {
    void* p = fragscope_malloc(size, device, stream);
    benchmark::DoNotOptimize(p);
    fragscope_free(p, size, device, stream);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PluggablePair(benchmark::State& state) { RunPluggablePairs(state, 0, nullptr); }
BENCHMARK(BM_PluggablePair)->Arg(4096)->Arg(1 << 20);

void BM_PluggablePairStreams(benchmark::State& state) {
  const auto stream = static_cast<uintptr_t>(state.thread_index()) + 1;
  RunPluggablePairs(state, 0, reinterpret_cast<cudaStream_t>(stream));
}
BENCHMARK(BM_PluggablePairStreams)->Arg(1 << 20)->Threads(1)->Threads(4)->UseRealTime();

void BM_PluggablePairDevices(benchmark::State& state) {
  RunPluggablePairs(state, state.thread_index(), nullptr);
}
BENCHMARK(BM_PluggablePairDevices)->Arg(1 << 20)->Threads(1)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace fragscope

// The simulated devices are set up once, before any benchmark thread runs.
int main(int argc, char** argv) {
  if (fragscope_simulate(fragscope::kDeviceBytes, "", "") != 0) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
