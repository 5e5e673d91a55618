// The replay hooks of `fragscope convert` (convert_command.cc): the writer of each output format's
// events, the count of allocations the replay refused, and the layouts the outputs start or end
// with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/allocator_events.h"
#include "allocator/size_policy.h"
#include "analysis/explain/segment_map.h"
#include "analysis/replay/replay.h"
#include "analysis/report/fslog_file_writer.h"
#include "analysis/report/snapshot_export.h"
#include "analysis/report/text_report.h"

namespace fragscope::cli {

enum class OutFormat { kFslog, kPickle, kChrome };

// The trace's allocations the replay refused (out of memory where the job was served), and the
// first one's event number: every output has an oom record (or event) for each where the
// allocator made one, and neither the allocations nor their frees. Counted beside any writer.
class RefusedAllocations final : public ReplayHooks {
 public:
  uint32_t callbacks() const override { return kHookOom; }
  void OnOom(const ReplayOom& oom) override {
    if (oom.in_trace) return;  // the job's own OOM
    if (count_++ == 0) first_ = oom.event->index;
  }
  uint64_t count() const { return count_; }
  // The warning every output gets when the count is not 0.
  std::string Note() const {
    return absl::StrFormat(
        "%s of the trace (the first at event %d) ran out of memory in the replay though the job "
        "was served: the output has an oom record for each where the allocator made one, and "
        "neither the allocations nor their frees (give the device's --capacity, or a cap the "
        "job ran under)",
        CountOf(count_, "allocation"), first_);
  }

 private:
  uint64_t count_ = 0;
  uint64_t first_ = 0;
};

// Forwards a replay to the chosen writer.
//
// The job's OOMs stay OOMs. The replay of a trace OOM tries the request; where the replay serves
// it (a cap or device the trace does not record), the request's alloc and frees are not written
// (the job never held it) and an oom record with the trace's figures is, after any segment the
// replay reserved for it (still cached there, and used by later events).
class ConvertHooks final : public ReplayHooks {
 public:
  ConvertHooks(FslogFileWriter* fslog, SnapshotExportBuilder* pickle, int device, int64_t start_us)
      : fslog_(fslog), pickle_(pickle), device_(device), start_us_(start_us) {}
  // Writes only what trace events from `first` on do (`convert --events`); the replay's
  // stop_after_index ends the range.
  void set_first_index(uint64_t first) { first_index_ = first; }
  uint32_t callbacks() const override { return kHookTraceEvent | kHookAllocatorEvent | kHookOom; }
  void OnTraceEvent(const TraceEvent& e) override {
    // (OnOom follows every trace OOM's replay; should it not, nothing held is lost.)
    for (const AllocatorEvent& held : held_) Write(held);
    held_.clear();
    in_range_ = e.index >= first_index_;
    time_ns_ = e.time_ns;
    in_trace_oom_ = e.kind == EventKind::kOom;
    if (fslog_ == nullptr && e.kind == EventKind::kMarker) ++dropped_markers_;
    if (fslog_ == nullptr) return;
    if (e.kind == EventKind::kMarker) fslog_->Mark(e.text, e.time_ns);
    if (e.kind == EventKind::kOptionsChange) fslog_->OptionsChange(e.text, e.time_ns);
    if (e.kind == EventKind::kModel) fslog_->RecordModel(e.text, e.time_ns);
    if (e.kind == EventKind::kTag) fslog_->Tag(e.ptr, e.role, e.time_ns);
  }
  void OnAllocatorEvent(const AllocatorEvent& e) override {
    if (in_trace_oom_) {
      held_.push_back(e);
      return;
    }
    Write(e);
  }
  void OnOom(const ReplayOom& oom) override {
    // The replay's own OOM (RefusedAllocations counts it): its event is written already, if it
    // has one.
    if (!in_trace_oom_) return;
    in_trace_oom_ = false;
    const bool served = !oom.in_replay;
    for (const AllocatorEvent& e : held_) {
      const bool request = e.kind == EventKind::kAlloc || e.kind == EventKind::kFreeRequested ||
                           e.kind == EventKind::kFreeCompleted;
      if (!(served && request)) Write(e);
    }
    held_.clear();
    if (!served) return;
    ++served_ooms_;
    const TraceEvent& t = *oom.event;
    AllocatorEvent e;
    e.kind = EventKind::kOom;
    e.device = device_;
    e.stream = t.stream;
    e.requested_bytes = t.requested_bytes > 0 ? t.requested_bytes : t.bytes;
    e.bytes = t.bytes > 0 ? t.bytes : e.requested_bytes;
    e.pool = PoolFor(e.bytes);
    e.device_free_bytes = t.device_free_bytes;
    e.device_total_bytes = t.device_total_bytes;
    e.reserved_bytes = t.reserved_bytes;
    e.allocated_bytes = t.allocated_bytes;
    Write(e);
  }
  // Trace OOMs the replay served: written from the trace's record.
  uint64_t served_ooms() const { return served_ooms_; }
  // Markers a snapshot export leaves out (it writes no annotations).
  uint64_t dropped_markers() const { return dropped_markers_; }

 private:
  void Write(const AllocatorEvent& e) {
    if (!in_range_) return;
    if (fslog_ != nullptr) fslog_->Append(e, time_ns_);
    if (pickle_ != nullptr) pickle_->AddEvent(e, start_us_ + static_cast<int64_t>(time_ns_ / 1000));
  }

  FslogFileWriter* fslog_;
  SnapshotExportBuilder* pickle_;
  int device_;
  int64_t start_us_;
  uint64_t time_ns_ = 0;
  bool in_trace_oom_ = false;
  uint64_t first_index_ = 0;
  bool in_range_ = true;              // the current trace event is at or after first_index_
  std::vector<AllocatorEvent> held_;  // the replay's events for the trace OOM being replayed
  uint64_t served_ooms_ = 0;
  uint64_t dropped_markers_ = 0;
};

// The segments and allocated blocks of `layout` (the replay's, before its first event), as the
// state records of an .fslog (Note [State records] in fslog_format.h).
std::vector<InitialSegment> StateBeforeTrace(const LayoutSummary& layout);

// `layout` as a snapshot export's segments.
std::vector<ExportSegment> ToExport(const LayoutSummary& layout);

}  // namespace fragscope::cli
