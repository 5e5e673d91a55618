#include "analysis/sources/snapshot_source.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/allocator_options.h"
#include "allocator/size_policy.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "analysis/sources/settings_check.h"
#include "analysis/sources/snapshot_pool_ids.h"
#include "fslog/fslog_format.h"

namespace fragscope {
namespace {

// The settings as a PYTORCH_CUDA_ALLOC_CONF string: the recorded string when there is one, else
// rebuilt from the typed fields (older snapshots, or settings changed through the API).
std::string OptionsText(const PyTorchSnapshot& snapshot) {
  if (!snapshot.allocator_settings.has_value()) return "";
  const SnapshotAllocatorSettings& s = *snapshot.allocator_settings;
  if (s.alloc_conf.has_value() && !s.alloc_conf->empty()) return *s.alloc_conf;
  std::vector<std::string> parts;
  if (s.max_split_size.has_value() && *s.max_split_size > 0) {
    parts.push_back(absl::StrCat("max_split_size_mb:", *s.max_split_size / (1 << 20)));
  }
  if (s.garbage_collection_threshold.has_value() && *s.garbage_collection_threshold > 0) {
    parts.push_back(absl::StrCat("garbage_collection_threshold:", *s.garbage_collection_threshold));
  }
  if (s.expandable_segments.value_or(false)) parts.push_back("expandable_segments:True");
  return absl::StrJoin(parts, ",");
}

// Address ranges [start, end) by start: disjoint, and touching ones merged.
using RangeSet = std::map<DevicePtr, DevicePtr>;

void AddRange(RangeSet& set, DevicePtr start, DevicePtr end) {
  auto it = set.upper_bound(start);
  if (it != set.begin() && std::prev(it)->second >= start) {
    --it;
    start = it->first;
    end = std::max(end, it->second);
    it = set.erase(it);
  }
  while (it != set.end() && it->first <= end) {
    end = std::max(end, it->second);
    it = set.erase(it);
  }
  set.emplace(start, end);
}

void RemoveRange(RangeSet& set, DevicePtr start, DevicePtr end) {
  auto it = set.upper_bound(start);
  if (it != set.begin() && std::prev(it)->second > start) --it;
  while (it != set.end() && it->first < end) {
    const DevicePtr from = it->first;
    const DevicePtr to = it->second;
    it = set.erase(it);  // inserting below leaves `it` valid
    if (from < start) set.emplace(from, start);
    if (to > end) set.emplace(end, to);
  }
}

}  // namespace

std::vector<int> SnapshotTraceDevices(const PyTorchSnapshot& snapshot) {
  std::vector<int> devices;
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
    if (!snapshot.device_traces[d].empty()) devices.push_back(static_cast<int>(d));
  }
  return devices;
}

absl::StatusOr<std::unique_ptr<SnapshotSource>> SnapshotSource::Open(
    const std::string& path, const SnapshotSourceOptions& options) {
  absl::StatusOr<PyTorchSnapshot> snapshot = ReadPyTorchSnapshotFile(path);
  if (!snapshot.ok()) return snapshot.status();
  return FromSnapshot(std::make_shared<const PyTorchSnapshot>(std::move(*snapshot)), path, options);
}

absl::StatusOr<std::unique_ptr<SnapshotSource>> SnapshotSource::FromSnapshot(
    std::shared_ptr<const PyTorchSnapshot> snapshot, const std::string& path,
    const SnapshotSourceOptions& options) {
  auto source = std::unique_ptr<SnapshotSource>(new SnapshotSource());
  source->snapshot_ = std::move(snapshot);
  source->info_.path = path;
  if (absl::Status status = source->Init(options); !status.ok()) return status;
  return source;
}

