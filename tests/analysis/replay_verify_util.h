// Helpers of the replay tests: open a log and make its Replayer at the log's capacity, record an
// allocator's events as a PyTorch snapshot's device_traces, verify a trace (file, snapshot or
// source) with FidelityChecker, and compare every statistic.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "analysis/replay/fidelity_check.h"
#include "analysis/replay/replay.h"
#include "analysis/sources/open_trace.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "analysis/sources/snapshot_source.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {

// A log opened and its Replayer made at the log's capacity and initialised, ready to run.
struct LogReplay {
  std::unique_ptr<TraceSource> source;
  std::unique_ptr<Replayer> replayer;  // over *source
};

// The settings a LogReplay replays under (the trace's expandable segments and options changes
// are followed either way).
enum class ReplaySettings { kDefault, kRecorded };

// Opens the log at `path` (a file) and makes its LogReplay.
inline absl::StatusOr<LogReplay> OpenReplay(const std::string& path,
                                            ReplaySettings settings = ReplaySettings::kDefault) {
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  if (!opener.ok()) return opener.status();
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
  if (!source.ok()) return source.status();
  LogReplay replay{*std::move(source), nullptr};
  ReplayConfig config;
  if (settings == ReplaySettings::kRecorded) {
    absl::StatusOr<AllocatorOptions> options =
        ParseAllocatorOptions(replay.source->info().allocator_options);
    if (!options.ok()) return options.status();
    config.options = *options;
  }
  config.capacity_bytes = replay.source->info().capacity_bytes;
  replay.replayer = std::make_unique<Replayer>(*replay.source, config);
  if (absl::Status init = replay.replayer->Init(); !init.ok()) return init;
  return replay;
}

// Records an allocator's events as a PyTorch snapshot's device_traces does: no empty_cache
// entries, alloc/free sizes are the requests, an OOM's size the rounded request.
class SnapshotRecorder final : public AllocatorObserver {
 public:
  void OnEvent(const AllocatorEvent& e) override {
    SnapshotTraceEntry t;
    t.addr = e.ptr;
    t.size = e.bytes;
    switch (e.kind) {
      case EventKind::kAlloc:
        t.action = TraceAction::kAlloc;
        t.size = e.requested_bytes;
        break;
      case EventKind::kFreeRequested:
        t.action = TraceAction::kFreeRequested;
        t.size = e.requested_bytes;
        break;
      case EventKind::kFreeCompleted:
        t.action = TraceAction::kFreeCompleted;
        t.size = e.requested_bytes;
        break;
      case EventKind::kSegmentAlloc:
        t.action = TraceAction::kSegmentAlloc;
        break;
      case EventKind::kSegmentFree:
        t.action = TraceAction::kSegmentFree;
        break;
      case EventKind::kSegmentMap:
        t.action = TraceAction::kSegmentMap;
        break;
      case EventKind::kSegmentUnmap:
        t.action = TraceAction::kSegmentUnmap;
        break;
      case EventKind::kOom:
        t.action = TraceAction::kOom;
        t.addr = 0;
        t.device_free = e.device_free_bytes;
        break;
      default:
        return;  // PyTorch records no empty_cache
    }
    t.stream = static_cast<int64_t>(e.stream);
    t.time_us = 1'700'000'000'000'000 + static_cast<int64_t>(entries.size());
    entries.push_back(std::move(t));
  }
  std::vector<SnapshotTraceEntry> entries;
};

// A snapshot of `allocator` now, with trace entries [first, end) of `recorder`.
inline std::shared_ptr<const PyTorchSnapshot> MakeSnapshot(const CachingAllocator& allocator,
                                                           const SnapshotRecorder& recorder,
                                                           const std::string& conf,
                                                           size_t first = 0) {
  auto snapshot = std::make_shared<PyTorchSnapshot>();
  for (const SegmentInfo& s : allocator.Snapshot().segments) {
    SnapshotSegment seg;
    seg.address = s.address;
    seg.total_size = s.total_size;
    seg.allocated_size = s.allocated_size;
    seg.active_size = s.active_size;
    seg.requested_size = s.requested_size;
    seg.stream = static_cast<int64_t>(s.stream);
    seg.is_large = s.segment_type == PoolKind::kLarge;
    seg.is_expandable = s.is_expandable;
    seg.pool_id = {static_cast<int64_t>(s.pool_id.first), static_cast<int64_t>(s.pool_id.second)};
    for (const BlockInfo& b : s.blocks) {
      seg.blocks.push_back({b.address, b.size, b.requested_size, b.state, nullptr});
    }
    snapshot->segments.push_back(std::move(seg));
  }
  snapshot->device_traces.emplace_back(recorder.entries.begin() + static_cast<ptrdiff_t>(first),
                                       recorder.entries.end());
  snapshot->allocator_settings.emplace();
  snapshot->allocator_settings->alloc_conf = conf;
  return snapshot;
}

struct VerifyResult {
  std::optional<Divergence> divergence;
  FidelityCounts counts;
  std::vector<std::string> warnings;
  DeviceStats stats;  // the replay's allocator at the end
};

inline VerifyResult Verify(TraceSource& source, uint64_t capacity,
                           std::optional<uint64_t> allowed = std::nullopt, bool script = true) {
  ReplayConfig config;
  config.options = *ParseAllocatorOptions(source.info().allocator_options);
  config.capacity_bytes = capacity;
  config.allowed_bytes = allowed;
  config.script_addresses = script;
  Replayer replayer(source, config);
  EXPECT_OK(replayer.Init());
  FidelityChecker checker;
  EXPECT_OK(replayer.Run(&checker));
  return {checker.divergence(), checker.counts(), replayer.warnings(),
          replayer.allocator().GetStats()};
}

inline VerifyResult VerifySnapshot(std::shared_ptr<const PyTorchSnapshot> snapshot,
                                   uint64_t capacity,
                                   std::optional<uint64_t> allowed = std::nullopt) {
  absl::StatusOr<std::unique_ptr<SnapshotSource>> source =
      SnapshotSource::FromSnapshot(std::move(snapshot), "recorded.pickle");
  EXPECT_OK(source.status());
  if (!source.ok()) return {};
  return Verify(**source, capacity, allowed);
}

inline VerifyResult VerifyFile(const std::string& path, uint64_t capacity, bool script = true) {
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path);
  EXPECT_OK(opener.status());
  if (!opener.ok()) return {};
  std::unique_ptr<TraceSource> source = *opener->Open();
  return Verify(*source, capacity, std::nullopt, script);
}

inline std::string Describe(const VerifyResult& r) {
  if (!r.divergence.has_value()) return "faithful";
  return absl::StrFormat("event %d: expected %s, got %s", r.divergence->event_index,
                         r.divergence->expected, r.divergence->got);
}

// Every statistic PyTorch keeps: the replay made the same calls (num_alloc_retries and
// num_sync_all_streams tell the OOM retry's release from an empty_cache()).
inline void ExpectSameStats(const DeviceStats& replay, const DeviceStats& job) {
  const auto ours = FlattenStats(replay);
  const auto theirs = FlattenStats(job);
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ(ours[i], theirs[i]);
}

}  // namespace fragscope::testing
