// Export: PyTorchSnapshot -> PickleValue tree (the dict PyTorch builds), invariant checks, files.
#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"
#include "analysis/sources/pickle/pickle_reader.h"
#include "analysis/sources/pickle/pickle_writer.h"
#include "analysis/sources/pytorch_snapshot.h"

namespace fragscope {
namespace {

using pickle::PickleValue;

PickleValue Uint(uint64_t v) { return PickleValue::Int(static_cast<int64_t>(v)); }

PickleValue Pair(const std::pair<int64_t, int64_t>& p) {
  return PickleValue::Tuple({PickleValue::Int(p.first), PickleValue::Int(p.second)});
}

class Exporter {
 public:
  PickleValue Run(const PyTorchSnapshot& snapshot);

 private:
  // One PickleValue per distinct string, so that the tree shares key names and frame text.
  PickleValue Str(std::string_view s) {
    auto it = strings_.find(s);
    if (it == strings_.end()) {
      PickleValue v = PickleValue::String(std::string(s));
      it = strings_.emplace(std::string_view(v.string_value()), v).first;
    }
    return it->second;
  }
  void Add(PickleValue::Entries& d, std::string_view key, PickleValue value) {
    d.emplace_back(Str(key), std::move(value));
  }
  // memory_viz reads 'frames' on segments, blocks and trace entries; an unknown stack is [].
  PickleValue Frames(const FrameStack& frames);
  PickleValue Segment(const SnapshotSegment& seg);
  PickleValue Trace(const SnapshotTraceEntry& e);
  PickleValue Settings(const SnapshotAllocatorSettings& s);

