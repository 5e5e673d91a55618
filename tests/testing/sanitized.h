// How much of a randomized property test to run: all of it in a plain build, a sample under
// ThreadSanitizer or AddressSanitizer (scripts/sanitize.sh), where the same checks run about 100x
// slower (LiveLayoutTest's comparison after every operation: 3 s plain, 406 s under TSan on two
// cores) and what the sanitizer adds -- a race, a bad access -- shows on a few jobs as on forty.
// The plain build, which CI runs too, keeps every job and every comparison.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace fragscope::testing {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Seeds 1..count in a plain build; under a sanitizer the first and `kept` (the seeds a test names
// for a case they are known to reach).
inline std::vector<uint64_t> SeedsToRun(uint64_t count, std::initializer_list<uint64_t> kept = {}) {
  std::vector<uint64_t> seeds;
  if (!kSanitized) {
    for (uint64_t seed = 1; seed <= count; ++seed) seeds.push_back(seed);
    return seeds;
  }
  seeds.push_back(1);
  for (uint64_t seed : kept) {
    if (seed != 1 && seed <= count) seeds.push_back(seed);
  }
  return seeds;
}

}  // namespace fragscope::testing
