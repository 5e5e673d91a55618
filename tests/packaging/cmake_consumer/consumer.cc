// Uses the installed headers and libraries the way a user's program would: PyTorch's allocator
// rules on a simulated 1 GiB device. Exits 0 only when fragscope answered as PyTorch would.
#include <cstdint>
#include <iostream>

#include "allocator/allocator_options.h"
#include "allocator/caching_allocator.h"
#include "allocator/format_size.h"
#include "allocator/simulated_backend.h"
#include "fslog/crc32c.h"

int main() {
  // The .fslog library (fragscope::fslog) and its headers: CRC32C's check value.
  if (fragscope::Crc32c("123456789") != 0xE3069283u) return 1;
  fragscope::SimulatedBackend device(uint64_t{1} << 30);
  absl::StatusOr<fragscope::AllocatorOptions> options =
      fragscope::ParseAllocatorOptions("max_split_size_mb:128");
  if (!options.ok()) {
    std::cerr << options.status() << "\n";
    return 1;
  }
  fragscope::CachingAllocator allocator(device, *options);
  // 3 MiB is a large-pool request (> 1 MiB) below 10 MiB: PyTorch gives it a 20 MiB segment.
  absl::StatusOr<fragscope::DevicePtr> ptr = allocator.Allocate(3 << 20, /*stream=*/0);
  if (!ptr.ok()) {
    std::cerr << ptr.status() << "\n";
    return 1;
  }
  const auto all = static_cast<int>(fragscope::StatType::kAll);
  const int64_t reserved = allocator.GetStats().reserved_bytes[all].current;
  std::cout << "reserved " << fragscope::FormatSize(static_cast<uint64_t>(reserved)) << "\n";
  if (!allocator.Free(*ptr).ok() || reserved != int64_t{20} << 20) return 1;
  return allocator.CheckInvariants().ok() ? 0 : 1;
}
