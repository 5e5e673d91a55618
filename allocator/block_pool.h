// BlockPool: the free blocks of one pool (small or large), ordered for best fit.
//
// Order: (stream, size, address). lower_bound(stream, size) therefore finds the smallest free
// block on the stream that is large enough, and among equal sizes the lowest address: PyTorch's
// BlockComparatorSize. (The reference mentions a per-segment registration_counter in the key;
// traces recorded from PyTorch 2.11 on an H200 show ties broken by address, and replaying them
// matches only with this order: see tests/allocator/pytorch_oracle_test.cc.) Blocks never cross
// streams: a lookup that lands on another stream's block finds nothing.
//
// Unmapped blocks of expandable segments are kept apart, in (stream, address) order
// (PyTorch's BlockPool::unmapped): they are never handed out, only mapped.
//
// For first-fit placement the pool also keeps the same blocks in address order (stream, ptr);
// that index exists only while enabled (set_address_index), so best fit pays one branch for it.
//
// The size order holds (key, block) entries (PoolEntry), so lookups never touch Block objects;
// the other sets hold pointers. The pool never splits, merges or frees blocks (see block.h).
// Invariants: every block in the sets is free (not allocated, no pending events); an entry's key
// equals its block's (stream, size, ptr), so a block's key fields change in the set only through
// Rekey.
//
// A sentinel block with the largest possible key always sits at the end of the set, so the btree
// never empties: a warm malloc+free that takes a pool's only block and puts a remainder back
// would otherwise free and reallocate the root node every time. end() is the sentinel; callers
// never see it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <tuple>

#include "absl/container/btree_set.h"
#include "allocator/block.h"
#include "allocator/types.h"

namespace fragscope {

// An entry of the size order: the block's key, copied in, and the block. Comparisons read the
// copy, so a lookup in a pool of many blocks touches btree nodes only, never the scattered Block
// objects (a cache miss per comparison otherwise).
struct PoolEntry {
  StreamId stream;
  uint64_t size;
  DevicePtr ptr;
  Block* block;

  static PoolEntry Of(Block* b) { return {b->stream, b->size, b->ptr, b}; }
  auto Tie() const { return std::tie(stream, size, ptr); }
};

// Note [Branch-light best-fit search]
// A best-fit lookup, insert or erase in a pool of many free blocks mispredicts at every step of a
// binary search within each btree node: the keys are random, so each "go left or right" branch is
// a coin toss (~15 cycles lost each, about two per level). Two changes cut that by a third or
// more: nodes are searched linearly (one mispredicted loop exit per level; the extra comparisons
// are predicted), and (size, ptr) is compared as one 128-bit number (cmp/sbb, no branch) instead
// of a tuple's chain of branches. Measured with cachegrind's branch simulator
// (bench/cachegrind_counts.sh; bench/RESULTS.md, session 10): mispredicted branches per operation
// of BM_RandomAllocations' mix 25 -> 17 at 1k live blocks and 29 -> 17 at 38k; per event of the
// one-core replay of a training-like log 4.25 -> 3.54.
struct BlockOrder {
  using is_transparent = void;
  using absl_btree_prefer_linear_node_search = std::true_type;
  // A search key: the smallest possible key of (stream, size).
  struct Key {
    StreamId stream;
    uint64_t size;
  };
  // (hi, lo) as one 128-bit number, for a branch-free lexicographic comparison. Streams differ
  // between neighbouring entries only at a stream's first and last entry.
  static unsigned __int128 Wide(uint64_t hi, uint64_t lo) {
    return (static_cast<unsigned __int128>(hi) << 64) | lo;
  }
  bool operator()(const PoolEntry& a, const PoolEntry& b) const {
    if (a.stream != b.stream) [[unlikely]]
      return a.stream < b.stream;
    return Wide(a.size, a.ptr) < Wide(b.size, b.ptr);
  }
  bool operator()(const PoolEntry& a, const Key& k) const {
    if (a.stream != k.stream) [[unlikely]]
      return a.stream < k.stream;
    return a.size < k.size;
  }
  bool operator()(const Key& k, const PoolEntry& b) const {
    if (k.stream != b.stream) [[unlikely]]
      return k.stream < b.stream;
    return k.size <= b.size;
  }
};

// (stream, address): first-fit order.
struct BlockAddressOrder {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->ptr) < std::tie(b->stream, b->ptr);
  }
};

class BlockPool {
  // absl::btree_set's own container with 512-byte nodes (16 entries) instead of its default 256:
  // one level fewer on the path of every best-fit search, insert and erase, the cache misses of a
  // pool of many blocks (BM_RandomAllocations, interleaved, quiet VM: 1k live 269 -> 255 ns per
  // op, 38k live 494-514 -> 457-483 ns; warm pair 88-93 -> 81 ns). absl::btree_set fixes the
  // node size, so this names the container it is built from (absl/container/btree_set.h).
  using SetParams =
      absl::container_internal::set_params<PoolEntry, BlockOrder, std::allocator<PoolEntry>,
                                           /*TargetNodeSize=*/512, /*IsMulti=*/false>;
  using Set =
      absl::container_internal::btree_set_container<absl::container_internal::btree<SetParams>>;
  static_assert(absl::container_internal::btree_node<SetParams>::use_linear_search::value,
                "BlockOrder asks for linear node search: Note [Branch-light best-fit search]");

 public:
  // A position in the size order; dereferences to the Block. key() reads the entry's copy of the
  // block's key without touching the block.
  class iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Block*;
    using difference_type = std::ptrdiff_t;
    using pointer = Block* const*;
    using reference = Block*;