absl::Status SnapshotSource::Init(const SnapshotSourceOptions& options) {
  const auto& traces = snapshot_->device_traces;
  std::vector<size_t> non_empty;
  for (size_t d = 0; d < traces.size(); ++d) {
    if (!traces[d].empty()) non_empty.push_back(d);
  }
  if (options.device >= 0) {
    device_ = static_cast<size_t>(options.device);
    if (device_ >= traces.size() || traces[device_].empty()) {
      return absl::NotFoundError(absl::StrFormat(
          "%s: no trace for device %d (the snapshot has traces for devices: %s)", info_.path,
          options.device, non_empty.empty() ? "none" : absl::StrJoin(non_empty, ", ")));
    }
  } else if (non_empty.size() > 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: mixed devices: the snapshot has traces for devices %s; choose one with --device N",
        info_.path, absl::StrJoin(non_empty, ", ")));
  } else if (non_empty.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the snapshot has no allocation history (device_traces is empty): record it with "
        "torch.cuda.memory._record_memory_history(enabled=\"all\") before the run",
        info_.path));
  } else {
    device_ = non_empty[0];
  }
  if (device_ > static_cast<size_t>(kMaxDeviceIndex)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: device_traces[%d] is not a CUDA device ordinal (0 to %d)", info_.path,
                        device_, kMaxDeviceIndex));
  }
  info_.format = TraceFormat::kPyTorchSnapshot;
  info_.device = static_cast<int32_t>(device_);
  info_.device_name = "CUDA device (PyTorch snapshot)";
  SetTraceSettings(info_, OptionsText(*snapshot_));
  if (snapshot_->allocator_settings.has_value()) {
    info_.recorded_settings = RecordedSettingsFromSnapshot(*snapshot_->allocator_settings);
  }
  info_.records_empty_cache = false;
  info_.records_free_completed = true;
  const auto& trace = traces[device_];
  for (const SnapshotTraceEntry& e : trace) {
    if (e.time_us.has_value()) {
      first_time_us_ = *e.time_us;
      info_.start_wall_ns = *e.time_us * 1000;
      break;
    }
  }
  for (const SnapshotTraceEntry& e : trace) {
    if (e.action == TraceAction::kSegmentMap || e.action == TraceAction::kSegmentUnmap) {
      info_.expandable_segments = true;
    }
  }
  for (const SnapshotSegment& s : snapshot_->segments) {
    if (s.is_expandable) info_.expandable_segments = true;
  }
  if (snapshot_->allocator_settings.has_value() &&
      snapshot_->allocator_settings->expandable_segments.value_or(false)) {
    info_.expandable_segments = true;
  }
  if (info_.expandable_segments) {
    // Replay with expandable segments even when the settings string does not say so (they were
    // changed through the API, or the snapshot predates the string).
    if (info_.settings.ok() && !info_.settings->expandable_segments) {
      info_.settings->expandable_segments = true;
      info_.allocator_options = FormatAllocatorOptions(*info_.settings);  // shown in reports
    }
  }
  ReconstructInitialState();
  pool_ids_ = TraceEntryPoolIds(*snapshot_, static_cast<int>(device_));
  sites_ = CollectSnapshotCallSites(*snapshot_, device_);
  InferCapacity();
  CollectAnnotations();
  return absl::OkStatus();
}

void SnapshotSource::ReconstructInitialState() {
  const auto& trace = snapshot_->device_traces[device_];
  const AllocatorOptions rounding = info_.settings.ok() ? *info_.settings : AllocatorOptions();
  // Rewind the final segments and allocated blocks through the trace, last entry first.
  // Expandable segments are mapped and unmapped page run by page run: their mapped ranges are
  // rewound as a set of ranges (a map removes its pages, an unmap restores them). What is left
  // was mapped before the trace; its reservation's base and unmapped holes are unknown, which is
  // why the replay does not rebuild it (Note [State before the trace] in replay.h).
  std::map<DevicePtr, InitialSegment> segments;
  std::map<DevicePtr, InitialBlock> blocks;
  RangeSet mapped;
  std::map<DevicePtr, std::pair<PoolKind, StreamId>> owners;  // pool and stream by range start
  for (const SnapshotSegment& s : snapshot_->segments) {
    if (s.device != static_cast<int64_t>(device_)) continue;
    const PoolKind pool = s.is_large ? PoolKind::kLarge : PoolKind::kSmall;
    if (s.is_expandable) {
      AddRange(mapped, s.address, s.address + s.total_size);
      owners[s.address] = {pool, static_cast<StreamId>(s.stream)};
    } else {
      segments[s.address] = InitialSegment{
          s.address, s.total_size, pool, static_cast<StreamId>(s.stream), {}, SegmentPoolId(s)};
    }
    for (const SnapshotBlock& b : s.blocks) {
      if (b.state == BlockState::kActiveAllocated) {
        blocks[b.address] = InitialBlock{b.address, b.size, b.requested_size};
      }
    }
  }
  for (auto it = trace.rbegin(); it != trace.rend(); ++it) {
    switch (it->action) {
      case TraceAction::kSegmentAlloc:
        segments.erase(it->addr);
        break;
      case TraceAction::kSegmentFree: {
        const PoolKind pool = it->size == kSmallBufferBytes ? PoolKind::kSmall : PoolKind::kLarge;
        segments[it->addr] =
            InitialSegment{it->addr, it->size, pool, static_cast<StreamId>(it->stream), {}};
        break;
      }
      case TraceAction::kSegmentMap:
        RemoveRange(mapped, it->addr, it->addr + it->size);
        // Small-pool maps are one 2 MiB page (a small request never needs more); for unmaps,
        // which can span pages, the pool is a guess (it only labels a range in a warning).
        owners.try_emplace(it->addr,
                           it->size == kSmallBufferBytes ? PoolKind::kSmall : PoolKind::kLarge,
                           static_cast<StreamId>(it->stream));
        break;
      case TraceAction::kSegmentUnmap:
        AddRange(mapped, it->addr, it->addr + it->size);
        owners.try_emplace(it->addr,
                           it->size == kSmallBufferBytes ? PoolKind::kSmall : PoolKind::kLarge,
                           static_cast<StreamId>(it->stream));
        break;
      case TraceAction::kAlloc:
        blocks.erase(it->addr);
        break;
      case TraceAction::kFreeRequested:
        blocks[it->addr] = InitialBlock{it->addr, RoundSize(it->size, rounding), it->size};
        break;
      default:
        break;
    }
  }
  for (const auto& [start, end] : mapped) {
    // The range that put `start` in the set began at or below it, in the same reservation.
    auto owner = owners.upper_bound(start);
    const auto [pool, stream] = owner == owners.begin() ? std::pair(PoolKind::kLarge, StreamId{0})
                                                        : std::prev(owner)->second;
    segments[start] = InitialSegment{start, end - start, pool, stream, {}};
  }
  for (auto& [address, block] : blocks) {
    auto seg = segments.upper_bound(address);
    if (seg == segments.begin()) continue;
    --seg;
    if (address >= seg->second.address + seg->second.size) continue;
    seg->second.allocated.push_back(block);
  }
  for (auto& [address, segment] : segments) info_.initial_segments.push_back(std::move(segment));
}

