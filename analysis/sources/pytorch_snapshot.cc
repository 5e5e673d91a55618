// Import: PickleValue tree -> PyTorchSnapshot. Export lives in pytorch_snapshot_export.cc.
#include "analysis/sources/pytorch_snapshot.h"

#include <array>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope {
namespace {

using pickle::PickleKind;
using pickle::PickleRef;
using pickle::PickleValue;
using IntPair = std::pair<int64_t, int64_t>;

constexpr std::array<std::pair<TraceAction, std::string_view>, 10> kActionNames = {{
    {TraceAction::kAlloc, "alloc"},
    {TraceAction::kFreeRequested, "free_requested"},
    {TraceAction::kFreeCompleted, "free_completed"},
    {TraceAction::kSegmentAlloc, "segment_alloc"},
    {TraceAction::kSegmentFree, "segment_free"},
    {TraceAction::kSegmentMap, "segment_map"},
    {TraceAction::kSegmentUnmap, "segment_unmap"},
    {TraceAction::kSnapshot, "snapshot"},
    {TraceAction::kOom, "oom"},
    {TraceAction::kAnnotate, "annotate"},
}};

// Optional typed fields: std::nullopt when the key is absent, an error when the type is wrong.
template <typename T, typename Getter>
absl::StatusOr<std::optional<T>> Optional(const PickleRef& dict, std::string_view key,
                                          Getter getter) {
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> field, dict.OptionalField(key));
  if (!field.has_value()) return std::optional<T>();
  FRAGSCOPE_ASSIGN_OR_RETURN(T value, getter(*field));
  return std::optional<T>(std::move(value));
}
auto OptInt(const PickleRef& d, std::string_view key) {
  return Optional<int64_t>(d, key, [](const PickleRef& r) { return r.Int(); });
}
auto OptUInt(const PickleRef& d, std::string_view key) {
  return Optional<uint64_t>(d, key, [](const PickleRef& r) { return r.UInt(); });
}
auto OptBool(const PickleRef& d, std::string_view key) {
  return Optional<bool>(d, key, [](const PickleRef& r) { return r.Bool(); });
}
auto OptFloat(const PickleRef& d, std::string_view key) {
  return Optional<double>(d, key, [](const PickleRef& r) { return r.Float(); });
}
auto OptStr(const PickleRef& d, std::string_view key) {
  return Optional<std::string>(d, key, [](const PickleRef& r) -> absl::StatusOr<std::string> {
    FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view s, r.Str());
    return std::string(s);
  });
}

// A (int, int) tuple, as segment_pool_id and pool_id are.
absl::StatusOr<IntPair> ReadIntPair(const PickleRef& ref) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t length, ref.Length());
  if (length != 2) return ref.Error(absl::StrFormat("expected 2 ints, got %d items", length));
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef first, ref.Element(0));
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef second, ref.Element(1));
  FRAGSCOPE_ASSIGN_OR_RETURN(const int64_t a, first.Int());
  FRAGSCOPE_ASSIGN_OR_RETURN(const int64_t b, second.Int());
  return std::make_pair(a, b);
}
auto OptIntPair(const PickleRef& d, std::string_view key) {
  return Optional<IntPair>(d, key, ReadIntPair);
}

class Importer {
 public:
  explicit Importer(const SnapshotImportOptions& options) : max_items_(options.max_items) {}
  absl::StatusOr<PyTorchSnapshot> Run(const PickleValue& root_value);

 private:
  absl::StatusOr<FrameStack> Frames(const PickleRef& list);
  absl::StatusOr<FrameStack> OptFrames(const PickleRef& dict, std::string_view key);
  absl::StatusOr<SnapshotSegment> Segment(const PickleRef& seg);
  absl::StatusOr<SnapshotBlock> Block(const PickleRef& b, uint64_t address);
  absl::StatusOr<SnapshotTraceEntry> Trace(const PickleRef& e);
  absl::StatusOr<SnapshotAllocatorSettings> Settings(const PickleRef& s);

  // Counts converted items against SnapshotImportOptions::max_items.
  absl::Status Count(const PickleRef& where, size_t n) {
    items_ += n;
    if (items_ <= max_items_) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: snapshot has more than %d segments, blocks, trace entries and frames",
                        where.Path(), max_items_));
  }

  // Frames lists by identity, so that stacks shared in the pickle stay shared.
  absl::flat_hash_map<const void*, FrameStack> frames_;
  size_t max_items_;
  size_t items_ = 0;
};