    iterator() = default;
    Block* operator*() const { return it_->block; }
    const PoolEntry& key() const { return *it_; }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    iterator& operator--() {
      --it_;
      return *this;
    }
    iterator operator++(int) { return iterator(it_++); }
    iterator operator--(int) { return iterator(it_--); }
    friend bool operator==(const iterator& a, const iterator& b) { return a.it_ == b.it_; }

   private:
    friend class BlockPool;
    explicit iterator(Set::const_iterator it) : it_(it) {}
    Set::const_iterator it_;
  };
  using const_iterator = iterator;

  explicit BlockPool(PoolKind kind) : kind_(kind) {
    sentinel_.stream = sentinel_.size = sentinel_.ptr = ~uint64_t{0};
    blocks_.insert(PoolEntry::Of(&sentinel_));
  }
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  PoolKind kind() const { return kind_; }

  // The best-fit position for (stream, size): the first block not ordered before the key, or
  // end(). The block there may belong to another stream; callers check.
  iterator LowerBound(StreamId stream, uint64_t size) const {
    return iterator(blocks_.lower_bound(BlockOrder::Key{stream, size}));
  }

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
    if (enabled) by_address_.insert(begin(), end());
  }

  // REQUIRES: block is free and not in the set. Stamps the GC clock into the block.
  void Insert(Block* block) {
    block->set_gc_count_base(gc_clock_);
    const bool inserted = blocks_.insert(PoolEntry::Of(block)).second;
    FRAGSCOPE_DCHECK(inserted);
    (void)inserted;
    if (address_index_enabled_) by_address_.insert(block);
  }
  // REQUIRES: block is in the set.
  void Erase(Block* block) {
    const size_t erased = blocks_.erase(PoolEntry::Of(block));
    FRAGSCOPE_DCHECK(erased == 1);
    (void)erased;
    if (address_index_enabled_) by_address_.erase(block);
  }
  iterator Erase(iterator it) {
    if (address_index_enabled_) by_address_.erase(*it);
    return iterator(blocks_.erase(it.it_));
  }
  // REQUIRES: block is in the set.
  iterator Find(Block* block) const {
    auto it = blocks_.find(PoolEntry::Of(block));
    FRAGSCOPE_DCHECK(it != blocks_.end() && it->block == block);
    return iterator(it);
  }

  // Changes the key of the block at `it` to (new_ptr, new_size) by running `change` (the block
  // surgery: a split or a merge), keeping the set ordered. When the new key still sorts between
  // the block's neighbours, the block stays where it is: no btree erase and insert, which were
  // a third of a warm malloc+free pair (a split's remainder and a merge's survivor usually stay
  // put). Stamps the GC clock, as Insert does.
  // REQUIRES: change() leaves the block with exactly (new_ptr, new_size) and does not touch this
  // pool's sets; the stream stays the same.
  template <typename Change>
  void Rekey(iterator it, DevicePtr new_ptr, uint64_t new_size, Change change) {
    Block* block = *it;
    const bool in_place = !address_index_enabled_ && KeyFitsAt(it, new_ptr, new_size);
    if (!in_place) Erase(it);
    change();
    FRAGSCOPE_DCHECK(block->ptr == new_ptr && block->size == new_size);
    if (in_place) {
      // The entry's key is a copy; the btree never compares it while we rewrite it, and the
      // new key sorts where the old one did.
      auto& entry = const_cast<PoolEntry&>(*it.it_);
      entry.ptr = new_ptr;
      entry.size = new_size;
      block->set_gc_count_base(gc_clock_);
    } else {
      Insert(block);
    }
  }

  bool Contains(Block* block) const {
    auto it = blocks_.find(PoolEntry::Of(block));
    return it != blocks_.end() && it->block == block &&
           (!address_index_enabled_ || by_address_.contains(block));
  }
  // False if the address index (when enabled) holds other blocks than the size order.
  bool IndexesAgree() const { return !address_index_enabled_ || by_address_.size() == size(); }
  // False if an entry's key copy differs from its block's key (a key changed in the set without
  // Rekey), or the keys are not strictly increasing. O(blocks): for the invariant checker.
  bool IsOrdered() const {
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->Tie() != PoolEntry::Of(it->block).Tie()) return false;
      if (std::next(it) != blocks_.end() && !BlockOrder()(*it, *std::next(it))) return false;
    }
    return true;
  }

  iterator begin() const { return iterator(blocks_.begin()); }
  iterator end() const { return iterator(std::prev(blocks_.end())); }
  size_t size() const { return blocks_.size() - 1; }
  bool empty() const { return size() == 0; }

  // The garbage-collection clock: the number of lookups in this pool while GC is enabled
  // (PyTorch's get_free_blocks_call_count). A free block's age is clock - gc_count_base.
  uint64_t gc_clock() const { return gc_clock_; }
  void TickGcClock() { ++gc_clock_; }

 private:
  using AddressSet = absl::btree_set<Block*, BlockAddressOrder>;

  // Whether key (stream of *it, size, ptr) sorts strictly between the neighbours of `it`.
  bool KeyFitsAt(iterator it, DevicePtr ptr, uint64_t size) const {
    const auto key = std::make_tuple(it.key().stream, size, ptr);
    if (it != begin() && !(std::prev(it).key().Tie() < key)) return false;
    return key < std::next(it).key().Tie();  // the sentinel follows every real block
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
  Block sentinel_;
  Set blocks_;
  AddressSet by_address_;
  AddressSet unmapped_;
  bool address_index_enabled_ = false;
  uint64_t gc_clock_ = 0;
};

}  // namespace fragscope
