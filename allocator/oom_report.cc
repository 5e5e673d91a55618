#include "allocator/oom_report.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"

namespace fragscope {
namespace {

constexpr char kPayloadUrl[] = "type.fragscope.dev/fragscope.OomReport";
static_assert(std::is_trivially_copyable_v<OomReport>, "OomReport travels as raw bytes");

}  // namespace

std::string FormatOomMessage(const OomReport& r) {
  if (r.too_large) return "CUDA out of memory. Tried to allocate more than 1EB memory.";
  // PyTorch counts the free blocks of private pools as allocated.
  const uint64_t allocated = r.allocated_bytes + r.private_pool_free_bytes;
  const uint64_t unallocated = r.reserved_bytes >= allocated ? r.reserved_bytes - allocated : 0;
  std::string message = absl::StrCat(
      "CUDA out of memory. Tried to allocate ", FormatSize(r.segment_bytes), ". GPU ", r.device,
      " has a total capacity of ", FormatSize(r.device_total_bytes), " of which ",
      FormatSize(r.device_free_bytes), " is free. ",
      r.allowed_bytes.has_value() ? absl::StrCat(FormatSize(*r.allowed_bytes), " allowed; ") : "",
      "Of the allocated memory ", FormatSize(allocated), " is allocated by PyTorch, ",
      r.private_pool_free_bytes > 0
          ? absl::StrCat("with ", FormatSize(r.private_pool_free_bytes),
                         " allocated in private pools (e.g., CUDA Graphs), ")
          : "",
      "and ", FormatSize(unallocated),
      " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
      "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
      "documentation for Memory Management  "
      "(https://docs.pytorch.org/docs/stable/notes/cuda.html"
      "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)");
  absl::StrAppend(&message, " [fragscope: the request needed a block of ",
                  FormatSize(r.rounded_bytes), "; the largest free cached block is ",
                  FormatSize(r.largest_free_cached_block), " among ", r.free_cached_fragments,
                  " free cached fragments totalling ", FormatSize(r.free_cached_bytes));
  if (r.pending_free_bytes > 0) {
    absl::StrAppend(&message, ", plus ", FormatSize(r.pending_free_bytes),
                    " freed but waiting for other streams");
  }
  if (r.oversize_rejected_bytes > 0) {
    absl::StrAppend(&message, "; ", FormatSize(r.oversize_rejected_bytes),
                    " of free blocks were barred by max_split_size");
  }
  if (r.private_pool_reserved_bytes > 0) {
    absl::StrAppend(&message, "; ", FormatSize(r.private_pool_reserved_bytes), " is reserved in ",
                    r.private_pool_count, " private pool", r.private_pool_count == 1 ? "" : "s",
                    ", ", FormatSize(r.private_pool_free_bytes), " of it free",
                    r.pool_id.is_default() ? " and unusable by this allocation" : "");
  }
  if (r.would_fit_in_free_cached()) {
    absl::StrAppend(&message,
                    "; it would have fit in the free cached memory had that been "
                    "contiguous (fragmentation)]");
  } else if (r.would_fit_with_device_free()) {
    absl::StrAppend(&message,
                    "; it would have fit in free cached plus device-free memory had "
                    "that been contiguous]");
  } else {
    absl::StrAppend(&message, "; it would not have fit even with all free memory contiguous]");
  }
  return message;
}

absl::Status MakeOomStatus(const OomReport& report) {
  absl::Status status = absl::ResourceExhaustedError(FormatOomMessage(report));
  std::string bytes(sizeof(OomReport), '\0');
  std::memcpy(bytes.data(), &report, sizeof(OomReport));
  status.SetPayload(kPayloadUrl, absl::Cord(bytes));
  return status;
}

std::optional<OomReport> GetOomReport(const absl::Status& status) {
  auto payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value() || payload->size() != sizeof(OomReport)) return std::nullopt;
  OomReport report;
  std::string bytes(*payload);
  std::memcpy(&report, bytes.data(), sizeof(OomReport));
  return report;
}

}  // namespace fragscope
