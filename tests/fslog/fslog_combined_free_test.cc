// Combined free records (Note [Combined free records] in fslog/fslog_format.h): the fold
// is lossless for every free the allocator emits, refuses what it could not represent, and the
// writer's log reads back as exactly the events the allocator emitted, one record fewer per
// immediate free.
#include <cstring>
#include <string>
#include <vector>

#include "allocator/allocator_options.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "fslog/fslog_format.h"
#include "fslog/fslog_writer.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/fslog/fslog_writer_test_util.h"

namespace fragscope::testing {
namespace {

struct Recorder : AllocatorObserver {
  void OnEvent(const AllocatorEvent& event) override { events.push_back(event); }
  std::vector<AllocatorEvent> events;
};

// Frees of every shape: merging with 0, 1 and 2 neighbours, leaving split and unsplit results,
// oversize blocks (max_split_size_mb:64), small and large pools; expandable segments when asked.
// A few frees wait for another stream (record_stream), so their free_completed comes later.
void RunJob(CachingAllocator& allocator, SimulatedBackend& backend) {
  std::vector<DevicePtr> small;
  std::vector<DevicePtr> large;
  for (uint64_t i = 0; i < 6; ++i) small.push_back(*allocator.Allocate(uint64_t{4096} << i, 0));
  for (uint64_t i = 0; i < 6; ++i) large.push_back(*allocator.Allocate((3 + i) * kMiB, 0));
  const DevicePtr oversize = *allocator.Allocate(100 * kMiB, 0);
  // Every other block first (no free neighbour), then the rest (one or two free neighbours).
  for (std::vector<DevicePtr>* blocks : {&small, &large}) {
    for (size_t i = 0; i < blocks->size(); i += 2) ASSERT_TRUE(allocator.Free((*blocks)[i]).ok());
    for (size_t i = 1; i < blocks->size(); i += 2) ASSERT_TRUE(allocator.Free((*blocks)[i]).ok());
  }
  ASSERT_TRUE(allocator.Free(oversize).ok());
  // A free that waits for stream 7's work: its free_completed comes with a later allocation.
  const DevicePtr shared = *allocator.Allocate(2 * kMiB, 0);
  backend.SetStreamBusy(7, true);
  ASSERT_TRUE(allocator.RecordStream(shared, 7).ok());
  ASSERT_TRUE(allocator.Free(shared).ok());
  ASSERT_TRUE(allocator.Free(*allocator.Allocate(3 * kMiB, 0)).ok());
  backend.SetStreamBusy(7, false);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(allocator.Free(*allocator.Allocate(1 * kMiB, 0)).ok());
}

std::vector<AllocatorEvent> RecordJob(const std::string& conf, FslogWriter* writer) {
  SimulatedBackend backend(8 * kGiB);
  CachingAllocator allocator(backend, *ParseAllocatorOptions(conf));
  Recorder recorder;
  allocator.AddObserver(&recorder);
  if (writer != nullptr) allocator.AddObserver(writer);
  RunJob(allocator, backend);
  allocator.RemoveObserver(&recorder);
  if (writer != nullptr) allocator.RemoveObserver(writer);
  return recorder.events;
}

TEST(CombinedFreeTest, FoldAndSplitRestoreBothEventsOfEveryImmediateFree) {
  for (const char* conf : {"max_split_size_mb:64", "expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    const std::vector<AllocatorEvent> events = RecordJob(conf, nullptr);
    int combined = 0;
    int merged[3] = {0, 0, 0};
    int result_split = 0;
    int oversize = 0;
    int expandable = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const AllocatorEvent& requested = events[i];
      const AllocatorEvent& completed = events[i + 1];
      if (requested.kind != EventKind::kFreeRequested) continue;
      LogRecord record;
      EncodeEvent(requested, 42, &record);
      if (completed.kind != EventKind::kFreeCompleted || completed.ptr != requested.ptr) {
        EXPECT_FALSE(CanCombineFree(record, completed));
        continue;
      }
      ASSERT_TRUE(CanCombineFree(record, completed)) << "event " << i;
      CombineFree(completed, &record);
      ASSERT_TRUE(IsCombinedFree(record));
      LogRecord requested_back;
      LogRecord completed_back;
      SplitCombinedFree(record, &requested_back, &completed_back);
      EXPECT_TRUE(SameEvent(DecodeEvent(requested_back), requested)) << "event " << i;
      EXPECT_TRUE(SameEvent(DecodeEvent(completed_back), completed)) << "event " << i + 1;
      EXPECT_EQ(requested_back.timestamp_ns, 42u);
      EXPECT_EQ(completed_back.timestamp_ns, 42u);
      ++combined;
      ++merged[completed.merged_count];
      result_split += (completed.flags & kEventFlagResultIsSplit) != 0;
      oversize += (requested.flags & kEventFlagOversize) != 0;
      expandable += (requested.flags & kEventFlagExpandable) != 0;
    }
    // The job produced every shape the fold must carry.
    EXPECT_GT(combined, 20);
    EXPECT_GT(merged[0], 0);
    EXPECT_GT(merged[1], 0);
    EXPECT_GT(merged[2], 0);
    EXPECT_GT(result_split, 0);
    if (std::string(conf).starts_with("max_split")) {
      EXPECT_GT(oversize, 0);
    } else {
      EXPECT_GT(expandable, 0);
    }
  }
}

TEST(CombinedFreeTest, RefusesWhatOneRecordCannotHold) {
  AllocatorEvent requested;
  requested.kind = EventKind::kFreeRequested;
  requested.pool = PoolKind::kLarge;
  requested.flags = kEventFlagOversize;
  requested.device = 2;
  requested.ptr = 0x7f0000200000;
  requested.bytes = 4 * kMiB;
  requested.requested_bytes = 4 * kMiB - 100;
  requested.stream = 3;
  requested.segment = 0x7f0000000000;
  AllocatorEvent completed = requested;
  completed.kind = EventKind::kFreeCompleted;
  completed.flags = kEventFlagResultIsSplit;
  completed.merged_count = 1;
  completed.split_bytes = kMiB;
  completed.result_bytes = 5 * kMiB;
  LogRecord record;
  EncodeEvent(requested, 0, &record);
  ASSERT_TRUE(CanCombineFree(record, completed));

  const auto refused = [&](auto mutate_record, auto mutate_event) {
    LogRecord r = record;
    AllocatorEvent e = completed;
    mutate_record(r);
    mutate_event(e);
    return !CanCombineFree(r, e);
  };
  const auto same_record = [](LogRecord&) {};
  const auto same_event = [](AllocatorEvent&) {};
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.ptr += 512; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.bytes += 512; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.requested_bytes += 1; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.stream = 4; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.segment += 2 * kMiB; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.pool = PoolKind::kSmall; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.device = 0; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.kind = EventKind::kAlloc; }));
  // Flags one half may not carry, or that the halves would disagree on.
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.flags |= kEventFlagOversize; }));
  EXPECT_TRUE(refused(same_record, [](AllocatorEvent& e) { e.flags |= kEventFlagExpandable; }));
  EXPECT_TRUE(refused([](LogRecord& r) { r.flags |= kEventFlagResultIsSplit; }, same_event));
  // A record that is not a plain free_requested, or whose spare fields are in use.
  EXPECT_TRUE(refused([](LogRecord& r) { r.kind = 1; }, same_event));
  EXPECT_TRUE(refused([](LogRecord& r) { r.flags |= kFreeRecordCompleted; }, same_event));
  EXPECT_TRUE(refused([](LogRecord& r) { r.aux = 1; }, same_event));
  EXPECT_TRUE(refused([](LogRecord& r) { r.words[kWordSplitBytes] = 1; }, same_event));
  EXPECT_TRUE(refused([](LogRecord& r) { r.words[kWordResultBytes] = 1; }, same_event));
}

