#include "allocator/format_size.h"

#include "absl/strings/str_format.h"
#include "allocator/types.h"

namespace fragscope {

std::string FormatSize(uint64_t bytes) {
  if (bytes <= 1024) return absl::StrFormat("%d bytes", bytes);
  if (bytes <= kMiB) return absl::StrFormat("%.2f KiB", static_cast<double>(bytes) / kKiB);
  if (bytes <= kGiB) return absl::StrFormat("%.2f MiB", static_cast<double>(bytes) / kMiB);
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / kGiB);
}

}  // namespace fragscope
