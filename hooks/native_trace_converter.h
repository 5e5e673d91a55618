// NativeTraceConverter: PyTorch's allocator trace entries (c10::CachingDeviceAllocator::TraceEntry)
// as fragscope AllocatorEvents, for the observe mode (torch_observer.h).
//
// This file does not include LibTorch: the torch_* adapter copies the five TraceEntry fields it
// needs into a NativeTraceEntry, so the conversion is unit-tested without torch.
//
// A TraceEntry carries less than an AllocatorEvent. What the converter knows and what it infers
// (docs/pytorch_allocator_rules.md §6 for the meaning of `size` per action):
//   alloc / free_requested / free_completed: size is the caller's request. The block size is
//     inferred as RoundSize(request) under the job's PYTORCH_CUDA_ALLOC_CONF; PyTorch hands out a
//     larger block when the remainder is too small to split (up to 1 MiB more in the large pool),
//     which the trace does not say, so these events carry kEventFlagSizeInferred (`fragscope
//     verify` then takes the size as a lower bound). The pool follows from the rounded size. The
//     segment is found from the segment events seen so far (0 for blocks of segments allocated
//     before observing).
//   Not known at all: the split flags (kEventFlagBlockWasSplit, kEventFlagResultIsSplit),
//     split_bytes, merged_count and result_bytes of free_completed, and empty_cache events (PyTorch
//     traces the segment_free records of an empty_cache, not the call).
//   segment_alloc / segment_free: exact (address and size); pool = small for 2 MiB segments.
//   segment_map / segment_unmap (expandable segments): exact ranges, flagged kEventFlagExpandable;
//     the pool is a guess (large when the size is a multiple of the large page).
//   oom: addr is the device's free bytes, size the rounded request. Reserved and allocated bytes
//     come from the converter's running totals (approximate when blocks are larger than rounded),
//     the device total from the constructor.
//   snapshot and unknown actions produce no event.
// Running totals start at zero when observing starts: attach before the first allocation for an
// exact picture (after torch.cuda.init(), before the model is built).
#pragma once

#include <cstdint>
#include <map>

#include "allocator/allocator_events.h"
#include "allocator/allocator_options.h"

namespace fragscope::hooks {

// TraceEntry::Action, in PyTorch's order.
enum class NativeTraceAction : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kSnapshot,
  kOom,
  kUnknown,
};

struct NativeTraceEntry {
  NativeTraceAction action = NativeTraceAction::kUnknown;
  int32_t device = 0;
  uint64_t addr = 0;    // block or segment address; device free bytes for kOom
  uint64_t size = 0;    // see the file comment
  uint64_t stream = 0;  // cudaStream_t as an integer
};

class NativeTraceConverter {
 public:
  // `options`: the allocator options PyTorch runs with (for rounding and max_split_size).
  NativeTraceConverter(AllocatorOptions options, uint64_t device_total_bytes);

  // Fills *event for `entry`; false for entries with no event (snapshot, unknown actions).
  bool Convert(const NativeTraceEntry& entry, AllocatorEvent* event);

  uint64_t reserved_bytes() const { return reserved_bytes_; }
  uint64_t allocated_bytes() const { return allocated_bytes_; }

 private:
  // Base of the known segment (or mapped range) holding `ptr`, or 0.
  DevicePtr SegmentOf(DevicePtr ptr) const;
  void RemoveRange(DevicePtr begin, uint64_t bytes);
  // Every field of *event for an alloc, free_requested or free_completed entry.
  void FillBlockEvent(EventKind kind, const NativeTraceEntry& entry, AllocatorEvent* event) const;
  // Address, size, pool and flags of a segment event (alloc/free, or map/unmap if expandable).
  void FillSegment(const NativeTraceEntry& entry, bool expandable, AllocatorEvent* event) const;

  AllocatorOptions options_;
  uint64_t device_total_bytes_;
  // Known segments and mapped ranges: base -> bytes. Invariant: ranges do not overlap.
  std::map<DevicePtr, uint64_t> segments_;
  uint64_t reserved_bytes_ = 0;
  uint64_t allocated_bytes_ = 0;
};

}  // namespace fragscope::hooks
