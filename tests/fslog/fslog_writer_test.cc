#include "fslog/fslog_writer.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/fslog/fslog_writer_test_util.h"

namespace fragscope::testing {
namespace {

std::unique_ptr<FslogWriter> OpenOrDie(const std::string& path,
                                       const FslogWriterOptions& options = {}) {
  auto writer = FslogWriter::Open(path, WriterTestInfo(), options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  return writer.ok() ? *std::move(writer) : nullptr;
}

void ExpectContiguousAndOrdered(const ReadResult& result) {
  uint64_t last_ts = 0;
  for (size_t i = 0; i < result.entries.size(); ++i) {
    const LogEntry& entry = result.entries[i];
    if (i > 0) {
      const LogEntry& prev = result.entries[i - 1];
      // An options change occupies several sequence numbers.
      const uint64_t step = prev.kind() == EventKind::kOptionsChange
                                ? (prev.text.size() <= kOptionsFirstRecordTextBytes
                                       ? 1
                                       : 1 + (prev.text.size() - kOptionsFirstRecordTextBytes +
                                              kOptionsContinuationTextBytes - 1) /
                                                 kOptionsContinuationTextBytes)
                                : 1;
      ASSERT_EQ(entry.sequence, prev.sequence + step) << "at entry " << i;
    }
    ASSERT_GE(entry.record.timestamp_ns, last_ts) << "timestamps go back at entry " << i;
    last_ts = entry.record.timestamp_ns;
  }
}

TEST(FslogWriterTest, RoundTripsEveryKindWithEveryField) {
  const std::string path = TempLogPath("roundtrip");
  std::vector<AllocatorEvent> events;
  const std::string long_marker = std::string(50, 'm') + "\xE2\x82\xAC\xE2\x82\xAC";  // 56 bytes
  const std::string too_long_marker = std::string(54, 'n') + "\xE2\x82\xAC";          // 57 bytes
  std::string long_options;
  for (int i = 0; long_options.size() < 3000; ++i)
    long_options += absl::StrFormat("key%d:%d,", i, i);
  const std::string huge_options(5000, 'o');
  {
    auto writer = OpenOrDie(path);
    ASSERT_NE(writer, nullptr);
    for (uint64_t seed = 0; seed < 3; ++seed) {
      for (EventKind kind : kAllocatorKinds) {
        events.push_back(SampleEvent(kind, seed));
        writer->OnEvent(events.back());
      }
    }
    writer->Mark("step 12 / forward");
    writer->Mark(long_marker);
    writer->Mark(too_long_marker);
    writer->RecordOptionsChange("expandable_segments:True");
    writer->RecordOptionsChange(long_options);
    writer->RecordOptionsChange(huge_options);
    writer->OnEvent(SampleEvent(EventKind::kAlloc, 99));
  }
  const ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(result.warnings.empty());
  ASSERT_EQ(result.entries.size(), events.size() + 3 + 3 + 1);
  ExpectContiguousAndOrdered(result);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_TRUE(SameEvent(result.entries[i].event(), events[i]))
        << "entry " << i << " " << EventKindName(events[i].kind);
  }
  size_t i = events.size();
  EXPECT_EQ(result.entries[i].text, "step 12 / forward");
  EXPECT_EQ(result.entries[i].record.flags, 0);
  EXPECT_EQ(result.entries[i].record.device, 1);
  EXPECT_EQ(result.entries[++i].text, long_marker);
  EXPECT_EQ(result.entries[i].record.flags, 0);
  EXPECT_EQ(result.entries[++i].text, std::string(54, 'n'));  // the euro sign would not fit
  EXPECT_EQ(result.entries[i].record.flags, kRecordFlagTruncated);
  EXPECT_EQ(result.entries[++i].text, "expandable_segments:True");
  EXPECT_EQ(result.entries[++i].text, long_options);
  EXPECT_EQ(result.entries[i].record.flags, 0);
  EXPECT_EQ(result.entries[++i].text, huge_options.substr(0, kMaxOptionsChangeTextBytes));
  EXPECT_EQ(result.entries[i].record.flags, kRecordFlagTruncated);
  EXPECT_TRUE(SameEvent(result.entries[++i].event(), SampleEvent(EventKind::kAlloc, 99)));
}

TEST(FslogWriterTest, HeaderDescribesProcessDeviceAndClock) {
  setenv("RANK", "7", 1);
  setenv("LOCAL_RANK", "3", 1);
  setenv("WORLD_SIZE", "16", 1);
  const std::string dir = ::testing::TempDir();
  const std::string pattern = dir + "/fragscope_hdr_%p_r%r_%%.fslog";
  const int64_t before_ns = absl::ToUnixNanos(absl::Now());
  auto writer = OpenOrDie(pattern);
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  unsetenv("WORLD_SIZE");
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->path(), absl::StrFormat("%s/fragscope_hdr_%d_r7_%%.fslog", dir, getpid()));
  const ReadResult result = ReadFile(writer->path());
  ASSERT_TRUE(result.status.ok()) << result.status;
  auto reader = FslogReader::Open(writer->path());
  ASSERT_TRUE(reader.ok());
  const FslogHeader& h = reader->header();
  EXPECT_EQ(h.device_name, "Simulated H100");
  EXPECT_EQ(h.device_total_bytes, 80 * kGiB);
  EXPECT_EQ(h.device_index, 1);
  EXPECT_EQ(h.allocator_options, "max_split_size_mb:256");
  EXPECT_EQ(h.pid, getpid());
  EXPECT_EQ(h.rank, 7);
  EXPECT_EQ(h.local_rank, 3);
  EXPECT_EQ(h.world_size, 16);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(h.host, std::string(host).substr(0, 64));
  EXPECT_GE(h.start_wall_ns, before_ns);
  EXPECT_LT(h.start_wall_ns, before_ns + int64_t{60'000'000'000});
  EXPECT_NE(h.clock, FslogClock::kUnknown);
  EXPECT_GT(h.start_monotonic_ns, 0u);
  EXPECT_EQ(writer->header().host, h.host);
  std::remove(writer->path().c_str());
}

TEST(FslogWriterTest, TimestampsTrackTheMonotonicClock) {
  const std::string path = TempLogPath("clock");
  timespec ts;
  {
    auto writer = OpenOrDie(path, {.flush_interval = absl::Milliseconds(10)});
    ASSERT_NE(writer, nullptr);
    for (int i = 0; i < 20; ++i) {
      clock_gettime(CLOCK_MONOTONIC, &ts);
      const uint64_t before =
          static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
      writer->Mark(absl::StrFormat("%d", before));
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  const ReadResult result = ReadFile(path);
  ASSERT_EQ(result.entries.size(), 20u);
  for (const LogEntry& entry : result.entries) {
    uint64_t before = 0;
    ASSERT_TRUE(absl::SimpleAtoi(entry.text, &before));
    // Within 2 ms of CLOCK_MONOTONIC read just before (generous for sanitizer builds).
    EXPECT_GE(entry.record.timestamp_ns + 100'000, before);
    EXPECT_LT(entry.record.timestamp_ns, before + 2'000'000);
  }
}

uint64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Checks Note [Coarse event timestamps]: for each record, CLOCK_MONOTONIC read just before and just
// after its OnEvent bracket what the timestamp may be. Events come in bursts (right after a chunk
// write, while the background thread polls and publishes its clock) with pauses of every length
// around the 20 us tick, and every 1000th event is an OOM.
void ExpectTimestampBounds(bool coarse) {
  const std::string path = TempLogPath(coarse ? "coarse" : "precise");
  constexpr size_t kEvents = 20000;
  // What the TSC mapping may differ from clock_gettime (re-anchored every flush interval).
  constexpr uint64_t kSlackNs = 20'000;
  std::vector<uint64_t> before(kEvents), after(kEvents);
  {
    auto writer = OpenOrDie(path, {.flush_interval = absl::Milliseconds(5),
                                   .block_when_full = true,
                                   .coarse_timestamps = coarse});
    ASSERT_NE(writer, nullptr);
    for (size_t i = 0; i < kEvents; ++i) {
      if (i % 2000 == 0) {
        ASSERT_TRUE(writer->Flush().ok());  // a chunk write: the background thread polls again
      }
      if (i % 7 == 0) {
        const uint64_t until = MonotonicNowNs() + (i / 7 % 10) * 10'000;  // pause 0-90 us
        while (MonotonicNowNs() < until) {
        }
      }
      const AllocatorEvent event =
          SampleEvent(i % 1000 == 999 ? EventKind::kOom : EventKind::kAlloc, i);
      before[i] = MonotonicNowNs();
      writer->OnEvent(event);
      after[i] = MonotonicNowNs();
    }
  }
  const ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.entries.size(), kEvents);
  ExpectContiguousAndOrdered(result);
  uint64_t shared = 0;
  std::vector<uint64_t> lags;  // how much earlier than the event the timestamps are
  for (size_t i = 0; i < kEvents; ++i) {
    const LogRecord& record = result.entries[i].record;
    const uint64_t ts = record.timestamp_ns;
    ASSERT_LE(ts, after[i] + kSlackNs) << "record " << i << " is timestamped after its event";
    // Precise records: read during OnEvent. Coarse ones: no earlier than the precise reading of a
    // record at most 15 records back (every 16th record of a chunk, chunk starts included).
    const bool precise = !coarse || record.kind == static_cast<uint8_t>(EventKind::kOom);
    const size_t floor_index = precise ? i : i - std::min<size_t>(i, 15);
    ASSERT_GE(ts + kSlackNs, before[floor_index]) << "record " << i << " lags too far";
    if (i > 0 && ts == result.entries[i - 1].record.timestamp_ns) ++shared;
    lags.push_back(before[i] > ts ? before[i] - ts : 0);
  }
  std::sort(lags.begin(), lags.end());
  std::printf(
      "[ %s ] %zu records, %lu share the previous timestamp; lag p50 %lu ns, p99 %lu ns, "
      "p99.9 %lu ns, max %lu ns\n",
      coarse ? "coarse" : "precise", kEvents, shared, lags[kEvents / 2], lags[kEvents * 99 / 100],
      lags[kEvents * 999 / 1000], lags.back());
}

TEST(FslogWriterTest, CoarseTimestampsStayWithinTheirBounds) { ExpectTimestampBounds(true); }

TEST(FslogWriterTest, PreciseTimestampsOptionReadsTheClockForEveryRecord) {
  ExpectTimestampBounds(false);
}

TEST(FslogWriterTest, OomIsOnDiskWhenOnEventReturns) {
  const std::string path = TempLogPath("oom");
  auto writer = OpenOrDie(path, {.flush_interval = absl::Hours(1)});
  ASSERT_NE(writer, nullptr);
  for (uint64_t i = 0; i < 5; ++i) writer->OnEvent(SampleEvent(EventKind::kAlloc, i));
  const AllocatorEvent oom = SampleEvent(EventKind::kOom, 7);
  writer->OnEvent(oom);
  // The writer is still open and its periodic flush is an hour away.
  ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.entries.size(), 6u);
  EXPECT_TRUE(SameEvent(result.entries.back().event(), oom));
  EXPECT_TRUE(result.warnings.empty());
  for (uint64_t i = 5; i < 2000; ++i) writer->OnEvent(SampleEvent(EventKind::kAlloc, i));
  writer->OnEvent(oom);
  result = ReadFile(path);
  ASSERT_EQ(result.entries.size(), 2002u);
  EXPECT_TRUE(SameEvent(result.entries.back().event(), oom));
}

TEST(FslogWriterTest, FlushAndPeriodicTickMakeRecordsReadable) {
  const std::string path = TempLogPath("flush");
  auto writer = OpenOrDie(path, {.flush_interval = absl::Milliseconds(20)});
  ASSERT_NE(writer, nullptr);
  for (uint64_t i = 0; i < 10; ++i) writer->OnEvent(SampleEvent(EventKind::kAlloc, i));
  ASSERT_TRUE(writer->Flush().ok());
  EXPECT_EQ(ReadFile(path).entries.size(), 10u);
  for (uint64_t i = 10; i < 30; ++i) writer->OnEvent(SampleEvent(EventKind::kFreeRequested, i));
  // No Flush(): the background tick writes them.
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (ReadFile(path).entries.size() < 30 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ReadFile(path).entries.size(), 30u);
}

TEST(FslogWriterTest, EightThreadsLoseNothing) {
  const std::string path = TempLogPath("threads");
  constexpr int kEventThreads = 6;
  constexpr int kMarkThreads = 2;
  constexpr uint64_t kEventsPerThread = 20000;
  constexpr int kMarksPerThread = 1500;
  {
    auto writer =
        OpenOrDie(path, {.flush_interval = absl::Milliseconds(5), .block_when_full = true});
    ASSERT_NE(writer, nullptr);
    std::mutex allocator_mu;  // OnEvent is called under the allocator's lock
    std::vector<std::thread> threads;
    for (int t = 0; t < kEventThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 0; i < kEventsPerThread; ++i) {
          std::lock_guard<std::mutex> lock(allocator_mu);
          writer->OnEvent(SampleEvent(EventKind::kAlloc, uint64_t(t) * 1'000'000 + i));
        }
      });
    }
    for (int t = 0; t < kMarkThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kMarksPerThread; ++i) {
          writer->Mark(absl::StrFormat("t%d %d", t, i));
          if (i % 500 == 0)
            writer->RecordOptionsChange(std::string(200, static_cast<char>('a' + t)));
        }
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(writer->dropped_records(), 0u);
  }
  const ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(result.warnings.empty());
  EXPECT_EQ(result.missing_records, 0u);
  ExpectContiguousAndOrdered(result);
  std::vector<uint64_t> next_event(kEventThreads, 0);
  std::vector<int> next_mark(kMarkThreads, 0);
  int options_changes = 0;
  for (const LogEntry& entry : result.entries) {
    if (entry.kind() == EventKind::kAlloc) {
      const uint64_t id = IdOf(entry);
      const uint64_t t = id / 1'000'000;
      ASSERT_LT(t, uint64_t{kEventThreads});
      ASSERT_EQ(id % 1'000'000, next_event[t]++) << "thread " << t << " out of order";
    } else if (entry.kind() == EventKind::kMarker) {
      int t = 0, i = 0;
      ASSERT_EQ(std::sscanf(entry.text.c_str(), "t%d %d", &t, &i), 2) << entry.text;
      ASSERT_EQ(i, next_mark[static_cast<size_t>(t)]++);
    } else {
      ASSERT_EQ(entry.kind(), EventKind::kOptionsChange);
      EXPECT_EQ(entry.text.size(), 200u);
      ++options_changes;
    }
  }
  for (uint64_t n : next_event) EXPECT_EQ(n, kEventsPerThread);
  for (int n : next_mark) EXPECT_EQ(n, kMarksPerThread);
  EXPECT_EQ(options_changes, kMarkThreads * (kMarksPerThread / 500));
}

TEST(FslogWriterTest, DroppedRecordsAreCountedAndShowAsGaps) {
  const std::string path = TempLogPath("drops");
  constexpr uint64_t kEvents = 6000;
  uint64_t dropped = 0;
  {
    auto writer =
        OpenOrDie(path, {.buffer_count = 2, .write_delay_for_testing = absl::Milliseconds(30)});
    ASSERT_NE(writer, nullptr);
    for (uint64_t i = 0; i < kEvents; ++i) writer->OnEvent(SampleEvent(EventKind::kAlloc, i));
    ASSERT_TRUE(writer->Flush().ok());
    writer->OnEvent(SampleEvent(EventKind::kAlloc, kEvents));  // reveals drops at the tail
    dropped = writer->dropped_records();
  }
  EXPECT_GT(dropped, 0u);
  const ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.missing_records, dropped);
  EXPECT_EQ(result.entries.size() + dropped, kEvents + 1);
  ASSERT_FALSE(result.warnings.empty());
  EXPECT_NE(result.warnings[0].find("dropped by the writer"), std::string::npos);
  for (const LogEntry& entry : result.entries) EXPECT_EQ(IdOf(entry), entry.sequence);
}