  absl::flat_hash_map<std::string_view, PickleValue> strings_;
  absl::flat_hash_map<const void*, PickleValue> frames_;
  PickleValue empty_frames_ = PickleValue::List({});
};

PickleValue Exporter::Frames(const FrameStack& frames) {
  if (frames == nullptr) return empty_frames_;
  auto it = frames_.find(frames.get());
  if (it != frames_.end()) return it->second;
  PickleValue::Items items;
  items.reserve(frames->size());
  for (const SnapshotFrame& f : *frames) {
    PickleValue::Entries d;
    Add(d, "filename", Str(f.filename));
    Add(d, "line", PickleValue::Int(f.line));
    Add(d, "name", Str(f.name));
    items.push_back(PickleValue::Dict(std::move(d)));
  }
  PickleValue list = PickleValue::List(std::move(items));
  frames_.emplace(frames.get(), list);
  return list;
}

PickleValue Exporter::Segment(const SnapshotSegment& seg) {
  PickleValue::Entries d;
  Add(d, "device", PickleValue::Int(seg.device));
  Add(d, "address", Uint(seg.address));
  Add(d, "total_size", Uint(seg.total_size));
  Add(d, "allocated_size", Uint(seg.allocated_size));
  Add(d, "active_size", Uint(seg.active_size));
  Add(d, "requested_size", Uint(seg.requested_size));
  Add(d, "stream", PickleValue::Int(seg.stream));
  Add(d, "segment_type", Str(seg.is_large ? "large" : "small"));
  Add(d, "segment_pool_id", Pair(seg.pool_id));
  Add(d, "is_expandable", PickleValue::Bool(seg.is_expandable));
  Add(d, "frames", Frames(seg.frames));
  PickleValue::Items blocks;
  blocks.reserve(seg.blocks.size());
  for (const SnapshotBlock& b : seg.blocks) {
    PickleValue::Entries bd;
    Add(bd, "address", Uint(b.address));
    Add(bd, "size", Uint(b.size));
    Add(bd, "requested_size", Uint(b.requested_size));
    Add(bd, "state", Str(BlockStateName(b.state)));
    Add(bd, "frames", Frames(b.frames));
    blocks.push_back(PickleValue::Dict(std::move(bd)));
  }
  Add(d, "blocks", PickleValue::List(std::move(blocks)));
  return PickleValue::Dict(std::move(d));
}

PickleValue Exporter::Trace(const SnapshotTraceEntry& e) {
  PickleValue::Entries d;
  Add(d, "action",
      Str(e.action == TraceAction::kUnknown ? e.unknown_action : TraceActionName(e.action)));
  if (e.action == TraceAction::kOom) {
    Add(d, "device_free", Uint(e.device_free));
  } else {
    Add(d, "addr", Uint(e.addr));
  }
  Add(d, "size", Uint(e.size));
  Add(d, "stream", PickleValue::Int(e.stream));
  if (e.time_us.has_value()) Add(d, "time_us", PickleValue::Int(*e.time_us));
  if (e.compile_context.has_value()) Add(d, "compile_context", Str(*e.compile_context));
  if (e.user_metadata.has_value()) Add(d, "user_metadata", Str(*e.user_metadata));
  if (e.pool_id.has_value()) Add(d, "pool_id", Pair(*e.pool_id));
  Add(d, "frames", Frames(e.frames));
  return PickleValue::Dict(std::move(d));
}

PickleValue Exporter::Settings(const SnapshotAllocatorSettings& s) {
  PickleValue::Entries d;
  if (s.alloc_conf.has_value()) Add(d, s.alloc_conf_key, Str(*s.alloc_conf));
  if (s.max_split_size.has_value()) Add(d, "max_split_size", PickleValue::Int(*s.max_split_size));
  if (s.garbage_collection_threshold.has_value()) {
    Add(d, "garbage_collection_threshold", PickleValue::Float(*s.garbage_collection_threshold));
  }
  const auto add_bool = [&](std::string_view key, const std::optional<bool>& v) {
    if (v.has_value()) Add(d, key, PickleValue::Bool(*v));
  };
  add_bool("expandable_segments", s.expandable_segments);
  if (s.pinned_num_register_threads.has_value()) {
    Add(d, "pinned_num_register_threads", PickleValue::Int(*s.pinned_num_register_threads));
  }
  add_bool("release_lock_on_cudamalloc", s.release_lock_on_cudamalloc);
  add_bool("pinned_use_cuda_host_register", s.pinned_use_cuda_host_register);
  if (s.roundup_power2_divisions.has_value()) {
    PickleValue::Entries divisions;
    for (const auto& [key, n] : *s.roundup_power2_divisions) {
      divisions.emplace_back(Str(key), PickleValue::Int(n));
    }
    Add(d, "roundup_power2_divisions", PickleValue::Dict(std::move(divisions)));
  }
  add_bool("graph_capture_record_stream_reuse", s.graph_capture_record_stream_reuse);
  return PickleValue::Dict(std::move(d));
}

PickleValue Exporter::Run(const PyTorchSnapshot& snapshot) {
  PickleValue::Items segments;
  segments.reserve(snapshot.segments.size());
  for (const SnapshotSegment& seg : snapshot.segments) segments.push_back(Segment(seg));
  PickleValue::Items traces;
  for (const auto& device_trace : snapshot.device_traces) {
    PickleValue::Items entries;
    entries.reserve(device_trace.size());
    for (const SnapshotTraceEntry& e : device_trace) entries.push_back(Trace(e));
    traces.push_back(PickleValue::List(std::move(entries)));
  }
  PickleValue::Entries root;
  Add(root, "segments", PickleValue::List(std::move(segments)));
  Add(root, "device_traces", PickleValue::List(std::move(traces)));
  if (snapshot.allocator_settings.has_value()) {
    Add(root, "allocator_settings", Settings(*snapshot.allocator_settings));
  }
  if (!snapshot.external_annotations.is_none()) {
    Add(root, "external_annotations", snapshot.external_annotations);
  }
  return PickleValue::Dict(std::move(root));
}

}  // namespace

PickleValue SnapshotToPickle(const PyTorchSnapshot& snapshot) { return Exporter().Run(snapshot); }

absl::Status CheckSnapshotInvariants(const PyTorchSnapshot& snapshot) {
  for (size_t i = 0; i < snapshot.segments.size(); ++i) {
    const SnapshotSegment& seg = snapshot.segments[i];
    uint64_t address = seg.address;
    uint64_t allocated = 0;
    uint64_t active = 0;
    uint64_t requested = 0;
    for (size_t j = 0; j < seg.blocks.size(); ++j) {
      const SnapshotBlock& b = seg.blocks[j];
      if (b.address != address) {
        return absl::FailedPreconditionError(
            absl::StrFormat("segments[%d].blocks[%d]: address 0x%x, expected 0x%x (blocks must "
                            "tile the segment)",
                            i, j, b.address, address));
      }
      address += b.size;
      if (b.state == BlockState::kActiveAllocated) allocated += b.size;
      if (b.state != BlockState::kInactive) {
        active += b.size;
        requested += b.requested_size;
      }
    }
    const auto mismatch = [&](std::string_view what, uint64_t have, uint64_t sum) {
      return absl::FailedPreconditionError(
          absl::StrFormat("segments[%d]: %s is %d but its blocks sum to %d", i, what, have, sum));
    };
    if (address - seg.address != seg.total_size) {
      return mismatch("total_size", seg.total_size, address - seg.address);
    }
    if (allocated != seg.allocated_size)
      return mismatch("allocated_size", seg.allocated_size, allocated);
    if (active != seg.active_size) return mismatch("active_size", seg.active_size, active);
    if (requested != seg.requested_size) {
      return mismatch("requested_size", seg.requested_size, requested);
    }
  }
  return absl::OkStatus();
}

namespace {

// The snapshot in `root`, read from `file_bytes` bytes named `path`.
absl::StatusOr<PyTorchSnapshot> SnapshotOfPickle(const PickleValue& root, uint64_t file_bytes,
                                                 const std::string& path) {
  SnapshotImportOptions options;
  options.max_items =
      std::min<size_t>(options.max_items, std::max<size_t>(size_t{1} << 16, file_bytes));
  absl::StatusOr<PyTorchSnapshot> snapshot = SnapshotFromPickle(root, options);
  if (!snapshot.ok()) {
    return absl::Status(snapshot.status().code(),
                        absl::StrFormat("%s: %s", path, snapshot.status().message()));
  }
  return snapshot;
}

}  // namespace

absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotFile(const std::string& path) {
  std::error_code error;
  const uintmax_t file_bytes = std::filesystem::file_size(path, error);
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleValue root, pickle::ReadPickleFile(path));
  return SnapshotOfPickle(root, error ? uint64_t{1} << 16 : file_bytes, path);
}

absl::StatusOr<PyTorchSnapshot> ReadPyTorchSnapshotBytes(std::string_view bytes,
                                                         const std::string& name) {
  absl::StatusOr<PickleValue> root = pickle::ReadPickle(bytes);
  if (!root.ok()) {
    return absl::Status(root.status().code(),
                        absl::StrFormat("%s: %s", name, root.status().message()));
  }
  return SnapshotOfPickle(*root, bytes.size(), name);
}

absl::Status WritePyTorchSnapshotFile(const PyTorchSnapshot& snapshot, const std::string& path) {
  return pickle::WritePickleFile(SnapshotToPickle(snapshot), path);
}

}  // namespace fragscope
