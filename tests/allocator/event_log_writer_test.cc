#include "allocator/event_log_writer.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/analysis/event_log_test_util.h"

namespace fragscope {
namespace {

using ::fragscope::testing::kAllocatorKinds;
using ::fragscope::testing::ReadFile;
using ::fragscope::testing::ReadResult;
using ::fragscope::testing::SameEvent;
using ::fragscope::testing::SampleEvent;
using ::fragscope::testing::TempLogPath;

EventLogHeaderInfo Info() {
  EventLogHeaderInfo info;
  info.device_name = "Simulated H100";
  info.device_total_bytes = 80 * kGiB;
  info.device_index = 1;
  info.allocator_options = "max_split_size_mb:256";
  return info;
}

std::unique_ptr<EventLogWriter> OpenOrDie(const std::string& path,
                                          const EventLogWriterOptions& options = {}) {
  auto writer = EventLogWriter::Open(path, Info(), options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  return writer.ok() ? *std::move(writer) : nullptr;
}

// Events are told apart by ptr: SampleEvent(kAlloc, id).ptr.
uint64_t IdOf(const LogEntry& entry) { return (entry.event().ptr - 0x7f0000000000) / 0x1000; }

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

TEST(EventLogWriterTest, RoundTripsEveryKindWithEveryField) {
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

TEST(EventLogWriterTest, HeaderDescribesProcessDeviceAndClock) {
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
  auto reader = EventLogReader::Open(writer->path());
  ASSERT_TRUE(reader.ok());
  const EventLogHeader& h = reader->header();
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
  EXPECT_NE(h.clock, EventLogClock::kUnknown);
  EXPECT_GT(h.start_monotonic_ns, 0u);
  EXPECT_EQ(writer->header().host, h.host);
  std::remove(writer->path().c_str());
}

TEST(EventLogWriterTest, TimestampsTrackTheMonotonicClock) {
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

TEST(EventLogWriterTest, OomIsOnDiskWhenOnEventReturns) {
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

TEST(EventLogWriterTest, FlushAndPeriodicTickMakeRecordsReadable) {
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

TEST(EventLogWriterTest, EightThreadsLoseNothing) {
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

TEST(EventLogWriterTest, DroppedRecordsAreCountedAndShowAsGaps) {
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

TEST(EventLogWriterTest, OpenReportsBadPatternsAndPaths) {
  EXPECT_EQ(EventLogWriter::Open("/tmp/x_%q.fslog", Info()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EventLogWriter::Open("/nonexistent-dir/x.fslog", Info()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(EventLogWriter::Open("/tmp/x.fslog", Info(), {.buffer_count = 1}).status().code(),
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

// --- Crash behaviour, in child processes -------------------------------------------------------

// Exit codes of a child that did not die as planned (sanitizers' own handlers exit with 1 or 66).
constexpr int kChildOpenFailed = 101;
constexpr int kChildSurvived = 102;

void NoCoreDumps() {
  rlimit limit = {0, 0};
  setrlimit(RLIMIT_CORE, &limit);
}

// Child: writes `events` allocs (ids 0..events-1), then runs `finish`. Never returns.
template <typename Finish>
[[noreturn]] void ChildWrite(const std::string& path, uint64_t events, Finish finish) {
  NoCoreDumps();
  auto writer = EventLogWriter::Open(path, Info(), {.flush_interval = absl::Hours(1)});
  if (!writer.ok()) _exit(kChildOpenFailed);
  for (uint64_t i = 0; i < events; ++i) (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, i));
  finish(writer->release());
  _exit(kChildSurvived);
}

int WaitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void ExpectAllEvents(const std::string& path, uint64_t events) {
  const ReadResult result = ReadFile(path);
  ASSERT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.entries.size(), events);
  for (uint64_t i = 0; i < events; ++i) EXPECT_EQ(IdOf(result.entries[i]), i);
}

TEST(EventLogWriterCrashTest, ExitFlushesAWriterNeverDestroyed) {
  const std::string path = TempLogPath("exit");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ChildWrite(path, 1234, [](EventLogWriter*) { std::exit(0); });
  const int status = WaitFor(pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ExpectAllEvents(path, 1234);
}

class FatalSignalTest : public ::testing::TestWithParam<int> {};

TEST_P(FatalSignalTest, HandlerWritesBufferedRecordsThenDies) {
  const int sig = GetParam();
  const std::string path = TempLogPath("signal");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  // 2000 events: two full chunks handed off (maybe not yet written) and a partial current one.
  if (pid == 0) ChildWrite(path, 2000, [sig](EventLogWriter*) { raise(sig); });
  const int status = WaitFor(pid);
  // Killed by the re-raised signal (a sanitizer's own SIGSEGV handler, chained to, may exit
  // with its own code instead).
  ASSERT_FALSE(WIFEXITED(status) &&
               (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kChildOpenFailed ||
                WEXITSTATUS(status) == kChildSurvived))
      << status;
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), sig);
  }
  ExpectAllEvents(path, 2000);
}

INSTANTIATE_TEST_SUITE_P(Signals, FatalSignalTest,
                         ::testing::Values(SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTERM),
                         [](const auto& info) { return std::string(sigabbrev_np(info.param)); });

// Re-runs this binary in a fresh process (so that no writer has installed handlers yet) with only
// `test` selected and FRAGSCOPE_CHILD_LOG=path; returns its wait status.
int RunSelfAsChild(const std::string& test, const std::string& path) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("FRAGSCOPE_CHILD_LOG", path.c_str(), 1);
    const std::string filter = "--gtest_filter=" + test;
    execl("/proc/self/exe", "/proc/self/exe", filter.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return WaitFor(pid);
}

TEST(EventLogWriterCrashTest, SignalHandlerChainsToThePreviousHandler) {
  const std::string path = TempLogPath("chain");
  const int status = RunSelfAsChild("EventLogWriterChildTest.PreviousSigtermHandlerRuns", path);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 42) << "the application's own SIGTERM handler did not run";
  ExpectAllEvents(path, 900);
}

TEST(EventLogWriterChildTest, PreviousSigtermHandlerRuns) {
  const char* path = std::getenv("FRAGSCOPE_CHILD_LOG");
  if (path == nullptr) GTEST_SKIP() << "run by SignalHandlerChainsToThePreviousHandler";
  struct sigaction action = {};
  action.sa_handler = [](int) { _exit(42); };
  sigaction(SIGTERM, &action, nullptr);
  ChildWrite(path, 900, [](EventLogWriter*) { raise(SIGTERM); });
}

// The kill -9 bound: records lost are at most the current buffer (one chunk, and at most about
// one flush interval of events) plus a buffer handed off just before the kill.
TEST(EventLogWriterCrashTest, KillNineLosesAtMostOneBuffer) {
  struct Shared {
    std::atomic<uint64_t> issued{0};
  };
  for (const bool paced : {true, false}) {
    SCOPED_TRACE(paced ? "paced" : "full speed");
    const std::string path = TempLogPath("kill");
    void* memory =
        mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(memory, MAP_FAILED);
    auto* shared = new (memory) Shared;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto writer = EventLogWriter::Open(path, Info(), {.block_when_full = true});
      if (!writer.ok()) _exit(kChildOpenFailed);
      for (uint64_t i = 0;; ++i) {
        (*writer)->OnEvent(SampleEvent(EventKind::kAlloc, i));
        shared->issued.store(i + 1, std::memory_order_release);
        if (paced && i % 10 == 9) usleep(1000);  // about 5-10k events per second
      }
    }
    const uint64_t target = paced ? 2500 : 3'000'000;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (shared->issued.load(std::memory_order_acquire) < target && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    kill(pid, SIGKILL);
    const int status = WaitFor(pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    const uint64_t issued = shared->issued.load(std::memory_order_acquire);
    munmap(memory, sizeof(Shared));

    const ReadResult result = ReadFile(path);
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.missing_records, 0u);
    for (size_t i = 0; i < result.entries.size(); ++i) ASSERT_EQ(IdOf(result.entries[i]), i);
    // One OnEvent may have been in progress: its record can be in the file while not counted.
    ASSERT_LE(result.entries.size(), issued + 1);
    const uint64_t lost = issued - std::min<uint64_t>(issued, result.entries.size());
    std::printf("[ kill -9 %s ] issued %lu, in file %zu, lost %lu, torn tail %lu bytes\n",
                paced ? "paced" : "full speed", issued, result.entries.size(), lost,
                result.torn_tail_bytes);
    if (paced) {
      EXPECT_LE(lost, kMaxChunkRecords);
    } else {
      EXPECT_LE(lost, 8 * kMaxChunkRecords);  // every buffer in flight, at worst
    }
  }
}

}  // namespace
}  // namespace fragscope