void SnapshotSource::InferCapacity() {
  // Snapshots record no capacity. At an OOM the device had device_free bytes free while the
  // allocator reserved the trace's running total: their sum is a lower bound of the capacity.
  uint64_t reserved = 0;
  for (const InitialSegment& s : info_.initial_segments) reserved += s.size;
  uint64_t capacity = 0;
  for (const SnapshotTraceEntry& e : snapshot_->device_traces[device_]) {
    if (e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap) {
      reserved += e.size;
    } else if (e.action == TraceAction::kSegmentFree || e.action == TraceAction::kSegmentUnmap) {
      reserved -= std::min(reserved, e.size);
    } else if (e.action == TraceAction::kOom) {
      capacity = std::max(capacity, e.device_free + reserved);
    }
  }
  if (capacity > 0) {
    info_.capacity_bytes = capacity;
    info_.capacity_source =
        "largest device free + reserved at an OOM (snapshots record no capacity)";
  }
}

std::vector<std::string> SnapshotSource::warnings() const {
  if (unknown_actions_ == 0) return {};
  return {absl::StrFormat(
      "%d trace %s with an action fragscope does not know (the first: '%s') skipped",
      unknown_actions_, unknown_actions_ == 1 ? "entry" : "entries", first_unknown_action_)};
}

void SnapshotSource::CollectAnnotations() {
  const pickle::PickleValue& list = snapshot_->external_annotations;
  if (list.kind() != pickle::PickleKind::kList) return;
  std::vector<std::string> open;
  for (const pickle::PickleValue& item : list.items()) {
    if (item.kind() != pickle::PickleKind::kDict) continue;
    const pickle::PickleValue* stage = item.Find("stage");
    const pickle::PickleValue* name = item.Find("name");
    const pickle::PickleValue* time = item.Find("time_us");
    const pickle::PickleValue* device = item.Find("device");
    if (stage == nullptr || name == nullptr || time == nullptr ||
        stage->kind() != pickle::PickleKind::kString ||
        name->kind() != pickle::PickleKind::kString || time->kind() != pickle::PickleKind::kInt) {
      continue;
    }
    if (device != nullptr && device->kind() == pickle::PickleKind::kInt &&
        device->int_value() != static_cast<int64_t>(device_)) {
      continue;
    }
    if (stage->string_value() == "START") {
      open.push_back(name->string_value());
    } else {
      auto it = std::find(open.rbegin(), open.rend(), name->string_value());
      if (it != open.rend()) open.erase(std::next(it).base());
    }
    annotations_.push_back({time->int_value(), open.empty() ? "" : open.back()});
  }
  std::stable_sort(annotations_.begin(), annotations_.end(),
                   [](const Annotation& a, const Annotation& b) { return a.time_us < b.time_us; });
}

double SnapshotSource::Progress() const {
  const size_t n = snapshot_->device_traces[device_].size();
  return n == 0 ? 1.0 : static_cast<double>(pos_) / static_cast<double>(n);
}

