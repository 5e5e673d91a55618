// ReleasableBlocks: the free blocks of a pool that a release returns to the device, in the pool's
// order, so that a release visits only them.
//
// A release (empty_cache, the out-of-memory retry ladder, garbage collection) returns the free
// blocks that are whole segments and unmaps the free blocks of expandable segments: PyTorch's
// release_blocks walks the whole pool for them. A trace with many out-of-memory records (each
// runs the ladder) or many empty_cache calls, over many segments that each keep a free split
// remainder, made that walk quadratic in a replay. This index holds exactly the releasable
// blocks, in (stream, size, address) order, the order in which the pool's ForEach would meet
// them, so a release through it makes the same decisions in the same order.
//
// Kept only once enabled (BlockPool enables it after a walk that found few releasable blocks
// among many): a job whose pools stay small, or that never releases, pays one predictable branch
// per pool operation. Releasable is a function of the block alone (expandable, or no neighbour),
// and a free block's neighbours change only while the pool re-keys or removes it, so updating at
// BlockPool's Insert, Erase and Rekey keeps the index exact (BlockPool::IndexesAgree checks it).
#pragma once

#include <cstdint>
#include <tuple>

#include "absl/container/btree_set.h"
#include "allocator/block.h"
#include "allocator/types.h"

namespace fragscope {

class ReleasableBlocks {
 public:
  // Whether a release returns `block` (a free block in a pool): a whole segment, or a block of an
  // expandable segment (whose pages are unmapped).
  static bool Releasable(const Block& block) { return block.IsExpandable() || !block.IsSplit(); }

  bool enabled() const { return enabled_; }
  // Starts with the releasable blocks among those `for_each` visits; REQUIRES: !enabled().
  template <typename ForEach>
  void Enable(ForEach for_each) {
    enabled_ = true;
    for_each([this](Block* b) { Add(b); });
  }

  // A block entered the pool, or took a new key in it. REQUIRES: enabled().
  void Add(Block* block) {
    if (Releasable(*block)) set_.insert(Entry{block->stream, block->size, block->ptr, block});
  }
  // The block keyed (stream, size, ptr) left the pool or is about to be re-keyed (absent if it
  // was not releasable). REQUIRES: enabled().
  void Remove(StreamId stream, uint64_t size, DevicePtr ptr) {
    set_.erase(Entry{stream, size, ptr, nullptr});
  }

  // Calls visit(block) for every releasable block, in (stream, size, address) order; returns the
  // number visited. REQUIRES: visit does not change the pool.
  template <typename Visit>
  uint64_t ForEach(Visit visit) const {
    for (const Entry& e : set_) visit(e.block);
    return set_.size();
  }
  size_t size() const { return set_.size(); }

 private:
  struct Entry {
    StreamId stream;
    uint64_t size;
    DevicePtr ptr;
    Block* block;
    bool operator<(const Entry& o) const {
      return std::tie(stream, size, ptr) < std::tie(o.stream, o.size, o.ptr);
    }
  };
  absl::btree_set<Entry> set_;
  bool enabled_ = false;
};

}  // namespace fragscope
