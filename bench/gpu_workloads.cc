#include "bench/gpu_workloads.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace fragscope::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start, Clock::time_point stop) {
  return std::chrono::duration<double>(stop - start).count();
}

void Summarize(std::vector<double> ns_per_op, int64_t batch_ops, Timing* timing) {
  std::sort(ns_per_op.begin(), ns_per_op.end());
  timing->batch_ops = batch_ops;
  timing->batches = static_cast<int>(ns_per_op.size());
  timing->min_ns = ns_per_op.front();
  const size_t n = ns_per_op.size();
  timing->median_ns = n % 2 == 1 ? ns_per_op[n / 2] : (ns_per_op[n / 2 - 1] + ns_per_op[n / 2]) / 2;
}

// Runs `pairs` warm pairs; returns the seconds taken, or a negative value on failure.
double WarmPairBatch(GpuAllocator& allocator, uint64_t bytes, int64_t pairs) {
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < pairs; ++i) {
    void* ptr = allocator.Allocate(bytes);
    if (ptr == nullptr) return -1;
    allocator.Free(ptr);
  }
  const Clock::time_point stop = Clock::now();
  return allocator.error().empty() ? Seconds(start, stop) : -1;
}

// Runs every op once; on failure frees what is live and returns a negative value.
double RandomPass(GpuAllocator& allocator, const RandomWorkload& workload,
                  std::vector<void*>& slots) {
  const Clock::time_point start = Clock::now();
  for (const RandomOp& op : workload.ops) {
    if (op.bytes != 0) {
      void* ptr = allocator.Allocate(op.bytes);
      if (ptr == nullptr) {
        for (void*& live : slots) {
          if (live != nullptr) allocator.Free(live);
          live = nullptr;
        }
        return -1;
      }
      slots[op.slot] = ptr;
    } else {
      allocator.Free(slots[op.slot]);
      slots[op.slot] = nullptr;
    }
  }
  const Clock::time_point stop = Clock::now();
  return allocator.error().empty() ? Seconds(start, stop) : -1;
}

}  // namespace

Timing TimeWarmPair(GpuAllocator& allocator, uint64_t bytes, const TimingOptions& options) {
  Timing timing;
  allocator.ClearError();
  // Calibrate: grow the batch until it takes min_seconds (the first batch also warms the cache).
  int64_t pairs = 1;
  for (;;) {
    const double seconds = WarmPairBatch(allocator, bytes, pairs);
    if (seconds < 0) {
      timing.error = allocator.error();
      return timing;
    }
    if (seconds >= options.min_seconds || pairs >= options.max_batch) break;
    const double grow = seconds > 0 ? 1.4 * options.min_seconds / seconds : 10.0;
    pairs = std::min(options.max_batch,
                     std::max(pairs * 2, static_cast<int64_t>(static_cast<double>(pairs) *
                                                              std::min(grow, 100.0))));
  }
  std::vector<double> ns_per_pair;
  for (int r = 0; r < options.repetitions; ++r) {
    const double seconds = WarmPairBatch(allocator, bytes, pairs);
    if (seconds < 0) {
      timing.error = allocator.error();
      return timing;
    }
    ns_per_pair.push_back(seconds * 1e9 / static_cast<double>(pairs));
  }
  Summarize(std::move(ns_per_pair), pairs, &timing);
  return timing;
}

RandomWorkload MakeRandomWorkload(const RandomWorkloadSpec& spec) {
  RandomWorkload workload;
  workload.spec = spec;
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double log_512 = std::log(512.0);
  const double log_1m = std::log(double{1 << 20});
  const double log_64m = std::log(double{64 << 20});
  auto draw_size = [&] {
    const bool small = unit(rng) < 0.85;
    const double lo = small ? log_512 : log_1m;
    const double hi = small ? log_1m : log_64m;
    return static_cast<uint64_t>(std::exp(lo + (hi - lo) * unit(rng)));
  };
  struct Live {
    uint32_t slot;
    uint64_t bytes;
  };
  std::vector<Live> live;
  std::vector<uint32_t> free_slots;
  uint64_t live_bytes = 0;
  auto free_at = [&](size_t i) {
    workload.ops.push_back({live[i].slot, 0});
    free_slots.push_back(live[i].slot);
    live_bytes -= live[i].bytes;
    live[i] = live.back();
    live.pop_back();
  };
  for (int64_t step = 0; step < spec.steps; ++step) {
    const uint64_t bytes = draw_size();
    const bool want_alloc =
        live.empty() || (unit(rng) < 0.73 && static_cast<int64_t>(live.size()) < spec.max_live);
    if (want_alloc && live_bytes + bytes <= spec.cap_bytes) {
      uint32_t slot = workload.slots;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        ++workload.slots;
      }
      workload.ops.push_back({slot, bytes});
      live.push_back({slot, bytes});
      live_bytes += bytes;
      ++workload.allocations;
      workload.peak_live = std::max(workload.peak_live, static_cast<int64_t>(live.size()));
      workload.peak_live_bytes = std::max(workload.peak_live_bytes, live_bytes);
    } else if (!live.empty()) {
      free_at(static_cast<size_t>(rng() % live.size()));
    }
  }
  while (!live.empty()) free_at(static_cast<size_t>(rng() % live.size()));
  return workload;
}

Timing TimeRandomWorkload(GpuAllocator& allocator, const RandomWorkload& workload,
                          const TimingOptions& options) {
  Timing timing;
  allocator.ClearError();
  std::vector<void*> slots(workload.slots, nullptr);
  std::vector<double> ns_per_op;
  const auto ops = static_cast<double>(workload.ops.size());
  for (int r = -1; r < options.random_repetitions; ++r) {  // r = -1: untimed warm-up pass
    const double seconds = RandomPass(allocator, workload, slots);
    if (seconds < 0) {
      timing.error = allocator.error();
      return timing;
    }
    if (r >= 0) ns_per_op.push_back(seconds * 1e9 / ops);
  }
  Summarize(std::move(ns_per_op), static_cast<int64_t>(workload.ops.size()), &timing);
  return timing;
}

}  // namespace fragscope::bench
