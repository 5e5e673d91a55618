// SnapshotSource: the device_traces of a PyTorch memory snapshot (_dump_snapshot pickle) as a
// TraceSource.
//
// PyTorch writes the whole snapshot as one pickled object, so the file is decoded at once
// (analysis/pytorch_snapshot.h); the decoded snapshot is shared, read-only, between the sources
// a sweep opens on it. Entry semantics (docs/pytorch_allocator_rules.md §6): alloc's size
// is the caller's request (the block size is not recorded), oom's addr is the device's free
// memory and its size the rounded request.
//
// Recording usually starts after the model is loaded, so the first events meet segments and
// blocks that already exist. The source reconstructs that initial state by rewinding the
// snapshot's final segments through the trace (TraceInfo::initial_segments): a segment exists
// at the start if it is in the final state and not segment_alloc'ed by the trace, or if the
// trace frees it first; likewise for allocated blocks. A block allocated before the trace and
// freed during it has no recorded size; its size is estimated with the allocator's rounding.
//
// record_function annotations (external_annotations, START/END) become markers, so reports can
// say which region a block was allocated in ("Optimizer.step#AdamW.step").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/trace_event.h"

namespace fragscope {

struct PyTorchSnapshot;

struct SnapshotSourceOptions {
  // Which device's trace; -1 = the only device with a non-empty trace (several: an error).
  int device = -1;
};

class SnapshotSource final : public TraceSource {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotSource>> Open(
      const std::string& path, const SnapshotSourceOptions& options = {});
  // A source over an already decoded snapshot (shared with other sources).
  static absl::StatusOr<std::unique_ptr<SnapshotSource>> FromSnapshot(
      std::shared_ptr<const PyTorchSnapshot> snapshot, const std::string& path,
      const SnapshotSourceOptions& options = {});

  absl::StatusOr<bool> Next(TraceEvent* event) override;
  double Progress() const override;
  // Trace entries with an action this reader does not know (a newer PyTorch's), skipped.
  std::vector<std::string> warnings() const override;

  const std::shared_ptr<const PyTorchSnapshot>& snapshot() const { return snapshot_; }

 private:
  struct Annotation {
    int64_t time_us = 0;
    std::string text;  // the innermost open region after this annotation ("" = none)
  };
  SnapshotSource() = default;
  absl::Status Init(const SnapshotSourceOptions& options);
  void ReconstructInitialState();
  void InferCapacity();
  void CollectAnnotations();

  std::shared_ptr<const PyTorchSnapshot> snapshot_;
  size_t device_ = 0;
  size_t pos_ = 0;
  // Each entry's private pool (snapshot_pool_ids.h); empty: all in the default pool.
  std::vector<PoolId> pool_ids_;
  uint64_t unknown_actions_ = 0;
  std::string first_unknown_action_;
  int64_t first_time_us_ = 0;
  std::vector<Annotation> annotations_;
  size_t next_annotation_ = 0;
};

}  // namespace fragscope
