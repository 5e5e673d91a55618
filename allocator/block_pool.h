// BlockPool: the free blocks of one pool (small or large), ordered for best fit.
//
// Order: (stream, size, address). Each stream's free blocks live in a set of their own, ordered
// by (size, address), so LowerBound(stream, size) finds the smallest free block on the stream
// that is large enough, and among equal sizes the lowest address: PyTorch's BlockComparatorSize,
// whose first key is the stream. (PyTorch's development branch after 2.11 has a per-segment
// registration_counter in the key; traces recorded from PyTorch 2.11 on an H200 show ties broken by
// address, and replaying them matches only with this order: see
// tests/allocator/pytorch_oracle_test.cc.) Blocks never cross streams: a lookup sees only its
// stream's blocks. ForEach visits every block in the whole order, streams in increasing order, as
// PyTorch's loops over a pool do.
//
// Unmapped blocks of expandable segments are kept apart, in (stream, address) order
// (PyTorch's BlockPool::unmapped): they are never handed out, only mapped.
//
// For first-fit placement the pool also keeps the same blocks in address order (stream, ptr);
// that index exists only while enabled (set_address_index), so best fit pays one branch for it.
// Likewise the releasable blocks (releasable_blocks.h), once a release has walked many blocks to
// find few. The pool keeps the sum of its free bytes, and counts the blocks its walks visit.
//
// The size orders hold (size, ptr, block) entries (PoolEntry), so lookups never touch Block
// objects; the other sets hold pointers. The pool never splits, merges or frees blocks (see
// block.h). Invariants: every block in the sets is free (not allocated, no pending events) and
// sits in its stream's set; an entry's key equals its block's (size, ptr), so a block's key
// fields change in the set only through Rekey.
//
// A sentinel entry with the largest possible key always sits at the end of each stream's set,
// so a btree never empties: a warm malloc+free that takes a pool's only block and puts a
// remainder back would otherwise free and reallocate the root node every time. An iterator at
// the sentinel is at_end(); callers never see its block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <tuple>
#include <vector>

#include "absl/container/btree_set.h"
#include "allocator/block.h"
#include "allocator/releasable_blocks.h"
#include "allocator/types.h"

namespace fragscope {

// An entry of a stream's size order: the block's key, copied in, and the block. Comparisons read
// the copy, so a lookup in a pool of many blocks touches btree nodes only, never the scattered
// Block objects (a cache miss per comparison otherwise). 24 bytes: the stream is the set's.
struct PoolEntry {
  uint64_t size;
  DevicePtr ptr;
  Block* block;  // nullptr for the sentinel

  static PoolEntry Of(Block* b) { return {b->size, b->ptr, b}; }
  static constexpr PoolEntry Sentinel() { return {~uint64_t{0}, ~DevicePtr{0}, nullptr}; }
  bool IsSentinel() const { return block == nullptr; }
};

// Note [Branch-light best-fit search]
// A best-fit lookup, insert or erase in a pool of many free blocks mispredicts at every step of a
// binary search within each btree node: the keys are random, so each "go left or right" branch is
// a coin toss (~15 cycles lost each, about two per level). Three changes cut that by a third or
// more: nodes are searched linearly (one mispredicted loop exit per level; the extra comparisons
// are predicted); (size, ptr) is compared as one 128-bit number (cmp/sbb, no branch) instead of a
// tuple's chain of branches; and the stream is not in the key at all (one set per stream), which
// also makes an entry 24 bytes instead of 32, so a 512-byte node holds 20 instead of 15.
// Measured with cachegrind's branch simulator (bench/cachegrind_counts.sh): mispredicted branches
// per operation of BM_RandomAllocations' mix 25 -> 15 at 1k live blocks and 29 -> 16 at 38k; per
// event of the one-core replay of a training-like log 4.25 -> 3.5.
struct BlockOrder {
  using is_transparent = void;
  using absl_btree_prefer_linear_node_search = std::true_type;
  // A search key: the smallest possible key of a size.
  struct MinKey {
    uint64_t size;
  };
  static unsigned __int128 Wide(const PoolEntry& e) {
    return (static_cast<unsigned __int128>(e.size) << 64) | e.ptr;
  }
  bool operator()(const PoolEntry& a, const PoolEntry& b) const { return Wide(a) < Wide(b); }
  bool operator()(const PoolEntry& a, MinKey k) const { return a.size < k.size; }
  bool operator()(MinKey k, const PoolEntry& b) const { return k.size <= b.size; }
};

// (stream, address): first-fit order.
struct BlockAddressOrder {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->ptr) < std::tie(b->stream, b->ptr);
  }
};