absl::StatusOr<FrameStack> Importer::Frames(const PickleRef& list) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t length, list.Length());
  const void* identity = list.value().identity();
  if (auto it = frames_.find(identity); it != frames_.end()) return it->second;
  FRAGSCOPE_RETURN_IF_ERROR(Count(list, length));
  auto frames = std::make_shared<std::vector<SnapshotFrame>>();
  frames->reserve(length);
  for (size_t i = 0; i < length; ++i) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef f, list.Element(i));
    SnapshotFrame frame;
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef filename, f.Field("filename"));
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef line, f.Field("line"));
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef name, f.Field("name"));
    FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view filename_text, filename.Str());
    FRAGSCOPE_ASSIGN_OR_RETURN(frame.line, line.Int());
    FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view name_text, name.Str());
    frame.filename = std::string(filename_text);
    frame.name = std::string(name_text);
    frames->push_back(std::move(frame));
  }
  FrameStack shared = std::move(frames);
  frames_.emplace(identity, shared);
  return shared;
}

absl::StatusOr<FrameStack> Importer::OptFrames(const PickleRef& dict, std::string_view key) {
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> list, dict.OptionalField(key));
  if (!list.has_value()) return FrameStack();
  return Frames(*list);
}

absl::StatusOr<SnapshotBlock> Importer::Block(const PickleRef& b, uint64_t address) {
  SnapshotBlock block;
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef size, b.Field("size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(block.size, size.UInt());
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<uint64_t> addr, OptUInt(b, "address"));
  block.address = addr.value_or(address);  // 2.0 snapshots carry no block addresses
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef state_ref, b.Field("state"));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view state, state_ref.Str());
  if (state == "active_allocated") {
    block.state = BlockState::kActiveAllocated;
  } else if (state == "active_pending_free" || state == "active_awaiting_free") {
    block.state = BlockState::kActivePendingFree;  // the docstring's name is the second one
  } else if (state == "inactive") {
    block.state = BlockState::kInactive;
  } else {
    return state_ref.Error(absl::StrFormat("unknown block state '%s'", state));
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<uint64_t> requested, OptUInt(b, "requested_size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> history, b.OptionalField("history"));
  if (b.value().Find("frames") == nullptr && history.has_value()) {
    // PyTorch 2.0: {'history': [{'addr', 'real_size', 'frames'}, ...]}, newest first.
    FRAGSCOPE_ASSIGN_OR_RETURN(const size_t entries, history->Length());
    if (entries > 0) {
      FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef h0, history->Element(0));
      FRAGSCOPE_ASSIGN_OR_RETURN(block.frames, OptFrames(h0, "frames"));
      if (!requested.has_value()) {
        FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef real_size, h0.Field("real_size"));
        FRAGSCOPE_ASSIGN_OR_RETURN(requested, real_size.UInt());
      }
    }
  } else {
    FRAGSCOPE_ASSIGN_OR_RETURN(block.frames, OptFrames(b, "frames"));
  }
  block.requested_size = requested.value_or(block.size);
  return block;
}

