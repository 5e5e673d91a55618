// FslogWriter's crash behaviour, in child processes: the exit flush, the fatal-signal flush
// and its chaining to the application's handler, and the data-loss bound after kill -9.
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fslog/fslog_writer.h"
#include "gtest/gtest.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/fslog/fslog_writer_test_util.h"

namespace fragscope::testing {
namespace {

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
  auto writer = FslogWriter::Open(path, WriterTestInfo(), {.flush_interval = absl::Hours(1)});
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

TEST(FslogWriterCrashTest, ExitFlushesAWriterNeverDestroyed) {
  const std::string path = TempLogPath("exit");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ChildWrite(path, 1234, [](FslogWriter*) { std::exit(0); });
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
  if (pid == 0) ChildWrite(path, 2000, [sig](FslogWriter*) { raise(sig); });
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

TEST(FslogWriterCrashTest, SignalHandlerChainsToThePreviousHandler) {
  const std::string path = TempLogPath("chain");
  const int status = RunSelfAsChild("FslogWriterChildTest.PreviousSigtermHandlerRuns", path);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 42) << "the application's own SIGTERM handler did not run";
  ExpectAllEvents(path, 900);
}

TEST(FslogWriterChildTest, PreviousSigtermHandlerRuns) {
  const char* path = std::getenv("FRAGSCOPE_CHILD_LOG");
  if (path == nullptr) GTEST_SKIP() << "run by SignalHandlerChainsToThePreviousHandler";
  struct sigaction action = {};
  action.sa_handler = [](int) { _exit(42); };
  sigaction(SIGTERM, &action, nullptr);
  ChildWrite(path, 900, [](FslogWriter*) { raise(SIGTERM); });
}

// The kill -9 bound: records lost are at most the current buffer (one chunk, and at most about
// one flush interval of events) plus a buffer handed off just before the kill.
TEST(FslogWriterCrashTest, KillNineLosesAtMostOneBuffer) {
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
      auto writer = FslogWriter::Open(path, WriterTestInfo(), {.block_when_full = true});
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
}  // namespace fragscope::testing
