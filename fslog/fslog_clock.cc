// The event-log writer's clocks. See Note [Coarse event timestamps] in fslog_clock.h.
#include "fslog/fslog_clock.h"

#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace fragscope::internal {

TscSample SampleTscAndNs() {
  // The narrowest of a few bracketed readings: a preemption inside one (a VM's vCPU descheduled)
  // would otherwise put the pair up to a time slice apart.
  TscSample best;
  uint64_t best_width = ~uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    const uint64_t t0 = ReadTsc();
    const uint64_t ns = MonotonicNs();
    const uint64_t t1 = ReadTsc();
    if (t1 - t0 < best_width) {
      best_width = t1 - t0;
      best = {t0 + (t1 - t0) / 2, ns};
    }
  }
  return best;
}

bool KernelClockIsTsc() {
#if defined(__x86_64__)
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return static_cast<bool>(in >> name) && name == "tsc";
#else
  return false;
#endif
}

TscMapping MeasureTsc(const TscSample& start, const TscSample& now) {
  TscMapping mapping{.tsc_anchor = now.tsc, .ns_anchor = now.ns};
  if (now.tsc <= start.tsc || now.ns <= start.ns) return mapping;
  const unsigned __int128 ns = static_cast<unsigned __int128>(now.ns - start.ns) << 32;
  mapping.ns_per_tick_q32 = static_cast<uint64_t>(ns / (now.tsc - start.tsc));
  return mapping;
}

TscMapping CalibrateTsc(const TscSample& start) {
  while (MonotonicNs() < start.ns + 1'000'000) {
#if defined(__x86_64__)
    _mm_pause();
#endif
  }
  return MeasureTsc(start, SampleTscAndNs());
}

}  // namespace fragscope::internal
