// Reading an .fslog for a replay on a background thread (Note [Reading on a background thread]
// in analysis/sources/fslog_source.h): the same events, warnings and errors (with their offsets) as
// on the calling thread; clean stops at any point; and kAuto's core budget.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "analysis/replay/fidelity_check.h"
#include "analysis/replay/replay.h"
#include "analysis/sources/fslog_source.h"
#include "fslog/fslog_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

constexpr FslogReading kBothWays[] = {FslogReading::kCallingThread,
                                      FslogReading::kBackgroundThread};

// A random job with markers and options changes, about 1.5 events per operation (6000
// operations make more than the background reader's ring holds).
std::string RecordJob(int ops) {
  std::mt19937_64 rng(11);
  TraceBuilder t(600 * kMiB);
  std::vector<DevicePtr> live;
  for (int i = 0; i < ops; ++i) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 2) {
      t.Mark(absl::StrFormat("step %d / %s", i,
                             op == 0 ? "forward"
                                     : "a long phase name, longer "
                                       "than one marker record"));
    } else if (op < 3) {
      t.SetOptions(rng() % 2 ? "max_split_size_mb:64" : "roundup_power2_divisions:4");
    } else if (op < 55 || live.empty()) {
      const uint64_t size = uint64_t{1} << (rng() % 24);
      t.Tick();
      absl::StatusOr<DevicePtr> p = t.allocator().Allocate(size + rng() % size, 0);
      if (p.ok()) live.push_back(*p);
    } else {
      const size_t k = rng() % live.size();
      t.Free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  return t.Finish();
}

struct Read {
  std::vector<TraceEvent> events;
  absl::Status status;  // the error that ended the reading, if any
  absl::Status again;   // what Next returned once more after the end
  std::vector<std::string> warnings;
  double progress = 0;
  bool background = false;
};

// Reads the whole source with Next(), or with NextBatch() in batches of `batch` events.
Read ReadAll(std::unique_ptr<FslogSource> source, size_t batch = 0) {
  Read read;
  TraceEvent event;
  std::vector<TraceEvent> slots(std::max<size_t>(batch, 1));
  std::vector<TraceEvent*> pointers;
  for (TraceEvent& slot : slots) pointers.push_back(&slot);
  for (;;) {
    if (batch > 0) {
      absl::StatusOr<size_t> got = source->NextBatch(pointers);
      if (!got.ok() || *got == 0) {
        read.status = got.status();
        read.again = source->NextBatch(pointers).status();
        break;
      }
      read.events.insert(read.events.end(), slots.begin(),
                         slots.begin() + static_cast<ptrdiff_t>(*got));
      continue;
    }
    absl::StatusOr<bool> got = source->Next(&event);
    if (!got.ok() || !*got) {
      read.status = got.status();
      read.again = source->Next(&event).status();
      break;
    }
    read.events.push_back(event);
  }
  read.warnings = source->warnings();
  read.progress = source->Progress();
  read.background = source->reads_in_background();
  return read;
}

Read ReadBytes(std::string_view bytes, FslogReading reading, size_t batch = 0) {
  absl::StatusOr<std::unique_ptr<FslogSource>> source =
      FslogSource::OpenBytes(bytes, "job.fslog", reading);
  EXPECT_OK(source.status());
  if (!source.ok()) return {};
  return ReadAll(*std::move(source), batch);
}

void ExpectSameEvents(const std::vector<TraceEvent>& a, const std::vector<TraceEvent>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i].kind, b[i].kind);
    EXPECT_EQ(a[i].pool, b[i].pool);
    EXPECT_EQ(a[i].flags, b[i].flags);
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].time_ns, b[i].time_ns);
    EXPECT_EQ(a[i].ptr, b[i].ptr);
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].requested_bytes, b[i].requested_bytes);
    EXPECT_EQ(a[i].stream, b[i].stream);
    EXPECT_EQ(a[i].device_free_bytes, b[i].device_free_bytes);
    EXPECT_EQ(a[i].device_total_bytes, b[i].device_total_bytes);
    EXPECT_EQ(a[i].reserved_bytes, b[i].reserved_bytes);
    EXPECT_EQ(a[i].allocated_bytes, b[i].allocated_bytes);
    if (a[i].kind == EventKind::kMarker || a[i].kind == EventKind::kOptionsChange) {
      EXPECT_EQ(a[i].text, b[i].text);
    }
  }
}