class BlockPool {
  // absl::btree_set's own container with 512-byte nodes instead of its default 256: one level
  // fewer on the path of every best-fit search, insert and erase, the cache misses of a pool of
  // many blocks (BM_RandomAllocations, interleaved, quiet VM: 1k live 269 -> 255 ns per op, 38k
  // live 494-514 -> 457-483 ns; warm pair 88-93 -> 81 ns). absl::btree_set fixes the node size,
  // so this names the container it is built from (absl/container/btree_set.h).
  using SetParams =
      absl::container_internal::set_params<PoolEntry, BlockOrder, std::allocator<PoolEntry>,
                                           /*TargetNodeSize=*/512, /*IsMulti=*/false>;
  using Set =
      absl::container_internal::btree_set_container<absl::container_internal::btree<SetParams>>;
  static_assert(absl::container_internal::btree_node<SetParams>::use_linear_search::value,
                "BlockOrder asks for linear node search: Note [Branch-light best-fit search]");

 public:
  // A position in one stream's size order; dereferences to the Block. key() reads the entry's
  // copy of the block's key without touching the block. A default-constructed iterator is
  // at_end() (and at_begin()): the position of a stream with no free blocks.
  class iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Block*;
    using difference_type = std::ptrdiff_t;
    using pointer = Block* const*;
    using reference = Block*;

    iterator() = default;
    // Past the stream's largest block.
    bool at_end() const { return set_ == nullptr || it_->IsSentinel(); }
    // At the stream's smallest block (or at_end() with no block before it).
    bool at_begin() const { return set_ == nullptr || it_ == set_->begin(); }
    // REQUIRES: !at_end().
    Block* operator*() const { return it_->block; }
    const PoolEntry& key() const { return *it_; }
    // REQUIRES: !at_end() for ++, !at_begin() for --.
    iterator& operator++() {
      ++it_;
      return *this;
    }
    iterator& operator--() {
      --it_;
      return *this;
    }

