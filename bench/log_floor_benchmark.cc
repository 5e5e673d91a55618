// The floor under BM_WarmPairLogged (allocator_benchmark.cc): what any log that hands its records
// to another thread costs a warm malloc+free pair, with no record encoding, no observer call, no
// clock and no I/O at all.
//
//   BM_WarmPairPlusStores/B  the warm 1 MiB pair, then B bytes of 16-byte stores per pair into
//                            the current 64 KiB chunk of a ring of 8 (the .fslog writer's
//                            buffers), with a write prefetch 4 KiB ahead. A consumer thread wakes
//                            every 20 us (the writer's poll period) and reads each full chunk
//                            (the writer's CRC and copy), then recycles it. B = 0 is the pair
//                            with the consumer thread running beside it.
//
// The event log's target is <= 10 % over BM_WarmPair for the logged pair. A pair logs two records
// (alloc, and the combined free: 160 bytes); 16 bytes per pair is less than a record could hold
// (an address and a size for each of the two events would be 32). Results: bench/RESULTS.md,
// "Event log: the floor under a logged pair".
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "benchmark/benchmark.h"

namespace fragscope {
namespace {

constexpr size_t kChunkBytes = 64 * 1024;
constexpr int kChunks = 8;
constexpr size_t kPrefetchAheadBytes = 4096;

// Chunks the producer fills and a consumer thread drains, as the writer's ring does.
class ChunkRing {
 public:
  ChunkRing() : memory_(new uint64_t[kChunks * kChunkBytes / 8]()) {
    consumer_ = std::thread([this] { Drain(); });
  }
  ~ChunkRing() {
    stop_.store(true, std::memory_order_relaxed);
    consumer_.join();
  }

  // Appends `bytes` (a multiple of 16) of stores; waits for the consumer when every chunk is full.
  void Append(size_t bytes, uint64_t value) {
    if (offset_ + bytes > kChunkBytes) {
      full_[current_].store(true, std::memory_order_release);
      current_ = (current_ + 1) % kChunks;
      offset_ = 0;
      while (full_[current_].load(std::memory_order_acquire)) std::this_thread::yield();
    }
    char* at = Chunk(current_) + offset_;
    __builtin_prefetch(at + kPrefetchAheadBytes, 1);
#if defined(__x86_64__)
    for (size_t b = 0; b < bytes; b += 16) {
      _mm_store_si128(reinterpret_cast<__m128i*>(at + b),
                      _mm_set1_epi64x(static_cast<int64_t>(value)));
    }
#else
    for (size_t b = 0; b < bytes; b += 8) std::memcpy(at + b, &value, 8);
#endif
    offset_ += bytes;
  }

 private:
  char* Chunk(int i) {
    return reinterpret_cast<char*>(memory_.get()) + static_cast<size_t>(i) * kChunkBytes;
  }
  void Drain() {
    int next = 0;
    uint64_t sum = 0;
    while (!stop_.load(std::memory_order_relaxed)) {
      while (full_[next].load(std::memory_order_acquire)) {
        const auto* words = reinterpret_cast<const uint64_t*>(Chunk(next));
        for (size_t i = 0; i < kChunkBytes / 8; ++i) sum += words[i];
        full_[next].store(false, std::memory_order_release);
        next = (next + 1) % kChunks;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    benchmark::DoNotOptimize(sum);
  }

  std::unique_ptr<uint64_t[]> memory_;
  std::atomic<bool> full_[kChunks] = {};
  std::atomic<bool> stop_{false};
  int current_ = 0;
  size_t offset_ = 0;
  std::thread consumer_;
};

void BM_WarmPairPlusStores(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  SimulatedBackend backend(80 * kGiB);
  CachingAllocator allocator(backend, AllocatorOptions{});
  (void)allocator.Free(*allocator.Allocate(kMiB, 0));  // warm the cache
  ChunkRing ring;
  uint64_t n = 0;
  for (auto _ : state) {
    absl::StatusOr<DevicePtr> p = allocator.Allocate(kMiB, 0);
    benchmark::DoNotOptimize(p);
    (void)allocator.Free(*p);
    if (bytes > 0) ring.Append(bytes, ++n);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_WarmPairPlusStores)->Arg(0)->Arg(16)->Arg(32)->Arg(80)->Arg(160);

}  // namespace
}  // namespace fragscope

BENCHMARK_MAIN();
