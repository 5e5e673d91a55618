// The workloads of gpu_allocator_comparison and how they are timed: plain std::chrono, no
// Google Benchmark (the GPU machines have no build toolchain; see bench/README.md).
//
// Timing: a batch of operations is timed as a whole with steady_clock (wall time: allocators
// that wait for the device are charged for the wait). For the warm pair the batch size is
// calibrated so one batch takes at least min_seconds, then `repetitions` batches are timed; the
// random workload is one fixed sequence, run once untimed (caches warm), then timed
// `random_repetitions` times. Reported: the median and the minimum over the batches, in ns per
// operation (warm pair: per malloc+free pair).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/gpu_allocator.h"

namespace fragscope::bench {

struct TimingOptions {
  double min_seconds = 0.1;
  int repetitions = 5;
  int random_repetitions = 3;
  int64_t max_batch = int64_t{1} << 24;
};

struct Timing {
  double median_ns = 0;   // per operation
  double min_ns = 0;      // per operation
  int64_t batch_ops = 0;  // operations per timed batch
  int batches = 0;        // timed batches
  std::string error;      // the allocator failed: no figures
};

// Warm pair: Allocate(bytes) then Free, repeated; after the first pair every caching allocator
// serves it from its cache. ns per pair.
Timing TimeWarmPair(GpuAllocator& allocator, uint64_t bytes, const TimingOptions& options);

// The random workload (RMM's random_allocations, shaped like training): `steps` steps, each
// allocating with probability 73 % while fewer than max_live blocks are live and the live bytes
// stay within cap_bytes, else freeing a live block chosen at random; then everything still live
// is freed. Sizes: 85 % log-uniform in [512 B, 1 MiB), 15 % log-uniform in [1 MiB, 64 MiB].
struct RandomWorkloadSpec {
  uint64_t seed = 42;
  int64_t steps = 20000;
  int64_t max_live = 4096;
  uint64_t cap_bytes = uint64_t{8} << 30;
};

// One operation: allocate `bytes` into `slot`, or free `slot` when bytes == 0.
struct RandomOp {
  uint32_t slot = 0;
  uint64_t bytes = 0;
};

struct RandomWorkload {
  RandomWorkloadSpec spec;
  std::vector<RandomOp> ops;  // every allocation is freed by a later op
  uint32_t slots = 0;
  int64_t allocations = 0;
  int64_t peak_live = 0;
  uint64_t peak_live_bytes = 0;
};

// Deterministic for a given spec.
RandomWorkload MakeRandomWorkload(const RandomWorkloadSpec& spec);

// ns per operation (allocations and frees alike).
Timing TimeRandomWorkload(GpuAllocator& allocator, const RandomWorkload& workload,
                          const TimingOptions& options);

}  // namespace fragscope::bench
