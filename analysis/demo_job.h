// DemoJob: runs the built-in transformer workload (demo_workload.h) through fragscope's
// allocator on a simulated device, the way a training job would run: every tensor allocation
// and free in order, markers at each phase, and death at the first out-of-memory error. An
// optional observer (an event-log writer) records it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "allocator/allocator_events.h"
#include "allocator/allocator_options.h"
#include "analysis/demo_workload.h"
#include "analysis/report/fslog_file_writer.h"

namespace fragscope {

struct DemoJobResult {
  bool completed = false;
  int steps_completed = 0;  // whole training steps done
  uint64_t ops = 0;         // workload ops executed
  std::string oom_phase;    // the phase the job died in
  std::string oom_message;  // PyTorch's OOM text
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
};

// Simulated time advances kDemoOpNs per workload op, so logs are deterministic.
inline constexpr uint64_t kDemoOpNs = 20'000;

// Runs `workload` on a device of `capacity_bytes` under `options`. With `log`, every allocator
// event and marker is written to it. Errors: internal only (the workload frees what it owns).
absl::StatusOr<DemoJobResult> RunDemoJob(const DemoWorkloadConfig& workload,
                                         const AllocatorOptions& options, uint64_t capacity_bytes,
                                         FslogFileWriter* log = nullptr);

}  // namespace fragscope