TEST(FslogWriterTest, OpenReportsBadPatternsAndPaths) {
  EXPECT_EQ(FslogWriter::Open("/tmp/x_%q.fslog", WriterTestInfo()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FslogWriter::Open("/nonexistent-dir/x.fslog", WriterTestInfo()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      FslogWriter::Open("/tmp/x.fslog", WriterTestInfo(), {.buffer_count = 1}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(PathPatternTest, ExpandsPidRankAndPercent) {
  EXPECT_EQ(ExpandPathPattern("/logs/run_%p_%r.fslog", 123, 4).value(), "/logs/run_123_4.fslog");
  EXPECT_EQ(ExpandPathPattern("a%%p%%%r", 1, 2).value(), "a%p%2");
  EXPECT_EQ(ExpandPathPattern("plain", 1, 2).value(), "plain");
  EXPECT_FALSE(ExpandPathPattern("bad%", 1, 2).ok());
  EXPECT_FALSE(ExpandPathPattern("bad%x", 1, 2).ok());
  EXPECT_FALSE(ExpandPathPattern("", 1, 2).ok());
}

TEST(PathPatternTest, RankComesFromRankThenLocalRank) {
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(RankFromEnvironment(), 0);
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_EQ(RankFromEnvironment(), 3);
  setenv("RANK", "11", 1);
  EXPECT_EQ(RankFromEnvironment(), 11);
  setenv("RANK", "eleven", 1);
  EXPECT_EQ(RankFromEnvironment(), 3);
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
}

}  // namespace
}  // namespace fragscope::testing
