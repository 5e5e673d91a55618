#include "allocator/memory_fraction.h"

#include <algorithm>
#include <cmath>

namespace fragscope {

uint64_t AllowedBytesForFraction(double fraction, uint64_t total) {
  return static_cast<uint64_t>(fraction * static_cast<double>(total));
}

double FractionForAllowedBytes(uint64_t allowed, uint64_t total) {
  const double below_one = std::nextafter(1.0, 0.0);
  if (allowed >= total) return below_one;
  const double t = static_cast<double>(total);
  const double plain = static_cast<double>(allowed) / t;
  if (AllowedBytesForFraction(plain, total) == allowed) return plain;
  return std::min((static_cast<double>(allowed) + 0.5) / t, below_one);
}

uint64_t AllowedBytesOfReportedFraction(double reported, uint64_t total) {
  return static_cast<uint64_t>(std::llround(reported * static_cast<double>(total)));
}

}  // namespace fragscope