absl::StatusOr<SnapshotSegment> Importer::Segment(const PickleRef& s) {
  SnapshotSegment seg;
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef device, s.Field("device"));
  FRAGSCOPE_ASSIGN_OR_RETURN(seg.device, device.Int());
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef address, s.Field("address"));
  FRAGSCOPE_ASSIGN_OR_RETURN(seg.address, address.UInt());
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef total_size, s.Field("total_size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(seg.total_size, total_size.UInt());
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef stream, s.Field("stream"));
  FRAGSCOPE_ASSIGN_OR_RETURN(seg.stream, stream.Int());
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> type, OptStr(s, "segment_type"));
  if (type.has_value() && *type != "large" && *type != "small") {
    return s.Error(absl::StrFormat("unknown segment_type '%s'", *type));
  }
  seg.is_large = type.value_or("large") == "large";
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<IntPair> pool, OptIntPair(s, "segment_pool_id"));
  seg.pool_id = pool.value_or(std::make_pair(int64_t{0}, int64_t{0}));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<bool> expandable, OptBool(s, "is_expandable"));
  seg.is_expandable = expandable.value_or(false);
  FRAGSCOPE_ASSIGN_OR_RETURN(seg.frames, OptFrames(s, "frames"));

  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef blocks, s.Field("blocks"));
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t count, blocks.Length());
  FRAGSCOPE_RETURN_IF_ERROR(Count(blocks, count + 1));
  seg.blocks.reserve(count);
  uint64_t address_cursor = seg.address;
  uint64_t allocated = 0;
  uint64_t active = 0;
  uint64_t requested = 0;
  for (size_t i = 0; i < count; ++i) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef b, blocks.Element(i));
    FRAGSCOPE_ASSIGN_OR_RETURN(SnapshotBlock block, Block(b, address_cursor));
    address_cursor = block.address + block.size;
    if (block.state == BlockState::kActiveAllocated) allocated += block.size;
    if (block.state != BlockState::kInactive) {
      active += block.size;
      requested += block.requested_size;
    }
    seg.blocks.push_back(std::move(block));
  }
  // Sizes that old snapshots lack are the sums PyTorch would have written.
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<uint64_t> allocated_size, OptUInt(s, "allocated_size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<uint64_t> active_size, OptUInt(s, "active_size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<uint64_t> requested_size, OptUInt(s, "requested_size"));
  seg.allocated_size = allocated_size.value_or(allocated);
  seg.active_size = active_size.value_or(active);
  seg.requested_size = requested_size.value_or(requested);
  return seg;
}

absl::StatusOr<SnapshotTraceEntry> Importer::Trace(const PickleRef& e) {
  SnapshotTraceEntry entry;
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef action_ref, e.Field("action"));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::string_view action, action_ref.Str());
  entry.action = TraceActionFromName(action);
  if (entry.action == TraceAction::kUnknown) entry.unknown_action = std::string(action);
  if (entry.action == TraceAction::kOom) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef device_free, e.Field("device_free"));
    FRAGSCOPE_ASSIGN_OR_RETURN(entry.device_free, device_free.UInt());
  } else {
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef addr, e.Field("addr"));
    FRAGSCOPE_ASSIGN_OR_RETURN(entry.addr, addr.UInt());
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef size, e.Field("size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(entry.size, size.UInt());
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<int64_t> stream, OptInt(e, "stream"));
  entry.stream = stream.value_or(0);
  FRAGSCOPE_ASSIGN_OR_RETURN(entry.time_us, OptInt(e, "time_us"));
  FRAGSCOPE_ASSIGN_OR_RETURN(entry.frames, OptFrames(e, "frames"));
  FRAGSCOPE_ASSIGN_OR_RETURN(entry.compile_context, OptStr(e, "compile_context"));
  FRAGSCOPE_ASSIGN_OR_RETURN(entry.user_metadata, OptStr(e, "user_metadata"));
  FRAGSCOPE_ASSIGN_OR_RETURN(entry.pool_id, OptIntPair(e, "pool_id"));
  return entry;
}

