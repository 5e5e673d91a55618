#include "analysis/report/snapshot_export.h"

#include <utility>

#include "allocator/check.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "fslog/fslog_format.h"

namespace fragscope {

SnapshotExportBuilder::SnapshotExportBuilder(int device)
    : device_(device), snapshot_(std::make_unique<PyTorchSnapshot>()) {
  FRAGSCOPE_CHECK(device >= 0 && device <= kMaxDeviceIndex);
  snapshot_->device_traces.resize(static_cast<size_t>(device) + 1);
}

SnapshotExportBuilder::~SnapshotExportBuilder() = default;

size_t SnapshotExportBuilder::trace_entries() const {
  return snapshot_->device_traces[static_cast<size_t>(device_)].size();
}

void SnapshotExportBuilder::AddEvent(const AllocatorEvent& e, int64_t time_us) {
  TraceAction action;
  switch (e.kind) {
    case EventKind::kAlloc:
      action = TraceAction::kAlloc;
      break;
    case EventKind::kFreeRequested:
      action = TraceAction::kFreeRequested;
      break;
    case EventKind::kFreeCompleted:
      action = TraceAction::kFreeCompleted;
      break;
    case EventKind::kSegmentAlloc:
      action = TraceAction::kSegmentAlloc;
      break;
    case EventKind::kSegmentFree:
      action = TraceAction::kSegmentFree;
      break;
    case EventKind::kSegmentMap:
      action = TraceAction::kSegmentMap;
      break;
    case EventKind::kSegmentUnmap:
      action = TraceAction::kSegmentUnmap;
      break;
    case EventKind::kOom:
      action = TraceAction::kOom;
      break;
    default:
      return;
  }
  // Filled in place: building a local entry and moving it trips GCC 12's -Wmaybe-uninitialized
  // on the optional strings under -fsanitize=address.
  SnapshotTraceEntry& t = snapshot_->device_traces[static_cast<size_t>(device_)].emplace_back();
  t.action = action;
  t.stream = static_cast<int64_t>(e.stream);
  t.time_us = time_us;
  t.compile_context.emplace("N/A");
  t.user_metadata.emplace();
  if (e.kind == EventKind::kOom) {
    t.device_free = e.device_free_bytes;
    t.size = e.bytes;
  } else if (e.kind == EventKind::kAlloc || e.kind == EventKind::kFreeRequested ||
             e.kind == EventKind::kFreeCompleted) {
    t.addr = e.ptr;
    t.size = e.requested_bytes;  // PyTorch records the caller's size for block actions
  } else {
    t.addr = e.ptr;
    t.size = e.bytes;
  }
}

void SnapshotExportBuilder::SetSegments(std::vector<ExportSegment> segments) {
  snapshot_->segments.clear();
  for (ExportSegment& s : segments) {
    SnapshotSegment seg;
    seg.device = device_;
    seg.address = s.address;
    seg.stream = static_cast<int64_t>(s.stream);
    seg.is_large = s.large;
    for (const ExportBlock& b : s.blocks) {
      SnapshotBlock block;
      block.address = b.address;
      block.size = b.size;
      block.state = b.state == 0   ? BlockState::kActiveAllocated
                    : b.state == 1 ? BlockState::kActivePendingFree
                                   : BlockState::kInactive;
      block.requested_size = b.state == 2 ? 0 : b.requested_size;
      seg.total_size += b.size;
      if (b.state != 2) {
        seg.active_size += b.size;
        seg.requested_size += block.requested_size;
      }
      if (b.state == 0) seg.allocated_size += b.size;
      seg.blocks.push_back(std::move(block));
    }
    snapshot_->segments.push_back(std::move(seg));
  }
}

void SnapshotExportBuilder::SetAllocatorSettings(const std::string& conf) {
  SnapshotAllocatorSettings settings;
  settings.alloc_conf = conf;
  snapshot_->allocator_settings = std::move(settings);
}

absl::Status SnapshotExportBuilder::Write(const std::string& path) {
  if (absl::Status s = CheckSnapshotInvariants(*snapshot_); !s.ok()) return s;
  return WritePyTorchSnapshotFile(*snapshot_, path);
}

}  // namespace fragscope