TEST(CombinedFreeTest, WriterLogReadsBackAsTheEmittedEventsWithFewerRecords) {
  for (const char* conf : {"max_split_size_mb:64", "expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    const std::string path = TempLogPath("combined");
    std::vector<AllocatorEvent> events;
    {
      FslogWriterOptions options;
      options.block_when_full = true;
      auto writer = FslogWriter::Open(path, WriterTestInfo(), options);
      ASSERT_TRUE(writer.ok()) << writer.status();
      events = RecordJob(conf, writer->get());
    }
    size_t immediate_frees = 0;
    size_t deferred_frees = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].kind != EventKind::kFreeRequested) continue;
      const bool immediate = i + 1 < events.size() &&
                             events[i + 1].kind == EventKind::kFreeCompleted &&
                             events[i + 1].ptr == events[i].ptr;
      ++(immediate ? immediate_frees : deferred_frees);
    }
    EXPECT_GT(immediate_frees, 20u);
    EXPECT_EQ(deferred_frees, 1u);  // the record_stream one

    const ReadResult result = ReadFile(path);
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_TRUE(result.warnings.empty());
    ASSERT_EQ(result.entries.size(), events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_TRUE(SameEvent(result.entries[i].event(), events[i]))
          << "entry " << i << " " << EventKindName(events[i].kind);
      EXPECT_EQ(result.entries[i].sequence, i) << "events are numbered 0, 1, 2, ...";
      EXPECT_FALSE(IsCombinedFree(result.entries[i].record));
    }
    // The file itself: one record per event, except one for each pair the writer combined. It
    // may leave an immediate free's pair apart (its free_completed came more than 20 us later,
    // e.g. under a sanitizer, or met a flush holding the lock), never combine anything else.
    absl::StatusOr<FslogReader> reader = FslogReader::Open(path);
    ASSERT_TRUE(reader.ok());
    uint64_t records = 0;
    uint64_t combined_records = 0;
    for (;;) {
      absl::StatusOr<std::span<const LogRecord>> chunk = reader->NextChunk();
      ASSERT_TRUE(chunk.ok());
      if (chunk->empty()) break;
      records += chunk->size();
      for (const LogRecord& r : *chunk) combined_records += IsCombinedFree(r);
    }
    EXPECT_EQ(records + combined_records, events.size());
    EXPECT_LE(combined_records, immediate_frees);
    EXPECT_GE(combined_records, immediate_frees / 2);
  }
}

}  // namespace
}  // namespace fragscope::testing