// File offsets of the log's chunks.
std::vector<size_t> ChunkOffsets(const std::string& bytes) {
  std::vector<size_t> offsets;
  size_t at = *ParseFileHeaderSize(bytes);
  while (at + kChunkHeaderBytes <= bytes.size()) {
    offsets.push_back(at);
    ChunkHeader chunk;
    std::memcpy(&chunk, bytes.data() + at, sizeof(chunk));
    at += kChunkHeaderBytes + chunk.payload_bytes;
  }
  return offsets;
}

TEST(ReplayReadingTest, BackgroundReaderDeliversTheSameEvents) {
  const std::string bytes = FileBytes(RecordJob(6000));
  Read inline_read = ReadBytes(bytes, FslogReading::kCallingThread);
  Read background = ReadBytes(bytes, FslogReading::kBackgroundThread);
  EXPECT_FALSE(inline_read.background);
  EXPECT_TRUE(background.background);
  EXPECT_OK(inline_read.status);
  EXPECT_OK(background.status);
  EXPECT_GT(inline_read.events.size(), FslogSource::kRingBatches * FslogSource::kBatchEvents);
  ExpectSameEvents(inline_read.events, background.events);
  EXPECT_EQ(inline_read.progress, 1.0);
  EXPECT_EQ(background.progress, 1.0);
  EXPECT_TRUE(background.warnings.empty());
}

