// Hostile inputs and outputs: output files in a directory someone else can write to (links
// planted at the destination or at a temporary's name, stale temporaries, signals), outputs
// written all or none, traces given as streams (a pipe, a FIFO, standard input), huge or binary
// header texts, and damaged traces that were once accepted silently.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_replace.h"

#include "analysis/report/fslog_file_writer.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "cli/output_file.h"
#include "cli/temporary_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/file_contents.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;

// Names in `path`'s directory that start with `path`'s file name followed by `suffix`.
int CountBeside(const std::string& path, const std::string& suffix) {
  const std::filesystem::path p(path);
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path())) {
    n += entry.path().filename().string().starts_with(p.filename().string() + suffix);
  }
  return n;
}

// The reproducer: a link planted at the name a run's temporary once had.
TEST(HostileOutputTest, ALinkPlantedAtATemporaryNameIsNotFollowed) {
  const std::string log = FragmentedOomLog({.name = "small.fslog"});
  const std::string victim = TempPath("victim");
  const std::string out = TempPath("out.json");
  WriteFile(victim, "the victim's content");
  std::filesystem::create_symlink(victim, out + ".tmp-" + std::to_string(getpid()));
  const auto r = Fragscope({"analyze", log, "--no-sweep", "--json", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(victim), "the victim's content");
  EXPECT_FALSE(std::filesystem::is_symlink(out));
  EXPECT_THAT(ReadFile(out), HasSubstr("\"ranks\""));
}

TEST(HostileOutputTest, ALinkAtTheDestinationIsReplacedNotWrittenThrough) {
  const std::string victim = TempPath("victim");
  const std::string out = TempPath("report.json");
  WriteFile(victim, "the victim's content");
  std::filesystem::create_symlink(victim, out);
  ASSERT_OK(cli::WriteOutputFile(out, [](std::ostream& o) { o << "new"; }));
  EXPECT_FALSE(std::filesystem::is_symlink(out));
  EXPECT_EQ(ReadFile(out), "new");
  EXPECT_EQ(ReadFile(victim), "the victim's content");
}

TEST(HostileOutputTest, TheDestinationsModeIsKept) {
  const std::string out = TempPath("private.json");
  WriteFile(out, "old");
  ASSERT_EQ(chmod(out.c_str(), 0640), 0);
  ASSERT_OK(cli::WriteOutputFile(out, [](std::ostream& o) { o << "new"; }));
  struct stat st = {};
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(ReadFile(out), "new");
}

// A temporary's name for `out` as process `pid` would have made it.
std::string TemporaryOf(const std::string& out, pid_t pid) {
  const std::string name = cli::TemporaryName(std::filesystem::path(out).filename().string());
  // NAME.fragscope-tmp.HOST.PID.RANDOM: replace PID.
  const size_t random = name.rfind('.');
  const size_t pid_start = name.rfind('.', random - 1) + 1;
  return (std::filesystem::path(out).parent_path() /
          (name.substr(0, pid_start) + std::to_string(pid) + name.substr(random)))
      .string();
}

TEST(HostileOutputTest, StaleTemporariesOfDeadRunsAreRemovedAndOnlyThose) {
  const std::string out = TempPath("stale.json");
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // a pid that is certainly dead now
  const std::string dead = TemporaryOf(out, child);
  const std::string alive = TemporaryOf(out, getppid());
  const std::string link = TemporaryOf(out, child) + "0";  // not of the form: stays
  const std::string dead_link = TemporaryOf(out, child);   // another random part
  WriteFile(dead, "14 MB left by a killed run");
  WriteFile(alive, "another run's, still writing");
  WriteFile(link, "x");
  std::filesystem::create_symlink(link, dead_link);  // a link is never ours
  ASSERT_OK(cli::WriteOutputFile(out, [](std::ostream& o) { o << "new"; }));
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(link));
  EXPECT_TRUE(std::filesystem::is_symlink(dead_link));
  std::filesystem::remove(alive);
  std::filesystem::remove(link);
  std::filesystem::remove(dead_link);
}