std::string SnapshotSource::ContextText() const {
  std::vector<std::string> parts;
  if (!region_.empty()) parts.push_back(region_);
  if (!user_metadata_.empty()) parts.push_back(absl::StrCat("user_metadata: ", user_metadata_));
  if (!compile_context_.empty()) {
    parts.push_back(absl::StrCat("compile_context: ", compile_context_));
  }
  return absl::StrJoin(parts, " | ");
}

void SnapshotSource::MakeMarker(TraceEvent* event, uint64_t index, int64_t time_us,
                                std::string text) const {
  *event = TraceEvent{};
  event->kind = EventKind::kMarker;
  event->index = index;
  event->time_ns = static_cast<uint64_t>(std::max<int64_t>(0, time_us - first_time_us_)) * 1000;
  event->text = text.empty() ? "(outside annotated regions)" : std::move(text);
}

absl::StatusOr<bool> SnapshotSource::Next(TraceEvent* event) {
  const auto& trace = snapshot_->device_traces[device_];
  while (pos_ < trace.size()) {
    const SnapshotTraceEntry& e = trace[pos_];
    const int64_t time_us = e.time_us.value_or(first_time_us_);
    if (next_annotation_ < annotations_.size() &&
        annotations_[next_annotation_].time_us <= time_us) {
      const Annotation& a = annotations_[next_annotation_++];
      region_ = a.text;
      MakeMarker(event, pos_, a.time_us, ContextText());
      return true;
    }
    if (e.action != TraceAction::kAnnotate) {
      // The entry's context: absent (older snapshots), "" and "N/A" all mean none.
      const std::string_view metadata =
          e.user_metadata.has_value() ? std::string_view(*e.user_metadata) : std::string_view();
      std::string_view compiled =
          e.compile_context.has_value() ? std::string_view(*e.compile_context) : std::string_view();
      if (compiled == "N/A") compiled = "";
      if (metadata != user_metadata_ || compiled != compile_context_) {
        user_metadata_ = std::string(metadata);
        compile_context_ = std::string(compiled);
        MakeMarker(event, pos_, time_us, ContextText());
        return true;
      }
    }
    ++pos_;
    EventKind kind;
    switch (e.action) {
      case TraceAction::kAlloc:
        kind = EventKind::kAlloc;
        break;
      case TraceAction::kFreeRequested:
        kind = EventKind::kFreeRequested;
        break;
      case TraceAction::kFreeCompleted:
        kind = EventKind::kFreeCompleted;
        break;
      case TraceAction::kSegmentAlloc:
        kind = EventKind::kSegmentAlloc;
        break;
      case TraceAction::kSegmentFree:
        kind = EventKind::kSegmentFree;
        break;
      case TraceAction::kSegmentMap:
        kind = EventKind::kSegmentMap;
        break;
      case TraceAction::kSegmentUnmap:
        kind = EventKind::kSegmentUnmap;
        break;
      case TraceAction::kOom:
        kind = EventKind::kOom;
        break;
      case TraceAction::kAnnotate:
        MakeMarker(event, pos_ - 1, time_us,
                   e.user_metadata.has_value() && !e.user_metadata->empty() ? *e.user_metadata
                                                                            : "annotate");
        return true;
      case TraceAction::kUnknown:
        if (unknown_actions_++ == 0) first_unknown_action_ = e.unknown_action;
        continue;
      default:
        continue;  // snapshot: nothing the allocator did
    }
    *event = TraceEvent{};
    event->kind = kind;
    event->index = pos_ - 1;
    event->time_ns = static_cast<uint64_t>(std::max<int64_t>(0, time_us - first_time_us_)) * 1000;
    event->stream = static_cast<StreamId>(e.stream);
    event->pool = e.size <= kSmallSizeBytes ? PoolKind::kSmall : PoolKind::kLarge;
    if (!pool_ids_.empty()) event->pool_id = pool_ids_[pos_ - 1];
    if (kind == EventKind::kOom) {
      event->bytes = e.size;
      event->requested_bytes = e.size;
      event->device_free_bytes = e.device_free;
    } else if (kind == EventKind::kAlloc || kind == EventKind::kFreeRequested ||
               kind == EventKind::kFreeCompleted) {
      event->ptr = e.addr;
      event->requested_bytes = e.size;
      if (kind == EventKind::kAlloc) event->site = sites_.Site(pos_ - 1);
    } else {
      event->ptr = e.addr;
      event->bytes = e.size;
      event->pool = e.size == kSmallBufferBytes ? PoolKind::kSmall : PoolKind::kLarge;
    }
    return true;
  }
  return false;
}

}  // namespace fragscope
