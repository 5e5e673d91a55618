// PyTorchSnapshot: the typed form of a torch.cuda.memory._snapshot() dictionary, read from and
// written to the pickle that _dump_snapshot writes and memory_viz opens.
//
// The shape follows PyTorch's source (torch/csrc/cuda/Module.cpp and memory_snapshot.cpp, which
// build the dict, and torch/cuda/_memory_viz.py and torch/utils/viz/MemoryViz.js, which read it):
//
//   {'segments': [{'device', 'address', 'total_size', 'allocated_size', 'active_size',
//                  'requested_size', 'stream', 'segment_type', 'segment_pool_id', 'is_expandable',
//                  'frames', 'blocks': [{'address', 'size', 'requested_size', 'state',
//                  'frames'}]}],
//    'device_traces': [[{'action', 'addr' (or 'device_free' for oom), 'size', 'stream',
//                        'time_us', 'frames', 'compile_context', 'user_metadata'}]],   # per device
//    'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF', 'max_split_size', ...},
//    'external_annotations': [...]}
//
// Import is tolerant where PyTorch versions differ (old snapshots lack block addresses, frames,
// allocator_settings; 'history' lists carry the frames of 2.0 snapshots; newer versions add trace
// actions) and strict about types: a wrong type is an error naming its path, such as
// "segments[3].blocks[0].size: expected int, got str". Keys the model does not know are dropped.
//
// Export writes every key memory_viz reads, including the empty 'frames' lists it expects, so
// pytorch.org/memory_viz and `python -m torch.cuda._memory_viz` open the result.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator_snapshot.h"
#include "analysis/sources/pickle/pickle_value.h"

namespace fragscope {

// One frame of a captured stack: {'filename', 'line', 'name'}.
struct SnapshotFrame {
  std::string filename;
  int64_t line = 0;
  std::string name;
  friend bool operator==(const SnapshotFrame&, const SnapshotFrame&) = default;
};

// A stack, innermost frame first as PyTorch records it. Shared: PyTorch stores one list for all
// entries with the same stack, and the model keeps that sharing (import and export).
using FrameStack = std::shared_ptr<const std::vector<SnapshotFrame>>;

// Block states are allocator/allocator_snapshot.h's BlockState (PyTorch's three strings).

struct SnapshotBlock {
  uint64_t address = 0;         // segment address + sizes of the blocks before it
  uint64_t size = 0;            // rounded size
  uint64_t requested_size = 0;  // the caller's size (0 for inactive blocks)
  BlockState state = BlockState::kInactive;
  FrameStack frames;  // null: no stack recorded
};

struct SnapshotSegment {
  int64_t device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;      // sum of the blocks' sizes
  uint64_t allocated_size = 0;  // sum of active_allocated blocks
  uint64_t active_size = 0;     // allocated + pending free
  uint64_t requested_size = 0;  // sum of requested sizes of active blocks
  int64_t stream = 0;           // cudaStream_t as an integer; 0 = legacy default stream
  bool is_large = true;         // segment_type "large" (large pool) or "small"
  std::pair<int64_t, int64_t> pool_id = {0, 0};  // segment_pool_id; (0, 0) = default pool
  bool is_expandable = false;
  FrameStack frames;
  std::vector<SnapshotBlock> blocks;  // address order, contiguous from `address`
};

enum class TraceAction : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kSnapshot,
  kOom,
  kAnnotate,
  kUnknown,  // an action newer than this model; its name is kept in SnapshotTraceEntry
};

// "alloc", "free_requested", ...; the name of kUnknown is "unknown".
std::string_view TraceActionName(TraceAction action);
// The action of a name; kUnknown for names this model does not know.
TraceAction TraceActionFromName(std::string_view name);

struct SnapshotTraceEntry {
  TraceAction action = TraceAction::kAlloc;
  // A streamed read (ReadPyTorchSnapshotForReplay), which keeps no frames: the call site of them
  // (call_site_text.h), an id into PyTorchSnapshot::call_sites; 0 for none (no or empty
  // 'frames', or a whole read). Here rather than beside `frames`: it fills the padding after
  // `action`.
  uint32_t call_site = 0;
  std::string unknown_action;  // the action string when action == kUnknown
  uint64_t addr = 0;           // block or segment address; 0 for oom
  uint64_t device_free = 0;    // oom only: bytes cudaMemGetInfo reported free
  uint64_t size = 0;           // docs/pytorch_allocator_rules.md §6, per action
  int64_t stream = 0;
  std::optional<int64_t> time_us;  // Unix time in microseconds (PyTorch 2.1+)
  FrameStack frames;               // null: 'frames' absent, or not kept (a streamed read)
  std::optional<std::string> compile_context;
  std::optional<std::string> user_metadata;
  std::optional<std::pair<int64_t, int64_t>> pool_id;
};

