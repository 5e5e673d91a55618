// Huge-page-backed host memory for the allocator's large metadata arrays (the block arena's
// chunks, the active-block map's slots).
//
// With 100k live blocks the allocator's metadata is ~15 MB touched at random: blocks, map slots
// and btree nodes. In 4 KiB pages that is ~4000 pages, past the TLB's reach, so nearly every cache
// miss also pays a page walk. Memory obtained here is aligned to
// 2 MiB and advised as huge-page memory (MADV_HUGEPAGE; Linux with transparent huge pages in
// "madvise" or "always" mode), so one TLB entry covers 2 MiB. Where the advice is not available
// it is ordinary memory: correctness never depends on it.
#pragma once

#include <cstddef>
#include <new>

namespace fragscope {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` (rounded up to a whole number of huge pages), aligned to kHugePageBytes and advised as
// huge-page memory. Throws std::bad_alloc when the host has no memory, as operator new does.
void* AllocateHugePages(size_t bytes);
// REQUIRES: p came from AllocateHugePages (or is nullptr).
void FreeHugePages(void* p);

// A standard allocator that takes arrays of kHugePageBytes or more from AllocateHugePages and
// smaller ones from operator new (a small map stays small).
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePageBytes) return static_cast<T*>(AllocateHugePages(bytes));
    return static_cast<T*>(::operator new (bytes, std::align_val_t{alignof(T)}));
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) >= kHugePageBytes) {
      FreeHugePages(p);
    } else {
      ::operator delete (p, std::align_val_t{alignof(T)});
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

}  // namespace fragscope
