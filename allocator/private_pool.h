// PrivatePool: a CUDA-graph pool or a torch.cuda.MemPool, PyTorch 2.11's PrivatePool.
//
// A private pool has its own small and large free-block sets: blocks are carved from its own
// segments and reused only by allocations routed to it (allocator/README.md, "Private pools").
// use_count counts its users (captures, MemPool objects, use_mem_pool contexts); when it drops to
// 0 the pool is freeable, and empty_cache (or the OOM retry's full release) frees its unsplit
// cached segments. segment_count counts its live segments; a freeable pool with none left is
// deleted.
#pragma once

#include <cstdint>

#include "allocator/block_pool.h"
#include "allocator/pool_id.h"
#include "allocator/types.h"

namespace fragscope {

struct PrivatePool {
  explicit PrivatePool(PoolId pool_id) : id(pool_id) {}
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;

  BlockPool& Of(PoolKind kind) { return kind == PoolKind::kSmall ? small : large; }
  const BlockPool& Of(PoolKind kind) const { return kind == PoolKind::kSmall ? small : large; }

  PoolId id;
  int use_count = 1;            // PyTorch's use_count: 1 at creation (createOrIncrefPool)
  int segment_count = 0;        // PyTorch's cudaMalloc_count
  uint64_t reserved_bytes = 0;  // the bytes of its live segments
  bool freeable = false;        // use_count reached 0 (graph_pools_freeable)
  bool no_split = false;        // MemPool(no_split=True): blocks are never split
  BlockPool small{PoolKind::kSmall};
  BlockPool large{PoolKind::kLarge};
};

}  // namespace fragscope
