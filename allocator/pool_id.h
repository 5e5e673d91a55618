// PoolId: which memory pool a block belongs to, PyTorch's MempoolId_t (a pair of counters).
//
// (0, 0) is the default pool (the allocator's own small and large pools). PyTorch hands out
// (n, 0) for CUDA-graph pools (graph_pool_handle, a capture without one) and (0, n) for
// torch.cuda.MemPool objects; any other non-zero pair names a private pool too.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace fragscope {

struct PoolId {
  uint64_t first = 0;
  uint64_t second = 0;

  bool is_default() const { return first == 0 && second == 0; }
  // A pool made by a CUDA-graph capture (PyTorch's graph pool handles), as opposed to a MemPool.
  bool is_graph_pool() const { return first != 0; }
  friend bool operator==(const PoolId&, const PoolId&) = default;
  friend auto operator<=>(const PoolId&, const PoolId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const PoolId& id) {
    return H::combine(std::move(h), id.first, id.second);
  }
};

inline constexpr PoolId kDefaultPoolId{};

// "(first, second)", as Python prints the tuple.
inline std::string FormatPoolId(PoolId id) {
  return absl::StrFormat("(%d, %d)", id.first, id.second);
}

// The .fslog's one-word encoding (fslog/FORMAT.md, 2.4): first in the high 32 bits, second
// in the low 32; 0 is the default pool. PyTorch's counters stay far below 2^32.
inline uint64_t PackPoolId(PoolId id) { return (id.first << 32) | (id.second & 0xffffffffu); }
inline PoolId UnpackPoolId(uint64_t word) { return PoolId{word >> 32, word & 0xffffffffu}; }
inline bool PoolIdPacks(PoolId id) { return id.first <= 0xffffffffu && id.second <= 0xffffffffu; }

}  // namespace fragscope
