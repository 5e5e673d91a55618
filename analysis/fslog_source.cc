#include "analysis/fslog_source.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"

namespace fragscope {

FslogSource::FslogSource(EventLogReader reader) : reader_(std::move(reader)) { FillInfo(); }

absl::StatusOr<std::unique_ptr<FslogSource>> FslogSource::Open(const std::string& path) {
  absl::StatusOr<EventLogReader> reader = EventLogReader::Open(path);
  if (!reader.ok()) return reader.status();
  auto source = std::unique_ptr<FslogSource>(new FslogSource(std::move(*reader)));
  source->info_.path = path;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  source->file_bytes_ = ec ? 0.0 : static_cast<double>(size);
  return source;
}

absl::StatusOr<std::unique_ptr<FslogSource>> FslogSource::OpenBytes(std::string_view bytes,
                                                                    std::string name) {
  absl::StatusOr<EventLogReader> reader = EventLogReader::OpenBytes(bytes, name);
  if (!reader.ok()) return reader.status();
  auto source = std::unique_ptr<FslogSource>(new FslogSource(std::move(*reader)));
  source->info_.path = std::move(name);
  source->file_bytes_ = static_cast<double>(bytes.size());
  return source;
}

void FslogSource::FillInfo() {
  const EventLogHeader& h = reader_.header();
  info_.format = TraceFormat::kFslog;
  info_.device = h.device_index;
  info_.rank = h.rank;
  info_.world_size = h.world_size;
  info_.pid = h.pid;
  info_.host = h.host;
  info_.device_name = h.device_name;
  info_.capacity_bytes = h.device_total_bytes;
  info_.capacity_source = h.device_total_bytes > 0 ? "log header" : "";
  info_.allocator_options = h.allocator_options;
  info_.start_wall_ns = h.start_wall_ns;
  info_.records_empty_cache = true;
  info_.records_free_completed = true;
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(h.allocator_options);
  info_.expandable_segments = options.ok() && options->expandable_segments;
  if (h.start_monotonic_ns > 0) {
    time_base_ns_ = h.start_monotonic_ns;
    have_time_base_ = true;
  }
}

absl::StatusOr<bool> FslogSource::Next(TraceEvent* event) {
  for (;;) {
    if (pos_ >= chunk_.size()) {
      absl::StatusOr<std::span<const LogRecord>> chunk = reader_.NextChunk(&first_sequence_);
      if (!chunk.ok()) return chunk.status();
      if (chunk->empty()) return false;
      chunk_ = *chunk;
      pos_ = 0;
    }
    const size_t i = pos_++;
    const LogRecord& r = chunk_[i];
    const auto kind = static_cast<EventKind>(r.kind);
    if (kind == EventKind::kOptionsChange && (r.flags & kRecordFlagContinuation) != 0) {
      continue;  // folded into its first record below
    }
    if (r.kind < static_cast<uint8_t>(EventKind::kAlloc) ||
        r.kind > static_cast<uint8_t>(EventKind::kMarker)) {
      continue;  // a kind from a newer minor version: passed over
    }
    if (!have_time_base_ || r.timestamp_ns < time_base_ns_) {
      time_base_ns_ = r.timestamp_ns;
      have_time_base_ = true;
    }
    event->index = first_sequence_ + i;
    event->time_ns = r.timestamp_ns - time_base_ns_;
    event->kind = kind;
    event->pool = static_cast<PoolKind>(r.pool & 1);
    event->flags = r.flags;
    if (kind == EventKind::kMarker) {
      event->text.assign(MarkerText(r));
      event->ptr = event->bytes = event->requested_bytes = event->stream = 0;
      return true;
    }
    if (kind == EventKind::kOptionsChange) {
      event->text.assign(OptionsChangeTextPart(r));
      for (size_t j = i + 1; j < chunk_.size(); ++j) {
        const LogRecord& c = chunk_[j];
        if (c.kind != r.kind || (c.flags & kRecordFlagContinuation) == 0) break;
        event->text.append(OptionsChangeTextPart(c));
      }
      return true;
    }
    if (r.device != info_.device) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: mixed devices: event %d is on device %d but the log header says device %d; "
          "fragscope analyzes one device per log",
          info_.path, event->index, r.device, info_.device));
    }
    const uint64_t* w = r.words;
    event->bytes = w[kWordBytes];
    event->requested_bytes = w[kWordRequestedBytes];
    event->stream = w[kWordStream];
    if (UsesStatsLayout(r.kind)) {
      event->ptr = 0;
      event->device_free_bytes = w[kWordDeviceFreeBytes];
      event->device_total_bytes = w[kWordDeviceTotalBytes];
      event->reserved_bytes = w[kWordReservedBytes];
      event->allocated_bytes = w[kWordAllocatedBytes];
    } else {
      event->ptr = w[kWordPtr];
      if (kind == EventKind::kSegmentMap || kind == EventKind::kSegmentUnmap) {
        info_.expandable_segments = true;
      }
    }
    return true;
  }
}

}  // namespace fragscope
