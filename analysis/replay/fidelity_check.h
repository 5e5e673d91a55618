// FidelityChecker: compares a replay's allocator decisions with the trace's own, for
// `fragscope verify` (DESIGN.md: "replaying PyTorch's own alloc/free sequence must reproduce
// PyTorch's own segment events; the first divergence is reported").
//
// Compared, in order: segment_alloc / segment_free / segment_map / segment_unmap (address and
// size: for expandable segments, the pages mapped or unmapped), oom (rounded size), and the
// address of every allocation (and its block size when the trace records it, as .fslog does). The
// trace's events are queued as they are read and the replay's as the allocator emits them; after
// each user-level operation both queues must agree. The first disagreement is the divergence: the
// trace event index, what the trace says, what the replay did, and the last few trace events before
// it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "analysis/replay/replay.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

struct Divergence {
  uint64_t event_index = 0;
  // The decisions' kinds (nullopt: none was made there), and each in words.
  std::optional<EventKind> expected_kind;
  std::optional<EventKind> got_kind;
  std::string expected;              // what the trace did
  std::string got;                   // what the replay did
  std::vector<std::string> context;  // the trace events just before, oldest first
};

struct FidelityCounts {
  uint64_t segment_events = 0;  // the four kinds below together
  uint64_t segment_allocs = 0;
  uint64_t segment_frees = 0;
  uint64_t segment_maps = 0;
  uint64_t segment_unmaps = 0;
  uint64_t allocations = 0;
  uint64_t ooms = 0;
};

class FidelityChecker final : public ReplayHooks {
 public:
  static constexpr size_t kContextEvents = 6;

  void OnTraceEvent(const TraceEvent& event) override;
  void OnAllocatorEvent(const AllocatorEvent& event) override;
  void OnOpDone(const TraceEvent& event) override;
  void OnFinish() override { Compare(/*strict=*/true, nullptr); }
  bool Stop() const override { return divergence_.has_value(); }

  const std::optional<Divergence>& divergence() const { return divergence_; }
  const FidelityCounts& counts() const { return counts_; }

 private:
  struct Decision {
    EventKind kind;
    DevicePtr ptr;
    uint64_t bytes;  // 0 = not recorded
    bool at_least;   // bytes is a lower bound (kEventFlagSizeInferred)
    uint64_t index;  // trace index (expected side)
    PoolId pool_id;  // the private pool ((0, 0): the default pool)
  };
  void Compare(bool strict, const TraceEvent* op);
  void Diverge(uint64_t index, std::optional<EventKind> expected_kind, std::string expected,
               std::optional<EventKind> got_kind, std::string got);

  std::deque<Decision> expected_;
  std::deque<Decision> actual_;
  std::deque<std::string> context_;
  std::optional<Divergence> divergence_;
  FidelityCounts counts_;
};

// "alloc 4.00 MiB (4194304 bytes requested) at 0x7f00 on stream 0", for messages.
std::string DescribeTraceEvent(const TraceEvent& event);

}  // namespace fragscope