TEST(HostileOutputDeathTest, SigtermRemovesOpenTemporaries) {
  const std::string out = TempPath("killed.json");
  const std::string note = TempPath("temporary-name");
  EXPECT_EXIT(
      {
        absl::StatusOr<std::unique_ptr<cli::OutputFile>> file = cli::OutputFile::Create(out);
        if (!file.ok()) _exit(3);
        WriteFile(note, (*file)->temporary());
        (void)(*file)->Write(std::string(1 << 20, 'x'));
        raise(SIGTERM);
        _exit(4);  // not reached
      },
      ::testing::KilledBySignal(SIGTERM), "");
  const std::string temporary = ReadFile(note);
  ASSERT_THAT(temporary, HasSubstr(".fragscope-tmp."));
  EXPECT_FALSE(std::filesystem::exists(temporary));
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(HostileOutputTest, SeveralOutputsAreWrittenAllOrNone) {
  const std::string json = TempPath("all.json");
  WriteFile(json, "the earlier report");
  EXPECT_THAT(
      cli::WriteOutputFiles({{json, [](std::ostream& o) { o << "new"; }},
                             {"/nonexistent-dir/r.html", [](std::ostream& o) { o << "x"; }}})
          .message(),
      HasSubstr("/nonexistent-dir/r.html: cannot write: No such file or directory"));
  EXPECT_EQ(ReadFile(json), "the earlier report");
  EXPECT_EQ(CountBeside(json, ".fragscope-tmp."), 0);
  // The reproducer: --html into a missing directory after --json.
  const auto r = Fragscope({"analyze", FragmentedOomLog({.name = "small.fslog"}), "--no-sweep",
                            "--json", json, "--html", "/nonexistent-dir/r.html"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(ReadFile(json), "the earlier report");
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("JSON report:")));
}

// Runs `fragscope ARGS` with `bytes` arriving through a pipe, whose read end the arguments name
// as "{}" (or standard input, for "-").
CommandRun RunWithPipe(std::vector<std::string> args, const std::string& bytes) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  std::thread writer([&] {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fds[1], bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(fds[1]);
  });
  int saved_stdin = -1;
  for (std::string& a : args) {
    if (a == "{}") a = "/dev/fd/" + std::to_string(fds[0]);
    if (a == "-") {
      saved_stdin = dup(STDIN_FILENO);
      dup2(fds[0], STDIN_FILENO);
    }
  }
  CommandRun r = Fragscope(args);
  close(fds[0]);
  if (saved_stdin >= 0) {
    dup2(saved_stdin, STDIN_FILENO);
    close(saved_stdin);
  }
  writer.join();
  return r;
}

TEST(StreamInputTest, EveryTraceCommandReadsAPipe) {
  const std::string log = FragmentedOomLog({.name = "small.fslog"});
  const std::string bytes = ReadFile(log);
  const auto file = Fragscope({"analyze", log, "--no-sweep"});
  ASSERT_EQ(file.code, 0) << file.err;
  const auto piped = RunWithPipe({"analyze", "{}", "--no-sweep"}, bytes);
  EXPECT_EQ(piped.code, 0) << piped.err;
  EXPECT_THAT(piped.out, HasSubstr("OOM"));
  const auto verify = RunWithPipe({"verify", "-"}, bytes);
  EXPECT_EQ(verify.code, 0) << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("faithful"));
  const auto sweep = RunWithPipe({"sweep", "{}", "--max-split-size-mb", "0"}, bytes);
  EXPECT_EQ(sweep.code, 0) << sweep.err;
  const std::string out = TempPath("from-pipe.pickle");
  const auto convert = RunWithPipe({"convert", "-", out}, bytes);
  ASSERT_EQ(convert.code, 0) << convert.err;
  // The pickle and a CSV back through a pipe.
  const auto pickle = RunWithPipe({"verify", "{}"}, ReadFile(out));
  EXPECT_EQ(pickle.code, 0) << pickle.err;
  const std::string csv =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,10:00:00.000001,allocate,0x1000,1048576,0x0\n"
      "1,10:00:00.000002,free,0x1000,1048576,0x0\n";
  const auto rmm = RunWithPipe({"analyze", "{}", "--no-sweep"}, csv);
  EXPECT_EQ(rmm.code, 0) << rmm.err;
}

TEST(StreamInputTest, AFifoIsReadAsAStream) {
  const std::string bytes = ReadFile(FragmentedOomLog({.name = "small.fslog"}));
  const std::string fifo = TempPath("trace.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { WriteFile(fifo, bytes); });
  const auto r = Fragscope({"verify", fifo});
  writer.join();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("faithful"));
}

TEST(StreamInputTest, AStreamThatIsNoTraceIsRefusedAtOnce) {
  // /dev/zero never ends: the first bytes decide, and nothing more is read.
  const auto zero = Fragscope({"verify", "/dev/zero"});
  EXPECT_EQ(zero.code, 1);
  EXPECT_THAT(zero.err, HasSubstr("/dev/zero: not a format fragscope reads"));
  const auto empty = RunWithPipe({"analyze", "{}"}, "");
  EXPECT_EQ(empty.code, 1);
  EXPECT_THAT(empty.err, HasSubstr("the stream is empty"));
}