// Note [Combined free records]: one record, two events, on both reading paths, with the
// reader's numbering (a combined record at a chunk's end, then a gap).
TEST(ReplayReadingTest, CombinedFreeRecordIsTwoEventsBothWays) {
  const CombinedFreeSample free = MakeCombinedFree(7, 1'000'000'500);
  LogBuilder builder;  // device 3: the samples with seeds 3, 7 and 11 are on it
  builder.AddChunk({EncodedSample(EventKind::kAlloc, 3), free.record}, 0);
  builder.AddChunk({EncodedSample(EventKind::kAlloc, 7)}, 2);
  builder.AddChunk({EncodedSample(EventKind::kAlloc, 11)}, 5);
  std::vector<Read> reads;
  for (FslogReading reading : kBothWays) reads.push_back(ReadBytes(builder.bytes(), reading));
  for (const Read& read : reads) {
    EXPECT_OK(read.status);
    ASSERT_EQ(read.events.size(), 5u);
    std::vector<EventKind> kinds;
    std::vector<uint64_t> indices;
    for (const TraceEvent& e : read.events) {
      kinds.push_back(e.kind);
      indices.push_back(e.index);
    }
    EXPECT_EQ(kinds, (std::vector<EventKind>{EventKind::kAlloc, EventKind::kFreeRequested,
                                             EventKind::kFreeCompleted, EventKind::kAlloc,
                                             EventKind::kAlloc}));
    EXPECT_EQ(indices, (std::vector<uint64_t>{0, 1, 2, 3, 6}));
    for (int half : {1, 2}) {
      const TraceEvent& e = read.events[static_cast<size_t>(half)];
      const AllocatorEvent& expected = half == 1 ? free.requested : free.completed;
      EXPECT_EQ(e.flags, expected.flags);
      EXPECT_EQ(e.ptr, expected.ptr);
      EXPECT_EQ(e.bytes, expected.bytes);
      EXPECT_EQ(e.requested_bytes, expected.requested_bytes);
      EXPECT_EQ(e.stream, expected.stream);
      EXPECT_EQ(e.time_ns, read.events[1].time_ns);
    }
  }
  ExpectSameEvents(reads[0].events, reads[1].events);
}

// FoldFreeCompletions: each combined record is one free_requested marked
// kEventFlagCompletionFolded (on both reading paths, batched or not), the unfolded reading with
// every such pair's free_completed left out; other events keep their numbers. Too late once
// reading has started.
TEST(ReplayReadingTest, FoldedFreesAreTheUnfoldedPairsInOneEvent) {
  const std::string bytes = FileBytes(RecordJob(6000));
  const Read unfolded = ReadBytes(bytes, FslogReading::kCallingThread);
  ASSERT_OK(unfolded.status);
  std::vector<TraceEvent> expected;
  for (size_t i = 0; i < unfolded.events.size(); ++i) {
    TraceEvent e = unfolded.events[i];
    EXPECT_EQ(e.flags & kEventFlagCompletionFolded, 0);
    const TraceEvent* next = i + 1 < unfolded.events.size() ? &unfolded.events[i + 1] : nullptr;
    // A combined record's halves: the same block and time, consecutive numbers.
    if (e.kind == EventKind::kFreeRequested && next != nullptr &&
        next->kind == EventKind::kFreeCompleted && next->ptr == e.ptr &&
        next->index == e.index + 1 && next->time_ns == e.time_ns) {
      e.flags |= kEventFlagCompletionFolded;
      ++i;
    }
    expected.push_back(e);
  }
  ASSERT_LT(expected.size(), unfolded.events.size() * 9 / 10);  // the job's frees are immediate
  for (FslogReading reading : kBothWays) {
    for (size_t batch : {size_t{0}, size_t{64}}) {
      SCOPED_TRACE(absl::StrFormat("reading %d, batch %d", static_cast<int>(reading), batch));
      std::unique_ptr<FslogSource> source = *FslogSource::OpenBytes(bytes, "job.fslog", reading);
      EXPECT_TRUE(source->FoldFreeCompletions());
      const Read folded = ReadAll(std::move(source), batch);
      EXPECT_OK(folded.status);
      ExpectSameEvents(folded.events, expected);
    }
  }
  std::unique_ptr<FslogSource> started = *FslogSource::OpenBytes(bytes, "job.fslog");
  TraceEvent first;
  ASSERT_TRUE(*started->Next(&first));
  EXPECT_FALSE(started->FoldFreeCompletions());
}

TEST(ReplayReadingTest, CorruptChunkIsTheSameErrorAfterTheSameEvents) {
  std::string bytes = FileBytes(RecordJob(4000));
  const std::vector<size_t> chunks = ChunkOffsets(bytes);
  ASSERT_GT(chunks.size(), 4u);
  const size_t bad = chunks[chunks.size() / 2];
  bytes[bad + kChunkHeaderBytes + 100] ^= 0x40;  // a payload byte: the CRC no longer matches
  Read inline_read = ReadBytes(bytes, FslogReading::kCallingThread);
  Read background = ReadBytes(bytes, FslogReading::kBackgroundThread);
  EXPECT_THAT(std::string(inline_read.status.message()),
              HasSubstr(absl::StrFormat("offset %d: corrupt chunk", bad)));
  EXPECT_EQ(background.status, inline_read.status);
  EXPECT_EQ(background.again, inline_read.status);  // sticky
  EXPECT_EQ(inline_read.again, inline_read.status);
  EXPECT_GT(inline_read.events.size(), 0u);
  ExpectSameEvents(inline_read.events, background.events);
}

TEST(ReplayReadingTest, MixedDevicesIsTheSameErrorAfterTheSameEvents) {
  LogBuilder log;  // the header says device 3; sample events are on devices seed % 4
  std::vector<LogRecord> records;
  for (int i = 0; i < 20; ++i) records.push_back(EncodedSample(EventKind::kAlloc, 3));
  records.push_back(EncodedSample(EventKind::kAlloc, 5));
  log.AddChunk(records);
  for (FslogReading reading : kBothWays) {
    Read read = ReadBytes(log.bytes(), reading);
    EXPECT_EQ(read.events.size(), 20u);
    EXPECT_THAT(std::string(read.status.message()),
                HasSubstr("job.fslog: mixed devices: event 20 is on device 1"));
    EXPECT_EQ(read.again, read.status);
  }
}

TEST(ReplayReadingTest, TornTailIsTheSameWarning) {
  std::string bytes = FileBytes(RecordJob(2000));
  bytes.resize(bytes.size() - 1000);
  Read inline_read = ReadBytes(bytes, FslogReading::kCallingThread);
  Read background = ReadBytes(bytes, FslogReading::kBackgroundThread);
  EXPECT_OK(inline_read.status);
  EXPECT_OK(background.status);
  ExpectSameEvents(inline_read.events, background.events);
  ASSERT_EQ(inline_read.warnings.size(), 1u);
  EXPECT_THAT(inline_read.warnings[0], HasSubstr("torn tail"));
  EXPECT_EQ(background.warnings, inline_read.warnings);
}

// NextBatch (what the replay's lookahead reads with) delivers what Next does, batch by batch,
// on both paths: the same events, then the same error, which a batch that meets it after some
// events returns on the next call.
TEST(ReplayReadingTest, BatchesDeliverWhatNextDoes) {
  const std::string good = FileBytes(RecordJob(4000));
  std::string corrupt = good;
  const std::vector<size_t> chunks = ChunkOffsets(corrupt);
  ASSERT_GT(chunks.size(), 4u);
  corrupt[chunks[chunks.size() / 2] + kChunkHeaderBytes + 100] ^= 0x40;
  for (const std::string* bytes : {&good, static_cast<const std::string*>(&corrupt)}) {
    const Read expected = ReadBytes(*bytes, FslogReading::kCallingThread);
    for (FslogReading reading : kBothWays) {
      for (size_t batch : {size_t{1}, size_t{7}, size_t{64}, size_t{5000}}) {
        SCOPED_TRACE(absl::StrFormat(
            "%s, %s, batches of %d", bytes == &good ? "good" : "corrupt",
            reading == FslogReading::kCallingThread ? "calling thread" : "background", batch));
        const Read read = ReadBytes(*bytes, reading, batch);
        EXPECT_EQ(read.status, expected.status);
        EXPECT_EQ(read.again, expected.status);
        ExpectSameEvents(read.events, expected.events);
        if (bytes == &good) {
          EXPECT_EQ(read.progress, 1.0);
        }
      }
    }
  }
}

// Destroying the source stops its thread wherever it is: never started, blocked on a full ring,
// or done.
TEST(ReplayReadingTest, BackgroundReaderStopsWhereverTheConsumerDoes) {
  const std::string bytes = FileBytes(RecordJob(6000));
  for (int read_first : {0, 1, 5000, 1 << 30}) {
    SCOPED_TRACE(read_first);
    std::unique_ptr<FslogSource> source =
        *FslogSource::OpenBytes(bytes, "job.fslog", FslogReading::kBackgroundThread);
    TraceEvent event;
    for (int i = 0; i < read_first; ++i) {
      absl::StatusOr<bool> got = source->Next(&event);
      ASSERT_OK(got.status());
      if (!*got) break;
    }
    if (read_first == 1) {  // let the thread fill the ring and block on it
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    source.reset();
  }
}

// A replay that stops early (here at an event index) leaves the reader mid-log; the result is
// the calling-thread replay's.
TEST(ReplayReadingTest, ReplayStoppedEarlyMatchesTheCallingThreadReplay) {
  const std::string path = RecordJob(20000);  // about 29000 events: the reader is ahead, not done
  std::vector<DeviceStats> stats;
  std::vector<uint64_t> last;
  for (FslogReading reading : kBothWays) {
    std::unique_ptr<FslogSource> source = *FslogSource::Open(path, reading);
    ReplayConfig config;
    config.capacity_bytes = source->info().capacity_bytes;
    config.stop_after_index = 9000;
    Replayer replayer(*source, config);
    ASSERT_OK(replayer.Init());
    FidelityChecker checker;
    ASSERT_OK(replayer.Run(&checker));
    EXPECT_FALSE(checker.divergence().has_value());
    EXPECT_LE(replayer.last_index(), 9000u);
    EXPECT_GT(replayer.last_index(), 8900u);
    last.push_back(replayer.last_index());
    stats.push_back(replayer.allocator().GetStats());
  }
  EXPECT_EQ(last[0], last[1]);
  EXPECT_EQ(FlattenStats(stats[0]), FlattenStats(stats[1]));
}

// kAuto: a source reads in background while the open sources, each counted with its reader,
// leave a core for it.
TEST(ReplayReadingTest, AutoUsesAThreadOnlyWhenACoreIsFree) {
  const std::string bytes = FileBytes(RecordJob(100));
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  TraceEvent event;
  std::unique_ptr<FslogSource> first = *FslogSource::OpenBytes(bytes);
  ASSERT_OK(first->Next(&event).status());
  EXPECT_EQ(first->reads_in_background(), cores >= 2);
  std::unique_ptr<FslogSource> second = *FslogSource::OpenBytes(bytes);
  ASSERT_OK(second->Next(&event).status());
  EXPECT_EQ(second->reads_in_background(), cores >= (first->reads_in_background() ? 4u : 3u));
  first.reset();
  second.reset();
  std::unique_ptr<FslogSource> third = *FslogSource::OpenBytes(bytes);
  ASSERT_OK(third->Next(&event).status());
  EXPECT_EQ(third->reads_in_background(), cores >= 2);  // the others' cores were given back
}

}  // namespace
}  // namespace fragscope::testing