absl::StatusOr<SnapshotAllocatorSettings> Importer::Settings(const PickleRef& s) {
  SnapshotAllocatorSettings out;
  FRAGSCOPE_ASSIGN_OR_RETURN(out.alloc_conf, OptStr(s, "PYTORCH_CUDA_ALLOC_CONF"));
  if (!out.alloc_conf.has_value()) {
    FRAGSCOPE_ASSIGN_OR_RETURN(out.alloc_conf, OptStr(s, "PYTORCH_ALLOC_CONF"));
    if (out.alloc_conf.has_value()) out.alloc_conf_key = "PYTORCH_ALLOC_CONF";
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(out.max_split_size, OptInt(s, "max_split_size"));
  FRAGSCOPE_ASSIGN_OR_RETURN(out.garbage_collection_threshold,
                             OptFloat(s, "garbage_collection_threshold"));
  FRAGSCOPE_ASSIGN_OR_RETURN(out.expandable_segments, OptBool(s, "expandable_segments"));
  FRAGSCOPE_ASSIGN_OR_RETURN(out.pinned_num_register_threads,
                             OptInt(s, "pinned_num_register_threads"));
  FRAGSCOPE_ASSIGN_OR_RETURN(out.release_lock_on_cudamalloc,
                             OptBool(s, "release_lock_on_cudamalloc"));
  FRAGSCOPE_ASSIGN_OR_RETURN(out.pinned_use_cuda_host_register,
                             OptBool(s, "pinned_use_cuda_host_register"));
  FRAGSCOPE_ASSIGN_OR_RETURN(out.graph_capture_record_stream_reuse,
                             OptBool(s, "graph_capture_record_stream_reuse"));
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> roundup,
                             s.OptionalField("roundup_power2_divisions"));
  if (roundup.has_value()) {
    if (roundup->kind() != PickleKind::kDict) return roundup->TypeError("dict");
    std::vector<std::pair<std::string, int64_t>> divisions;
    for (const auto& [key, value] : roundup->value().entries()) {
      if (key.kind() != PickleKind::kString) return roundup->Error("expected str keys");
      FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef v, roundup->Field(key.string_value()));
      FRAGSCOPE_ASSIGN_OR_RETURN(const int64_t n, v.Int());
      divisions.emplace_back(key.string_value(), n);
    }
    out.roundup_power2_divisions = std::move(divisions);
  }
  return out;
}

absl::StatusOr<PyTorchSnapshot> Importer::Run(const PickleValue& root_value) {
  PyTorchSnapshot snapshot;
  const PickleRef root(root_value);
  // torch.cuda.memory_snapshot() pickles just the segments list.
  const PickleValue wrapped =
      root_value.kind() == PickleKind::kList
          ? PickleValue::Dict({{PickleValue::String("segments"), root_value}})
          : root_value;
  const PickleRef top(wrapped);
  if (top.kind() != PickleKind::kDict) return root.TypeError("dict");
  FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef segments, top.Field("segments"));
  FRAGSCOPE_ASSIGN_OR_RETURN(const size_t segment_count, segments.Length());
  snapshot.segments.reserve(segment_count);
  for (size_t i = 0; i < segment_count; ++i) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef seg, segments.Element(i));
    FRAGSCOPE_ASSIGN_OR_RETURN(SnapshotSegment segment, Segment(seg));
    snapshot.segments.push_back(std::move(segment));
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> traces, top.OptionalField("device_traces"));
  if (traces.has_value()) {
    FRAGSCOPE_ASSIGN_OR_RETURN(const size_t devices, traces->Length());
    snapshot.device_traces.resize(devices);
    for (size_t d = 0; d < devices; ++d) {
      FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef trace, traces->Element(d));
      FRAGSCOPE_ASSIGN_OR_RETURN(const size_t entries, trace.Length());
      FRAGSCOPE_RETURN_IF_ERROR(Count(trace, entries));
      snapshot.device_traces[d].reserve(entries);
      for (size_t i = 0; i < entries; ++i) {
        FRAGSCOPE_ASSIGN_OR_RETURN(const PickleRef e, trace.Element(i));
        FRAGSCOPE_ASSIGN_OR_RETURN(SnapshotTraceEntry entry, Trace(e));
        snapshot.device_traces[d].push_back(std::move(entry));
      }
    }
  }
  FRAGSCOPE_ASSIGN_OR_RETURN(std::optional<PickleRef> settings,
                             top.OptionalField("allocator_settings"));
  if (settings.has_value()) {
    FRAGSCOPE_ASSIGN_OR_RETURN(snapshot.allocator_settings, Settings(*settings));
  }
  if (const PickleValue* annotations = wrapped.Find("external_annotations")) {
    snapshot.external_annotations = *annotations;
  }
  return snapshot;
}

}  // namespace

TraceAction TraceActionFromName(std::string_view name) {
  for (const auto& [value, action_name] : kActionNames) {
    if (action_name == name) return value;
  }
  return TraceAction::kUnknown;
}

std::string_view TraceActionName(TraceAction action) {
  for (const auto& [value, name] : kActionNames) {
    if (value == action) return name;
  }
  return "unknown";
}

absl::StatusOr<PyTorchSnapshot> SnapshotFromPickle(const pickle::PickleValue& root,
                                                   const SnapshotImportOptions& options) {
  return Importer(options).Run(root);
}

}  // namespace fragscope
