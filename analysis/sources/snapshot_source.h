// SnapshotSource: the device_traces of a PyTorch memory snapshot (_dump_snapshot pickle) as a
// TraceSource.
//
// PyTorch writes the whole snapshot as one pickled object, so the file is decoded at once, its
// trace entries streamed into their typed form (ReadPyTorchSnapshotForReplay in
// analysis/sources/pytorch_snapshot.h); the decoded snapshot is shared, read-only, between the
// sources a sweep opens on it. Entry semantics (docs/pytorch_allocator_rules.md §6): alloc's size
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
// Markers, so that reports can say where a block was allocated: record_function annotations
// (external_annotations, START/END: the innermost open region, "Optimizer.step#AdamW.step"), and
// the trace entries' own context, 'user_metadata' (torch.cuda.memory._set_memory_metadata) and
// 'compile_context' ("Torch-Compiled Region: 0/1"; "N/A" outside compiled code): a marker
// whenever one of them changes, whose text joins the three ("forward | user_metadata: stage 2 |
// compile_context: Torch-Compiled Region: 0/1"). An 'annotate' trace entry (not written by
// PyTorch 2.11; newer releases list it) is a marker of its own: its user_metadata, else
// "annotate".
//
// A snapshot records one trace per device. The source reads one of them (SnapshotSourceOptions);
// SnapshotTraceDevices lists them, so that a caller can analyze every device.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/sources/snapshot_call_sites.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

struct PyTorchSnapshot;

struct SnapshotSourceOptions {
  // Which device's trace; -1 = the only device with a non-empty trace (several: an error).
  int device = -1;
};

// The devices whose trace is not empty, ascending.
std::vector<int> SnapshotTraceDevices(const PyTorchSnapshot& snapshot);

class SnapshotSource final : public TraceSource {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotSource>> Open(
      const std::string& path, const SnapshotSourceOptions& options = {});
  // A source over an already decoded snapshot (shared with other sources).
  static absl::StatusOr<std::unique_ptr<SnapshotSource>> FromSnapshot(
      std::shared_ptr<const PyTorchSnapshot> snapshot, const std::string& path,
      const SnapshotSourceOptions& options = {});

  absl::StatusOr<bool> Next(TraceEvent* event) override;
  const std::string& SiteText(uint32_t site) const override { return sites_.Text(site); }
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
  // The marker text of the current region and entry context ("" = none of the three).
  std::string ContextText() const;
  // A marker event for the current context, at trace position `index` and time `time_us`.
  void MakeMarker(TraceEvent* event, uint64_t index, int64_t time_us, std::string text) const;

  std::shared_ptr<const PyTorchSnapshot> snapshot_;
  size_t device_ = 0;
  size_t pos_ = 0;
  // Each entry's private pool (snapshot_pool_ids.h); empty: all in the default pool.
  std::vector<PoolId> pool_ids_;
  // The allocations' call sites, from the stacks the snapshot keeps (snapshot_call_sites.h).
  SnapshotCallSites sites_;
  uint64_t unknown_actions_ = 0;
  std::string first_unknown_action_;
  int64_t first_time_us_ = 0;
  std::vector<Annotation> annotations_;
  size_t next_annotation_ = 0;
  // The context the last marker said: the innermost open region, the entries' user_metadata
  // and compile_context ("" and "N/A" = none).
  std::string region_;
  std::string user_metadata_;
  std::string compile_context_;
};

}  // namespace fragscope
