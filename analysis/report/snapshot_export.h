// SnapshotExport: builds a PyTorch memory snapshot (the _dump_snapshot pickle that memory_viz
// opens) from a replay: device_traces from the allocator's events, segments from the final
// layout. Used by `fragscope convert LOG out.pickle`.
//
// This header deliberately does not include analysis/sources/pytorch_snapshot.h: that model's
// BlockState collides with allocator/allocator_snapshot.h's, so no translation unit may include
// both (see analysis/README.md). The layout crosses over as the neutral structs below.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "allocator/allocator_events.h"

namespace fragscope {

struct PyTorchSnapshot;

struct ExportBlock {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  int state = 0;  // 0 allocated, 1 pending free, 2 inactive
};
struct ExportSegment {
  uint64_t address = 0;
  uint64_t size = 0;
  bool large = true;
  uint64_t stream = 0;
  std::vector<ExportBlock> blocks;
};

class SnapshotExportBuilder {
 public:
  // REQUIRES: 0 <= device <= kMaxDeviceIndex (every trace source guarantees it): the snapshot
  // holds one trace list per device up to this one.
  explicit SnapshotExportBuilder(int device);
  ~SnapshotExportBuilder();

  // One allocator event at trace time `time_us` (Unix microseconds).
  void AddEvent(const AllocatorEvent& event, int64_t time_us);
  void SetSegments(std::vector<ExportSegment> segments);
  void SetAllocatorSettings(const std::string& conf);
  absl::Status Write(const std::string& path);
  size_t trace_entries() const;

 private:
  int device_;
  std::unique_ptr<PyTorchSnapshot> snapshot_;
};

}  // namespace fragscope
