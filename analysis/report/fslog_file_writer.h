// FslogFileWriter: writes an .fslog file synchronously, record by record, with the timestamps
// the caller gives. FslogWriter (fslog/fslog_writer.h) is the writer for live jobs
// (background thread, its own clock, never blocks the allocator); this one is for offline
// producers: `fragscope convert` (a replay's events with the trace's times), tests that build
// hand-computed traces, and the synthetic logs of the benchmarks.
//
// Also an AllocatorObserver: attached to an allocator, it logs every event at the time set by
// set_time_ns().
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator_events.h"
#include "analysis/sources/trace_event.h"
#include "fslog/fslog_context.h"
#include "fslog/fslog_format.h"

namespace fragscope {

class FslogFileWriter final : public AllocatorObserver {
 public:
  // Creates (truncates) `path` and writes the header. `header.clock` defaults to kMonotonic.
  static absl::StatusOr<std::unique_ptr<FslogFileWriter>> Open(const std::string& path,
                                                               FslogHeader header);
  ~FslogFileWriter() override;

  void set_time_ns(uint64_t ns) { time_ns_ = ns; }
  void OnEvent(const AllocatorEvent& event) override { Append(event, time_ns_); }
  void Append(const AllocatorEvent& event, uint64_t timestamp_ns);
  // Writes the memory held before the log's first event as state records (Note [State records]
  // in fslog_format.h), at time 0: each segment, then its allocated blocks.
  // REQUIRES: nothing appended yet; segments do not overlap, each one's blocks lie inside it in
  // address order (what TraceInfo::initial_segments holds).
  void AppendState(std::span<const InitialSegment> segments);
  void Mark(std::string_view text, uint64_t timestamp_ns);
  // A tag record (Note [Tag records]): the role of the live block at `ptr`, and its context from
  // now on (0: it keeps its own; Note [Context records]).
  void Tag(DevicePtr ptr, AllocationRole role, uint64_t timestamp_ns, uint32_t context = 0);
  void OptionsChange(std::string_view options, uint64_t timestamp_ns);
  // Who holds the memory (Note [Context records] in fslog/fslog_context.h): a string and a
  // context defined (records, not events), and the context the alloc records (and the
  // oom_context record before an oom record) appended from now on name (0: none).
  void DefineString(uint32_t id, std::string_view text, uint64_t timestamp_ns);
  void DefineContext(const ContextDefinition& context, uint64_t timestamp_ns);
  void set_alloc_context(uint32_t context) { alloc_context_ = context; }
  // Records as they are (tests of damaged logs), in one chunk; not counted as events.
  void AppendRaw(const LogRecord* records, size_t n);
  // The model the job runs (Note [Model records] in fslog_format.h).
  void RecordModel(std::string_view json, uint64_t timestamp_ns);
  // Writes the pending chunk and closes the file; the first write error, if any.
  absl::Status Close();
  // Records written so far (a combined free record counts once: Note [Combined free records]).
  uint64_t records() const { return sequence_; }
  // Events appended so far (allocator events, markers, options changes, model records), as
  // readers count them.
  uint64_t events() const { return events_; }

 private:
  FslogFileWriter() = default;
  LogRecord* Reserve(size_t n);
  // One event's records (a text over continuation records).
  void AppendRecords(const LogRecord* records, size_t n);
  void FlushChunk();

  std::FILE* file_ = nullptr;
  std::string path_;
  int32_t device_ = 0;
  uint64_t base_ns_ = 0;  // header start_monotonic_ns: record timestamps are base + time
  uint64_t time_ns_ = 0;
  uint32_t alloc_context_ = 0;
  std::vector<LogRecord> chunk_;
  uint64_t chunk_first_ = 0;
  uint64_t sequence_ = 0;
  uint64_t events_ = 0;
  bool failed_ = false;
  int error_ = 0;  // errno of the first failed write
};

}  // namespace fragscope