   private:
    friend class BlockPool;
    iterator(const Set* set, Set::const_iterator it) : set_(set), it_(it) {}
    const Set* set_ = nullptr;
    Set::const_iterator it_;
  };

  explicit BlockPool(PoolKind kind) : kind_(kind) {
    // Most jobs allocate on one stream: start with the default stream's set in the cache.
    cached_set_ = &NewStreamSet(0);
  }
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  PoolKind kind() const { return kind_; }

  // The best-fit position for (stream, size): the stream's first block of at least `size` bytes,
  // or at_end().
  iterator LowerBound(StreamId stream, uint64_t size) const {
    const Set* set = FindSet(stream);
    if (set == nullptr) return iterator();
    return iterator(set, set->lower_bound(BlockOrder::MinKey{size}));
  }

  // Calls visit(block) for every free block, in (stream, size, address) order.
  // REQUIRES: visit does not change the pool.
  template <typename Visit>
  void ForEach(Visit visit) const {
    walked_ += size_;
    for (const auto& [stream, set] : streams_) {
      for (const PoolEntry& entry : set) {
        if (!entry.IsSentinel()) visit(entry.block);
      }
    }
  }

  // Calls visit(block) for every free block a release returns (ReleasableBlocks::Releasable), in
  // ForEach's order. Walks the whole pool until a walk of at least kReleasableIndexMinBlocks
  // finds fewer than half of them releasable; from then on visits only the releasable ones.
  // REQUIRES: visit does not change the pool.
  template <typename Visit>
  void ForEachReleasable(Visit visit) {
    if (releasable_.enabled()) {
      walked_ += releasable_.ForEach(visit);
      return;
    }
    size_t releasable = 0;
    ForEach([&](Block* b) {
      if (!ReleasableBlocks::Releasable(*b)) return;
      ++releasable;
      visit(b);
    });
    if (size_ >= kReleasableIndexMinBlocks && 2 * releasable < size_) {
      releasable_.Enable([this](auto add) { this->ForEach(add); });
    }
  }
  static constexpr size_t kReleasableIndexMinBlocks = 1024;

  // The bytes of the free blocks on `stream` of at least `min_size` bytes; visits only those.
  uint64_t BytesFrom(StreamId stream, uint64_t min_size) const {
    uint64_t bytes = 0;
    for (iterator it = LowerBound(stream, min_size); !it.at_end(); ++it) {
      bytes += it.key().size;
      ++walked_;
    }
    return bytes;
  }
  // The largest free block's size (0 if none). O(streams): each stream's set ends with it.
  uint64_t LargestSize() const {
    uint64_t largest = 0;
    for (const auto& [stream, set] : streams_) {
      auto last = std::prev(set.end());  // the sentinel
      if (last != set.begin()) largest = std::max(largest, std::prev(last)->size);
    }
    return largest;
  }
  // The sum of the free blocks' sizes.
  uint64_t free_bytes() const { return free_bytes_; }
  // Blocks visited by ForEach, ForEachReleasable and BytesFrom so far: for tests that count work.
  uint64_t blocks_walked() const { return walked_; }

  // The lowest-address free block on `stream` for which accept(block) is true, or nullptr.
  // REQUIRES: the address index is enabled. O(free blocks on the stream) in the worst case.
  template <typename Accept>
  Block* FirstFit(StreamId stream, Accept accept) const {
    FRAGSCOPE_DCHECK(address_index_enabled_);
    return ScanStream(by_address_, stream, [&](Block* b) { return accept(b) ? b : nullptr; });
  }

  // The unmapped blocks of expandable segments on `stream`, lowest address first.
  template <typename Visit>
  Block* FindUnmapped(StreamId stream, Visit visit) const {
    return ScanStream(unmapped_, stream, visit);
  }
  // REQUIRES: block is unmapped (and, for Insert, not in the set; for Erase, in it).
  void InsertUnmapped(Block* block) {
    const bool inserted = unmapped_.insert(block).second;
    FRAGSCOPE_DCHECK(inserted);
    (void)inserted;
  }
  void EraseUnmapped(Block* block) {
    const size_t erased = unmapped_.erase(block);
    FRAGSCOPE_DCHECK(erased == 1);
    (void)erased;
  }
  bool ContainsUnmapped(Block* block) const { return unmapped_.contains(block); }
  size_t unmapped_count() const { return unmapped_.size(); }

  // Builds (or drops) the address-ordered index of the blocks in the pool.
  void set_address_index(bool enabled) {
    if (enabled == address_index_enabled_) return;
    address_index_enabled_ = enabled;
    by_address_.clear();
    if (enabled) ForEach([this](Block* b) { by_address_.insert(b); });
  }

  // REQUIRES: block is free and not in the pool. Stamps the GC clock into the block.
  void Insert(Block* block) {
    block->set_gc_count_base(gc_clock_);
    const bool inserted = SetFor(block->stream).insert(PoolEntry::Of(block)).second;
    FRAGSCOPE_DCHECK(inserted);
    (void)inserted;
    ++size_;
    free_bytes_ += block->size;
    if (address_index_enabled_) by_address_.insert(block);
    if (releasable_.enabled()) [[unlikely]]
      releasable_.Add(block);
  }
  // REQUIRES: block is in the pool.
  void Erase(Block* block) {
    const size_t erased = SetFor(block->stream).erase(PoolEntry::Of(block));
    FRAGSCOPE_DCHECK(erased == 1);
    (void)erased;
    --size_;
    free_bytes_ -= block->size;
    if (address_index_enabled_) by_address_.erase(block);
    if (releasable_.enabled()) [[unlikely]]
      releasable_.Remove(block->stream, block->size, block->ptr);
  }
  // REQUIRES: !it.at_end().
  void Erase(iterator it) {
    if (address_index_enabled_) by_address_.erase(*it);
    if (releasable_.enabled()) [[unlikely]]
      releasable_.Remove((*it)->stream, it.key().size, it.key().ptr);
    free_bytes_ -= it.key().size;
    MutableSet(it).erase(it.it_);
    --size_;
  }
  // REQUIRES: block is in the pool.
  iterator Find(Block* block) const {
    const Set* set = FindSet(block->stream);
    FRAGSCOPE_DCHECK(set != nullptr);
    auto it = set->find(PoolEntry::Of(block));
    FRAGSCOPE_DCHECK(it != set->end() && it->block == block);
    return iterator(set, it);
  }

  // Changes the key of the block at `it` to (new_ptr, new_size) by running `change` (the block
  // surgery: a split or a merge), keeping the set ordered. When the new key still sorts between
  // the block's neighbours, the block stays where it is: no btree erase and insert, which were
  // a third of a warm malloc+free pair (a split's remainder and a merge's survivor usually stay
  // put). Stamps the GC clock, as Insert does.
  // REQUIRES: change() leaves the block with exactly (new_ptr, new_size) and does not touch this
  // pool's sets; the stream stays the same.
  //
  // Moving, the entry is re-inserted from the new key before change() runs: the btree's search
  // for its new place does not wait for the block's cache miss, which change() takes.
  template <typename Change>
  void Rekey(iterator it, DevicePtr new_ptr, uint64_t new_size, Change change) {
    Block* block = *it;
    // The address index compares the blocks' own fields, and whether a block is releasable
    // depends on its neighbours, which change() changes: out and back in.
    if (address_index_enabled_ || releasable_.enabled()) [[unlikely]] {
      Erase(it);
      change();
      Insert(block);
      FRAGSCOPE_DCHECK(block->ptr == new_ptr && block->size == new_size);
      return;
    }
    free_bytes_ += new_size - it.key().size;  // modulo 2^64: a shrinking block subtracts
    if (KeyFitsAt(it, new_ptr, new_size)) {
      // The entry's key is a copy; the btree never compares it while we rewrite it, and the
      // new key sorts where the old one did.
      auto& entry = const_cast<PoolEntry&>(*it.it_);
      entry.ptr = new_ptr;
      entry.size = new_size;
      block->set_gc_count_base(gc_clock_);
      change();
    } else {
      Set& set = MutableSet(it);  // the block's stream's: the stream does not change
      set.erase(it.it_);
      const bool inserted = set.insert(PoolEntry{new_size, new_ptr, block}).second;
      FRAGSCOPE_DCHECK(inserted);
      (void)inserted;
      block->set_gc_count_base(gc_clock_);
      change();
    }
    FRAGSCOPE_DCHECK(block->ptr == new_ptr && block->size == new_size);
  }

  bool Contains(Block* block) const {
    const Set* set = FindSet(block->stream);
    if (set == nullptr) return false;
    auto it = set->find(PoolEntry::Of(block));
    return it != set->end() && it->block == block &&
           (!address_index_enabled_ || by_address_.contains(block));
  }
  // False if the address index (when enabled) holds other blocks than the size order, or the
  // releasable index (when enabled) other blocks than the releasable ones. O(blocks) with the
  // releasable index: for the invariant checker.
  bool IndexesAgree() const {
    if (address_index_enabled_ && by_address_.size() != size()) return false;
    if (!releasable_.enabled()) return true;
    std::vector<const Block*> expected, indexed;
    for (const auto& [stream, set] : streams_) {
      for (const PoolEntry& entry : set) {
        if (!entry.IsSentinel() && ReleasableBlocks::Releasable(*entry.block)) {
          expected.push_back(entry.block);
        }
      }
    }
    (void)releasable_.ForEach([&indexed](const Block* b) { indexed.push_back(b); });
    return expected == indexed;
  }
  // False if an entry's key copy differs from its block's key (a key changed in the set without
  // Rekey), a block sits in another stream's set, the keys are not strictly increasing, a set's
  // last entry is not its sentinel, or free_bytes() is not their sum. O(blocks): for the
  // invariant checker.
  bool IsOrdered() const {
    size_t count = 0;
    uint64_t bytes = 0;
    for (const auto& [stream, set] : streams_) {
      for (auto it = set.begin(); it != set.end(); ++it) {
        const bool last = std::next(it) == set.end();
        if (it->IsSentinel() != last) return false;
        if (last) break;
        const PoolEntry actual = PoolEntry::Of(it->block);
        if (it->size != actual.size || it->ptr != actual.ptr || it->block->stream != stream) {
          return false;
        }
        if (!BlockOrder()(*it, *std::next(it))) return false;
        ++count;
        bytes += it->size;
      }
    }
    return count == size_ && bytes == free_bytes_;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The garbage-collection clock: the number of lookups in this pool while GC is enabled
  // (PyTorch's get_free_blocks_call_count). A free block's age is clock - gc_count_base.
  uint64_t gc_clock() const { return gc_clock_; }
  void TickGcClock() { ++gc_clock_; }

 private:
  using AddressSet = absl::btree_set<Block*, BlockAddressOrder>;

  // The set of `stream`'s blocks, or nullptr if the stream never had one. The last set used is
  // cached: one comparison on the hot path.
  const Set* FindSet(StreamId stream) const {
    if (stream == cached_stream_) [[likely]]
      return cached_set_;
    auto it = streams_.find(stream);
    if (it == streams_.end()) return nullptr;
    cached_stream_ = stream;
    cached_set_ = const_cast<Set*>(&it->second);  // the pool owns its sets
    return cached_set_;
  }
  // The set of `stream`'s blocks, created (empty but for its sentinel) if needed.
  Set& SetFor(StreamId stream) {
    if (FindSet(stream) != nullptr) [[likely]]
      return *cached_set_;
    cached_stream_ = stream;
    cached_set_ = &NewStreamSet(stream);
    return *cached_set_;
  }
  Set& NewStreamSet(StreamId stream) {
    Set& set = streams_[stream];
    set.insert(PoolEntry::Sentinel());
    return set;
  }
  static Set& MutableSet(iterator it) { return const_cast<Set&>(*it.set_); }

  // Whether (size, ptr) sorts strictly between the neighbours of `it` in its stream's set.
  static bool KeyFitsAt(iterator it, DevicePtr ptr, uint64_t size) {
    const PoolEntry key{size, ptr, nullptr};
    if (!it.at_begin() && !BlockOrder()(*std::prev(it.it_), key)) return false;
    return BlockOrder()(key, *std::next(it.it_));  // the sentinel follows every real block
  }

  // Visits the blocks of `stream` in `set`, lowest address first, until visit returns a block.
  template <typename Visit>
  static Block* ScanStream(const AddressSet& set, StreamId stream, Visit visit) {
    Block key;
    key.stream = stream;
    for (auto it = set.lower_bound(&key); it != set.end() && (*it)->stream == stream; ++it) {
      if (Block* found = visit(*it)) return found;
    }
    return nullptr;
  }

  PoolKind kind_;
  // Each stream's free blocks in (size, ptr) order; std::map, so a Set never moves and the
  // cached pointer and iterators stay valid while streams are added.
  std::map<StreamId, Set> streams_;
  mutable StreamId cached_stream_ = 0;
  mutable Set* cached_set_ = nullptr;
  size_t size_ = 0;          // free blocks in all streams' sets
  uint64_t free_bytes_ = 0;  // their sizes' sum
  mutable uint64_t walked_ = 0;
  ReleasableBlocks releasable_;
  AddressSet by_address_;
  AddressSet unmapped_;
  bool address_index_enabled_ = false;
  uint64_t gc_clock_ = 0;
};

}  // namespace fragscope
