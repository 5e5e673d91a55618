#include "analysis/sources/rmm_source.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace fragscope {

absl::StatusOr<std::unique_ptr<RmmSource>> RmmSource::Open(const std::string& path) {
  absl::StatusOr<RmmLog> log = ReadRmmCsvFile(path);
  if (!log.ok()) return log.status();
  return FromLog(std::make_shared<const RmmLog>(std::move(*log)), path);
}

std::unique_ptr<RmmSource> RmmSource::FromLog(std::shared_ptr<const RmmLog> log,
                                              const std::string& path) {
  auto source = std::unique_ptr<RmmSource>(new RmmSource());
  source->log_ = std::move(log);
  source->info_.path = path;
  source->info_.format = TraceFormat::kRmmCsv;
  source->info_.device_name = "RMM memory resource";
  source->info_.records_empty_cache = false;
  source->info_.records_free_completed = false;
  return source;
}

std::vector<std::string> RmmSource::warnings() const {
  std::vector<std::string> warnings;
  if (log_->dropped_tail_bytes > 0) {
    warnings.push_back(absl::StrFormat("%s: dropped a torn last line of %d bytes", info_.path,
                                       log_->dropped_tail_bytes));
  }
  if (size_mismatches_ > 0) {
    warnings.push_back(absl::StrFormat(
        "%s: %d %s a size other than the allocation's (the first: %s); the allocation's size "
        "is the one freed",
        info_.path, size_mismatches_, size_mismatches_ == 1 ? "free gives" : "frees give",
        first_size_mismatch_));
  }
  return warnings;
}

absl::StatusOr<bool> RmmSource::Next(TraceEvent* event) {
  if (pos_ >= log_->entries.size()) return false;
  const RmmLogEntry& e = log_->entries[pos_++];
  const int64_t t0 = log_->entries.front().timestamp_us;
  *event = TraceEvent{};
  event->index = e.line;
  event->time_ns = static_cast<uint64_t>(e.timestamp_us >= t0 ? e.timestamp_us - t0 : 0) * 1000;
  event->ptr = e.pointer;
  event->requested_bytes = e.size_bytes;
  event->stream = e.stream;
  switch (e.action) {
    case RmmAction::kAllocate:
      event->kind = EventKind::kAlloc;
      live_sizes_[e.pointer] = e.size_bytes;
      break;
    case RmmAction::kFree:
      event->kind = EventKind::kFreeRequested;
      if (auto it = live_sizes_.find(e.pointer); it != live_sizes_.end()) {
        if (e.size_bytes != 0 && e.size_bytes != it->second && size_mismatches_++ == 0) {
          first_size_mismatch_ = absl::StrFormat("line %d frees %d bytes at 0x%x, allocated as %d",
                                                 e.line, e.size_bytes, e.pointer, it->second);
        }
        live_sizes_.erase(it);
      }
      break;
    case RmmAction::kAllocateFailure:
      event->kind = EventKind::kOom;
      break;
  }
  return true;
}

}  // namespace fragscope