// The 'allocator_settings' dict (PyTorch 2.3+). Every key is optional, to round-trip old files.
struct SnapshotAllocatorSettings {
  std::string alloc_conf_key = "PYTORCH_CUDA_ALLOC_CONF";  // or "PYTORCH_ALLOC_CONF"
  std::optional<std::string> alloc_conf;                   // the last settings string
  std::optional<int64_t> max_split_size;  // bytes; -1 (SIZE_MAX as int64) when unlimited
  std::optional<double> garbage_collection_threshold;
  std::optional<bool> expandable_segments;
  std::optional<int64_t> pinned_num_register_threads;
  std::optional<bool> release_lock_on_cudamalloc;
  std::optional<bool> pinned_use_cuda_host_register;
  // Interval start in MB ("1", "2", "4", ...) -> divisions, in file order.
  std::optional<std::vector<std::pair<std::string, int64_t>>> roundup_power2_divisions;
  std::optional<bool> graph_capture_record_stream_reuse;
};

struct PyTorchSnapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<std::vector<SnapshotTraceEntry>> device_traces;  // index = device
  std::optional<SnapshotAllocatorSettings> allocator_settings;
  // record_function annotations, passed through untouched; None when absent.
  pickle::PickleValue external_annotations;
  // A streamed read: the texts of the trace entries' call sites (SnapshotTraceEntry::call_site
  // - 1 -> text), each once. Not exported.
  std::vector<std::string> call_sites;
};

struct SnapshotImportOptions {
  // Most segments + blocks + trace entries + frames converted. A pickle can reference one large
  // dict from many places for a few bytes each, so without a bound the typed copy of a crafted
  // file could grow quadratically; ResourceExhausted when exceeded. ReadPyTorchSnapshotFile
  // lowers it to one item per byte of the file (real snapshots spend 15+ bytes per item).
  size_t max_items = size_t{1} << 26;
};

// Converts a decoded snapshot. A list at the root is accepted as the segments of
// torch.cuda.memory_snapshot() (as _memory_viz.py does).
absl::StatusOr<PyTorchSnapshot> SnapshotFromPickle(const pickle::PickleValue& root,
                                                   const SnapshotImportOptions& options = {});

// The dict PyTorch would have produced; equal stacks share one frames list.
pickle::PickleValue SnapshotToPickle(const PyTorchSnapshot& snapshot);

// Checks what memory_viz's tools assume of the segments: blocks tile each segment exactly from its
// address (`_memory_viz.py stats` asserts that the block sizes sum to total_size), and the
// segment's allocated, active and requested sizes are the sums over its blocks. Errors name the
// segment and block. Real snapshots satisfy it; call it on snapshots built by hand or by adapters.
absl::Status CheckSnapshotInvariants(const PyTorchSnapshot& snapshot);

// File helpers: pickle file <-> model. Written as pickle protocol 4.
absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotFile(const std::string& path);
// The same from a pickle in memory (a stream's copy); errors are prefixed with `name`.
absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotBytes(std::string_view bytes,
                                                         const std::string& name);
absl::Status WritePyTorchSnapshotFile(const PyTorchSnapshot& snapshot, const std::string& path);

// For replay (pytorch_snapshot_stream.cc): the same snapshot, read with bounded memory for
// gigabyte files. The file is mapped, not copied, and the pages behind the reader are released;
// the trace entries are converted as the pickle appends them (pickle::ReadPickleStreaming). Their
// 'frames' are not kept (null): each entry keeps the call site a report names of them
// (call_site_text.h), interned (SnapshotTraceEntry::call_site), which is worked out once per
// frames list and per frame dict, as PyTorch shares them through the pickle's memo. What stays is
// the typed entries, the distinct frames' texts, the memo (one slot per memoized object) and the
// rest of the snapshot. The frames are checked as the whole read checks them, with its errors. A
// pickle laid out so that its entries cannot be streamed (none that Python or LibTorch write) is
// read whole instead.
absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotForReplay(const std::string& path);
absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotBytesForReplay(std::string_view bytes,
                                                                  const std::string& name);

}  // namespace fragscope
