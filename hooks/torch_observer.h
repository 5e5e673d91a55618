// Mode 2, observe: PyTorch keeps its own native CUDA caching allocator; fragscope logs its events.
//
//   fragscope::torch_hooks::ObserveNativeAllocator("/tmp/job.%r.%d.fslog");   // C++
//   fragscope.observe(log="/tmp/job.%r.%d.fslog")                             # Python
//
// How: c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker receives every TraceEntry
// (alloc, free_requested, free_completed, segment_alloc/free/map/unmap, oom, snapshot) of every
// device, even with memory history recording off, under the device's allocator lock. Each entry
// is converted (native_trace_converter.h) and appended to that device's .fslog writer, which never
// blocks or allocates on that path. attachOutOfMemoryObserver flushes the device's log when an OOM
// is about to be raised (the lock is released there), so the log is on disk before the exception
// can end the process. No allocation decision changes: the tracker only reads.
//
// Works after CUDA is initialized (it initializes CUDA's lazy state itself if needed, since the
// native allocator attaches trackers only to the devices it has set up) and for every device.
// Start it before the model is built: events before it are not in the log (running totals in oom
// records then start at zero). PyTorch offers no way to detach a tracker: observing lasts for the
// process; a second call with the same pattern is a no-op, with another pattern an error.
//
// What the log lacks in observe mode, compared with the replace mode: see
// native_trace_converter.h (block sizes are inferred, split flags and merge details are absent,
// empty_cache calls are not marked).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hooks/torch_trace_observer.h"

namespace fragscope::torch_hooks {

// Starts observing into `log_pattern` (%p pid, %r rank, %d device; "" = FRAGSCOPE_LOG).
// Errors: kInvalidArgument for a bad or missing pattern; kFailedPrecondition when the current
// allocator is not PyTorch's native one (a pluggable allocator, backend:cudaMallocAsync) or
// another pattern is already being observed into; kInternal for unexpected LibTorch errors.
absl::Status ObserveNativeAllocator(std::string_view log_pattern);

// The observer ObserveNativeAllocator attaches (every device set up, the current device's log
// open), made but not attached: for a caller that attaches its own tracker in front of it, as
// bench/gpu_history_overhead does to switch it on and off round by round. The same errors, but
// for "already observing".
absl::StatusOr<std::unique_ptr<TraceObserver>> MakeNativeObserver(std::string_view log_pattern);

// A marker in every observed device's log; no-op when not observing.
void ObserveMark(std::string_view text);
// The job's model as JSON (Note [Model records]) in the observer's logs.
void ObserveRecordModel(std::string_view json);

// Who holds the memory (Note [Context records] in fslog/fslog_context.h): a context's id, defined
// in the observer's logs (0 when not observing); and the context of the calling thread's
// allocations from now on, named in their alloc records by this library's writers.
uint32_t ObserveDefineContext(uint8_t role, std::string_view module, std::string_view op,
                              std::string_view site, bool backward);
void ObserveSetContext(uint32_t context);
// A tag record (Note [Tag records]) in the observed device's log: the live block at `ptr` is
// `role` (and `context`'s, when not 0) from now on. No-op when not observing that device.
void ObserveTagBlock(uint64_t ptr, int device, uint8_t role, uint32_t context);

// Writes every observed record to the files.
absl::Status ObserveFlush();

}  // namespace fragscope::torch_hooks