// Values accepted silently before: now refused as usage errors, naming the flag and value.
TEST(HostileFlagsTest, ZeroThreadsAndAZeroFractionAreRefused) {
  const std::string log = FragmentedOomLog({.name = "small.fslog"});
  const auto threads = Fragscope({"analyze", log, "--threads", "0"});
  EXPECT_EQ(threads.code, 2);
  EXPECT_THAT(threads.err, HasSubstr("--threads 0: expected 1 to"));
  const auto fraction = Fragscope({"analyze", log, "--conf", "per_process_memory_fraction:0"});
  EXPECT_EQ(fraction.code, 2);
  EXPECT_THAT(fraction.err, HasSubstr("per_process_memory_fraction:0 caps the device at 0 bytes"));
}

// A log with `options` as its header's settings: a segment at `segment` of 20 MiB and one
// allocation of 2 MiB in it.
std::string RawLog(const std::string& options, DevicePtr segment) {
  const std::string path = TempPath("raw.fslog");
  FslogHeader header;
  header.device_total_bytes = 64 * kMiB;
  header.device_name = "simulated test GPU";
  header.allocator_options = options;
  header.start_monotonic_ns = 1'000'000'000;
  auto writer = *FslogFileWriter::Open(path, header);
  AllocatorEvent e;
  e.kind = EventKind::kSegmentAlloc;
  e.pool = PoolKind::kLarge;
  e.ptr = e.segment = segment;
  e.bytes = 20 * kMiB;
  writer->Append(e, 1'000'001'000);
  e.kind = EventKind::kAlloc;
  e.bytes = e.requested_bytes = 2 * kMiB;
  e.split_bytes = 18 * kMiB;
  writer->Append(e, 1'000'002'000);
  EXPECT_OK(writer->Close());
  return path;
}

// 64 KiB of every byte value, as a damaged header's settings.
std::string BinaryText() {
  std::string text(64 * 1024, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7 + 1);
  return text;
}

TEST(HostileTextTest, ABinaryOptionsTextIsQuotedAsAShortExcerpt) {
  const std::string log = RawLog(BinaryText(), 0x7f0000000000);
  for (const char* command : {"analyze", "verify", "sweep", "convert"}) {
    std::vector<std::string> args = {command, log};
    if (std::string(command) == "convert") args.push_back(TempPath("out.fslog"));
    const auto r = Fragscope(args);
    EXPECT_EQ(r.code, 1) << command;
    EXPECT_THAT(r.err, HasSubstr(log + ": the trace's allocator settings '")) << command;
    EXPECT_THAT(r.err, HasSubstr("... (65536 bytes, 65456 left out)")) << command;
    EXPECT_LT(r.err.size() + r.out.size(), 1000u) << command;
  }
  const auto dump = Fragscope({"dump", log, "--header"});
  EXPECT_EQ(dump.code, 0) << dump.err;
  EXPECT_THAT(dump.out, HasSubstr("options: '\\x01\\x08\\x0f"));
  EXPECT_THAT(dump.out, HasSubstr("... (65536 bytes, 65456 left out)'"));
  EXPECT_LT(dump.out.size(), 2000u);
}

// Settings that parse, padded to 64 KiB: the report shows the settings replayed, not the text.
TEST(HostileTextTest, ALongOptionsTextThatParsesIsNotEchoed) {
  const std::string options = "max_split_size_mb:128" + std::string(64 * 1024, ' ');
  const auto r = Fragscope({"analyze", RawLog(options, 0x7f0000000000), "--no-sweep"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("allocator settings: max_split_size_mb:128\n"));
  EXPECT_LT(r.out.size() + r.err.size(), 16000u);
}

TEST(HostileTraceTest, ASegmentThatWrapsPastTheAddressSpaceIsAnError) {
  const std::string log = RawLog("", 0xFFFF'FFFF'FF00'0000);
  for (const char* command : {"verify", "analyze"}) {
    const auto r = Fragscope({command, log, "--no-sweep"});
    const auto v = std::string(command) == "verify" ? Fragscope({command, log}) : r;
    EXPECT_EQ(v.code, 1) << command << v.out;
    EXPECT_THAT(v.err, HasSubstr(log + ": event 0: segment_alloc at 0xffffffffff000000 of 20971520 "
                                       "bytes ends past the last address (2^64)"))
        << command;
  }
}

TEST(HostileTraceTest, ASnapshotBlockLargerThanItsSegmentIsNotRebuiltSilently) {
  PyTorchSnapshot snapshot;
  SnapshotSegment& seg = snapshot.segments.emplace_back();
  seg.address = 0x7f0000000000;
  seg.total_size = 2 * kMiB;
  SnapshotBlock& block = seg.blocks.emplace_back();
  block.address = seg.address;
  block.size = block.requested_size = 30 * kMiB;
  block.state = BlockState::kActiveAllocated;
  auto& trace = snapshot.device_traces.emplace_back();
  for (TraceAction action :
       {TraceAction::kAlloc, TraceAction::kFreeRequested, TraceAction::kFreeCompleted}) {
    SnapshotTraceEntry& e = trace.emplace_back();
    e.action = action;
    e.addr = 0x7e0000000000;
    e.size = kMiB;
  }
  const std::string path = TempPath("bad-block.pickle");
  ASSERT_OK(WritePyTorchSnapshotFile(snapshot, path));
  const auto r = Fragscope({"analyze", path, "--no-sweep"});
  EXPECT_EQ(r.code, 0) << r.err;
  // Warnings are wrapped at 100 columns: compare with single spaces.
  const std::string text = absl::StrReplaceAll(r.out + r.err, {{"\n    ", " "}});
  EXPECT_THAT(text, HasSubstr("the segment at 0x7f0000000000 (2097152 bytes) that existed before "
                              "the trace is not rebuilt: its allocated block at 0x7f0000000000 of "
                              "31457280 bytes does not lie in it"));
}

TEST(HostileTraceTest, ConvertSaysWhichAllocationsTheReplayRefused) {
  // Requests of 1 EiB and more, which PyTorch refuses outright: nothing of them is written.
  const std::string csv = TempPath("huge.csv");
  WriteFile(csv,
            "Thread,Time,Action,Pointer,Size,Stream\n"
            "1,10:00:00.000001,allocate,0x1000,9223372036854775808,0x0\n"
            "1,10:00:00.000002,allocate,0x2000,9223372036854775808,0x0\n"
            "1,10:00:00.000003,free,0x1000,9223372036854775808,0x0\n"
            "1,10:00:00.000004,free,0x2000,9223372036854775808,0x0\n"
            "1,10:00:00.000005,allocate,0x3000,9223372036854775808,0x0\n");
  // Every output says it, in the same words (the Chrome trace JSON too).
  std::string first_warning, json;
  for (const char* name : {"refused.fslog", "refused.pickle", "refused.json"}) {
    const std::string out = TempPath(name);
    const auto r = Fragscope({"convert", csv, out});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("3 allocations of the trace (the first at event")) << name;
    EXPECT_THAT(r.err, HasSubstr("ran out of memory in")) << name;
    const std::string warning = r.err.substr(r.err.find("3 allocations of the trace"));
    if (first_warning.empty()) first_warning = warning;
    EXPECT_EQ(warning, first_warning) << name;
    json = out;
  }
  // The Chrome trace has the replay's OOMs as instant events.
  EXPECT_THAT(ReadFile(json), HasSubstr("\"in_trace\":false"));
}

TEST(HostileOutputTest, ConvertsWriteErrorsCarryTheSystemsReason) {
  const std::string log = FragmentedOomLog({.name = "small.fslog"});
  const auto missing = Fragscope({"convert", log, "/nonexistent-dir/out.fslog"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err,
              HasSubstr("/nonexistent-dir/out.fslog: cannot write: No such file or directory"));
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (const char* to : {"fslog", "pickle", "chrome"}) {
    const auto full = Fragscope({"convert", log, "/dev/full", "--to", to});
    EXPECT_EQ(full.code, 1) << to;
    EXPECT_THAT(full.err, HasSubstr("/dev/full: write failed: No space left on device")) << to;
  }
}

TEST(StreamInputTest, TheTraceCommandsHelpSaysStreamsAreRead) {
  for (const char* command : {"analyze", "verify", "sweep", "convert", "summarize"}) {
    const auto r = Fragscope({command, "--help"});
    EXPECT_EQ(r.code, 0) << command;
    EXPECT_THAT(r.out, HasSubstr("`-` (standard input) or a stream (a pipe, a FIFO")) << command;
  }
}

// Settings the trace records but fragscope does not simulate: the error names the file.
TEST(HostileTextTest, AnotherBackendInTheTracesSettingsNamesTheFile) {
  TraceBuilder t(64 * kMiB, "backend:cudaMallocAsync", "async.fslog");
  t.Free(t.Alloc(4 * kMiB));
  const std::string log = t.Finish();
  const auto r = Fragscope({"analyze", log, "--no-sweep"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr(log + ": the trace's allocator settings"));
  EXPECT_THAT(r.err, HasSubstr("backend:cudaMallocAsync is not simulated"));
}

}  // namespace
}  // namespace fragscope::testing
