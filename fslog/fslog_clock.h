// The event-log writer's clocks: a precise one (CLOCK_MONOTONIC through clock_gettime, or the TSC
// mapped onto it) and the coarse one most records take their timestamp from, published by the
// writer's background thread.
//
// Note [Coarse event timestamps]
// Reading a clock is the largest part of recording an event: rdtsc alone costs 6-12 ns on KVM
// guests (AMD EPYC, Intel Xeon), clock_gettime 20-30 ns, against about 5 ns for
// everything else OnEvent does. So while events stream in, most records take their timestamp from
// a PublishedClock instead: the writer's background thread stores CLOCK_MONOTONIC into it every
// time its busy (polling) mode wakes up, every kWriterPollPeriod (20 us) plus wake-up latency, and
// before each chunk it writes; OnEvent loads it (a line that changes every 20 us). The rules, which
// FORMAT.md repeats for readers:
//   - When the background thread is not polling (idle writer, or events arriving slower than a
//     chunk per few milliseconds), the published value is 0 and every record reads the precise
//     clock: nanosecond resolution where events are sparse.
//   - Every kPreciseRecordInterval-th record of a chunk (index % 16 == 0, so also each chunk's
//     first) reads the precise clock even while the thread polls, and compares: a published value
//     more than kMaxPublishedAgeNs old (the thread was descheduled or is in a slow write) makes
//     every record read the precise clock until the thread publishes a new one.
//   - OOM, marker and options-change records always read the precise clock.
//   - The writer stores max(that reading, the previous record's timestamp), so timestamps never
//     decrease in sequence order, and a timestamp is never later than the event (up to the TSC
//     mapping's error, well under a microsecond): records that share a value keep log order.
// Hence a record's timestamp is typically 0-30 us earlier than the event on an idle machine, and
// never earlier than the precise reading of a record at most 15 records before it.
// FslogWriterOptions::coarse_timestamps = false makes every record precise.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "absl/base/attributes.h"

namespace fragscope::internal {

// See Note [Coarse event timestamps]: records with index % kPreciseRecordInterval == 0 in their
// chunk always read the precise clock.
inline constexpr uint32_t kPreciseRecordInterval = 16;

// See Note [Coarse event timestamps]: a precise reading that finds the published time older than
// this stops records from using it until the background thread publishes again.
inline constexpr uint64_t kMaxPublishedAgeNs = 100'000;

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline int64_t WallNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

inline uint64_t ReadTsc() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

// A TSC reading and CLOCK_MONOTONIC taken as close together as possible.
struct TscSample {
  uint64_t tsc = 0;
  uint64_t ns = 0;
};
TscSample SampleTscAndNs();

// Whether the kernel's own CLOCK_MONOTONIC runs on the TSC (synchronized across CPUs, constant
// rate): the only case in which the writer reads the TSC.
bool KernelClockIsTsc();

// CLOCK_MONOTONIC from the TSC: ns = ns_anchor + (tsc - tsc_anchor) * ns_per_tick_q32 / 2^32.
struct TscMapping {
  uint64_t tsc_anchor = 0;
  uint64_t ns_anchor = 0;
  uint64_t ns_per_tick_q32 = 0;  // 32.32 fixed point; 0 = unusable

  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Map(uint64_t tsc) const {
    const auto ticks = static_cast<int64_t>(tsc - tsc_anchor);
    return ns_anchor + static_cast<uint64_t>(static_cast<int64_t>(
                           (static_cast<__int128>(ticks) * ns_per_tick_q32) >> 32));
  }
};

// The rate measured between `start` and `now`, anchored at `now`; ns_per_tick_q32 is 0 when the
// samples are unusable (time did not advance).
TscMapping MeasureTsc(const TscSample& start, const TscSample& now);

// The first mapping: measures the rate over a 1 ms busy wait after `start`.
TscMapping CalibrateTsc(const TscSample& start);

// The background thread's published CLOCK_MONOTONIC (see the Note). On its own cache line: the
// writer thread stores to it every tick, the producer loads it on every event.
class PublishedClock {
 public:
  // Writer thread: publishes the current time.
  void Tick() { ns_.store(MonotonicNs(), std::memory_order_relaxed); }
  // Writer thread: from now on producers read the precise clock.
  void Stop() { ns_.store(0, std::memory_order_relaxed); }
  // Producer: the last published time (never later than now), or 0 when not ticking.
  uint64_t Load() const { return ns_.load(std::memory_order_relaxed); }

 private:
  alignas(64) std::atomic<uint64_t> ns_{0};  // (alignas also rounds the size up to 64)
};

}  // namespace fragscope::internal
