#include "analysis/sources/trace_event.h"

#include <utility>

namespace fragscope {

void SetTraceSettings(TraceInfo& info, std::string text) {
  info.settings = ParseAllocatorOptions(text);
  info.allocator_options = std::move(text);
}

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kFslog:
      return "fslog";
    case TraceFormat::kPyTorchSnapshot:
      return "pytorch-snapshot";
    case TraceFormat::kRmmCsv:
      return "rmm-csv";
  }
  return "unknown";
}

absl::StatusOr<size_t> TraceSource::NextBatch(std::span<TraceEvent* const> events) {
  size_t n = 0;
  for (; n < events.size(); ++n) {
    absl::StatusOr<bool> got = Next(events[n]);
    if (!got.ok()) {
      if (n == 0) return got.status();
      break;  // errors are sticky: the next call returns it
    }
    if (!*got) break;
  }
  return n;
}

const std::string& TraceSource::SiteText(uint32_t /*site*/) const {
  static const std::string kNone;
  return kNone;
}

}  // namespace fragscope
