#include "allocator/huge_pages.h"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace fragscope {

void* AllocateHugePages(size_t bytes) {
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: without transparent huge pages (or with them off) it fails and changes nothing.
  (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

void FreeHugePages(void* p) { std::free(p); }

}  // namespace fragscope
