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
//     verify` then takes the size as a lower bound). The pool follows from the rounded size.
//     The segment is left 0 (Note [No segment in observed block events]).
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
//
// Note [No segment in observed block events]
// A block event's `segment` word would be the base of the logged segment holding the block, which
// follows from the log's own earlier segment events: the reader can work it out exactly, and the
// replay does not use it. Looking it up in the hook cost more than PyTorch spends on the whole
// entry: a std::map of the segments cost ~100 ns per event with 4096 segments, and a hash of
// 2 MiB pages still ~60 (bench/observe_tracker_benchmark's random mix, a cache miss or more per
// lookup), against ~23 ns for PyTorch's own history ring. So observed block events carry segment 0
// ("not recorded"), as blocks of segments allocated before observing always did.
//
// Running totals start at zero when observing starts: attach before the first allocation for an
// exact picture (after torch.cuda.init(), before the model is built).
#pragma once

#include <cstdint>

#include "allocator/allocator_events.h"
#include "allocator/allocator_options.h"
#include "allocator/size_policy.h"

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
  // Inline: the block events are the observe hook's hot path.
  bool Convert(const NativeTraceEntry& entry, AllocatorEvent* event) {
    switch (entry.action) {  // the block events, one per allocation or free
      case NativeTraceAction::kAlloc:
        FillBlockEvent(EventKind::kAlloc, entry, event);
        allocated_bytes_ += event->bytes;
        return true;
      case NativeTraceAction::kFreeRequested:
        FillBlockEvent(EventKind::kFreeRequested, entry, event);
        allocated_bytes_ = SaturatingSub(allocated_bytes_, event->bytes);
        return true;
      case NativeTraceAction::kFreeCompleted:
        FillBlockEvent(EventKind::kFreeCompleted, entry, event);
        return true;
      default:
        return ConvertSegmentOrOom(entry, event);
    }
  }

  uint64_t reserved_bytes() const { return reserved_bytes_; }
  uint64_t allocated_bytes() const { return allocated_bytes_; }

 private:
  static uint64_t SaturatingSub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
  bool ConvertSegmentOrOom(const NativeTraceEntry& entry, AllocatorEvent* event);
  // Every field of *event for an alloc, free_requested or free_completed entry.
  void FillBlockEvent(EventKind kind, const NativeTraceEntry& entry, AllocatorEvent* event) const {
    const uint64_t rounded = entry.size == 0 ? 0 : RoundSize(entry.size, options_);
    uint8_t flags = kEventFlagSizeInferred;
    if (options_.max_split_size_set() && rounded >= options_.max_split_size_bytes &&
        kind != EventKind::kFreeCompleted) {
      flags |= kEventFlagOversize;
    }
    // Every field stored once, in place: zero-initializing the whole struct first compiles to
    // `rep stos`, and a temporary copied into *event reloads its fresh narrow stores as 16-byte
    // loads (store-forwarding stalls); bench/fslog_benchmark BM_ObservedNativePairBurst.
    event->kind = kind;
    event->pool = PoolFor(rounded);
    event->flags = flags;
    event->merged_count = 0;
    event->device = entry.device;
    event->ptr = entry.addr;
    event->bytes = rounded;
    event->requested_bytes = entry.size;
    event->stream = entry.stream;
    event->segment = 0;  // Note [No segment in observed block events]
    event->split_bytes = 0;
    event->result_bytes = 0;
    event->device_free_bytes = 0;
    event->device_total_bytes = 0;
    event->reserved_bytes = 0;
    event->allocated_bytes = 0;
  }
  // Address, size, pool and flags of a segment event (alloc/free, or map/unmap if expandable).
  void FillSegment(const NativeTraceEntry& entry, bool expandable, AllocatorEvent* event) const;

  AllocatorOptions options_;
  uint64_t device_total_bytes_;
  uint64_t reserved_bytes_ = 0;
  uint64_t allocated_bytes_ = 0;
};

}  // namespace fragscope::hooks
