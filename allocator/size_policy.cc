// Size policy: the out-of-line part (the rest is inline in size_policy.h: it runs on every
// allocation).
#include "allocator/size_policy.h"

#include <bit>

#include "allocator/check.h"

namespace fragscope {

uint64_t RoundupPower2NextDivision(uint64_t size, uint64_t divisions) {
  FRAGSCOPE_DCHECK(size > 0 && divisions > 0);
  if (std::has_single_bit(size)) return size;
  const uint64_t floor = std::bit_floor(size);
  const uint64_t step = floor / divisions;
  if (step == 0) return 2 * floor;
  // Round up to a multiple of step (PyTorch rounds with a mask; step is a power of two here
  // whenever divisions is, which the option parser guarantees).
  return (size + step - 1) / step * step;
}

}  // namespace fragscope
