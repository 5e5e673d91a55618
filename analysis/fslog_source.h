// FslogSource: an .fslog event log (allocator/EVENT_LOG_FORMAT.md) as a TraceSource.
//
// Streams the file through EventLogReader::NextChunk, so memory stays at the reader's 1 MiB
// buffer whatever the log's size. The header gives the device, rank, capacity and allocator
// options. Options-change continuation records are folded into one event. Events on another
// device than the header's are an error ("mixed devices"), as are records of unknown kinds
// from a newer major version (the reader refuses those files up front).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/event_log_reader.h"
#include "analysis/trace_event.h"

namespace fragscope {

class FslogSource final : public TraceSource {
 public:
  static absl::StatusOr<std::unique_ptr<FslogSource>> Open(const std::string& path);
  // A log held in memory (tests). REQUIRES: `bytes` outlives the source.
  static absl::StatusOr<std::unique_ptr<FslogSource>> OpenBytes(std::string_view bytes,
                                                                std::string name = "<memory>");

  absl::StatusOr<bool> Next(TraceEvent* event) override;
  std::vector<std::string> warnings() const override { return reader_.warnings(); }
  double Progress() const override {
    return file_bytes_ == 0 ? 0.0 : static_cast<double>(reader_.offset()) / file_bytes_;
  }

 private:
  explicit FslogSource(EventLogReader reader);
  void FillInfo();

  EventLogReader reader_;
  std::span<const LogRecord> chunk_;
  size_t pos_ = 0;
  uint64_t first_sequence_ = 0;
  uint64_t time_base_ns_ = 0;
  bool have_time_base_ = false;
  double file_bytes_ = 0;
};

}  // namespace fragscope
