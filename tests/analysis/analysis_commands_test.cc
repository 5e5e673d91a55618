// The analyzer's commands end to end through the dispatcher: outputs, exit codes, and a clear
// message naming the problem for every kind of bad input.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "analysis/report/fslog_file_writer.h"
#include "estimator/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string FragmentedLog(int32_t rank = 0, int32_t world_size = 0) {
  return FragmentedOomLog({.name = "rank.fslog", .rank = rank, .world_size = world_size});
}

std::string QuietLog(int32_t rank = 0, int32_t world_size = 0) {
  TraceBuilder t(64 * kMiB, "", "quiet.fslog", rank, world_size);
  t.Free(t.Alloc(10 * kMiB));
  return t.Finish();
}

std::string Oracle(const std::string& name) {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/" + name + ".pickle";
}

// An RMM log named `name` in the test's directory: the header, then `rows`.
std::string RmmCsv(const std::string& name, const std::string& rows) {
  const std::string path = TempPath(name);
  std::ofstream(path) << "Thread,Time,Action,Pointer,Size,Stream\n" << rows;
  return path;
}

TEST(AnalysisCommandsTest, EveryCommandHasHelp) {
  for (const char* command : {"analyze", "verify", "sweep", "convert", "demo"}) {
    CommandRun r = Fragscope({command, "--help"});
    EXPECT_EQ(r.code, 0) << command;
    EXPECT_THAT(r.out, HasSubstr("usage: fragscope")) << command;
  }
}

TEST(AnalysisCommandsTest, AnalyzeExplainsTheOom) {
  const std::string json = TempPath("report.json");
  const std::string html = TempPath("report.html");
  CommandRun r =
      Fragscope({"analyze", FragmentedLog(), "--json", json, "--html", html, "--threads", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cause: fragmentation"));
  EXPECT_THAT(r.out, HasSubstr("Sweep:"));
  EXPECT_THAT(r.out, HasSubstr("memory_summary()"));
  EXPECT_GT(std::filesystem::file_size(json), 1000u);
  EXPECT_GT(std::filesystem::file_size(html), 1000u);
}

TEST(AnalysisCommandsTest, AnalyzeLogWithoutOomSaysSo) {
  CommandRun r = Fragscope({"analyze", QuietLog(), "--no-sweep"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Out of memory: none in the trace or the replay."));
}

TEST(AnalysisCommandsTest, AnalyzeSnapshotWithModel) {
  CommandRun r = Fragscope({"analyze", Oracle("gpt2_plain"), "--no-sweep", "--at", "3000",
                            "--model", "gpt2-small:seq=512,micro_batch=4"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Layout after event 3000 ("));
  EXPECT_THAT(r.out, Not(HasSubstr("the trace ends before")));
  EXPECT_THAT(r.out, HasSubstr("Theoretical footprint"));
}

TEST(AnalysisCommandsTest, AnalyzeAtPastTheEndSaysTheTraceEndsFirst) {
  CommandRun r = Fragscope({"analyze", QuietLog(), "--no-sweep", "--at", "99999999"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("; the trace ends before --at 99999999)"));
}

TEST(AnalysisCommandsTest, AnalyzeRmmLogWithCapacity) {
  const std::string csv = RmmCsv("rmm.csv",
                                 "1,10:00:00.000001,allocate,0x7f0000000000,41943040,0\n"
                                 "1,10:00:00.000002,allocate,0x7f0002800000,1048576,0\n"
                                 "1,10:00:00.000003,free,0x7f0002800000,1048576,0\n"
                                 "1,10:00:00.000004,allocate failure,(nil),31457280,0\n");
  CommandRun r = Fragscope({"analyze", csv, "--capacity", "64MiB", "--no-sweep", "--no-summary"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(rmm-csv"));
  EXPECT_THAT(r.out, HasSubstr("cause: capacity"));
  EXPECT_THAT(r.out, HasSubstr("2 allocations, 1 free\n"));
  CommandRun no_capacity = Fragscope({"analyze", csv, "--no-sweep", "--no-summary"});
  EXPECT_THAT(no_capacity.out, HasSubstr("(--capacity)"));
  EXPECT_THAT(no_capacity.out, HasSubstr("allocated 41.00 MiB"));  // not the dropped request
  EXPECT_THAT(no_capacity.out, HasSubstr("cause: not_reproduced"));
  EXPECT_THAT(no_capacity.out, Not(HasSubstr("outside")));
  EXPECT_EQ(Fragscope({"verify", csv}).code, 1);
}

TEST(AnalysisCommandsTest, SeveralRanksNameTheWorst) {
  CommandRun r = Fragscope({"analyze", QuietLog(0, 2), FragmentedLog(1, 2), "--no-sweep"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("fragscope analysis of 2 ranks"));
  EXPECT_THAT(r.out, HasSubstr("Worst rank (>): rank 1 ran out of memory first"));
}

// Two ranks that fail at the same moment tie; the lower rank is shown whatever the order of
// the paths (it was the first path's).
TEST(AnalysisCommandsTest, RanksThatFailTogetherTie) {
  const std::string rank1 = TempPath("tie-rank1.fslog");
  std::filesystem::copy_file(FragmentedLog(1, 2), rank1,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string rank0 = FragmentedLog(0, 2);
  for (const auto& [first, second] : {std::pair(rank0, rank1), std::pair(rank1, rank0)}) {
    CommandRun r = Fragscope({"analyze", first, second, "--no-sweep", "--no-summary"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("ranks 0, 1 ran out of memory at the same moment"));
    EXPECT_THAT(r.out, HasSubstr("rank 0 shown)"));
  }
}

TEST(AnalysisCommandsTest, BadInputGetsAClearMessage) {
  const std::string empty = TempPath("empty.fslog");
  std::ofstream(empty).close();
  const std::string garbage = TempPath("garbage.bin");
  std::ofstream(garbage) << "hello, not a trace";
  FslogHeader header;
  header.device_total_bytes = kGiB;
  const std::string no_events = TempPath("no-events.fslog");
  ASSERT_OK((*FslogFileWriter::Open(no_events, header))->Close());
  const std::string other_device = TempPath("other-device.fslog");
  {
    std::unique_ptr<FslogFileWriter> w = *FslogFileWriter::Open(other_device, header);
    AllocatorEvent e;
    e.kind = EventKind::kSegmentAlloc;
    e.device = 3;
    e.ptr = 0x1000000;
    e.bytes = 2 * kMiB;
    w->Append(e, 1);
    ASSERT_OK(w->Close());
  }
  // A header that claims a 1 PiB device.
  const std::string huge_device = TempPath("huge-device.fslog");
  {
    FslogHeader huge = header;
    huge.device_total_bytes = uint64_t{1} << 50;
    std::unique_ptr<FslogFileWriter> w = *FslogFileWriter::Open(huge_device, huge);
    AllocatorEvent e;
    e.kind = EventKind::kAlloc;
    e.ptr = 0x1000000;
    e.bytes = e.requested_bytes = 2 * kMiB;
    w->Append(e, 1);
    ASSERT_OK(w->Close());
  }
  // A log cut inside its only chunk (a job killed while the chunk was being written): empty, and
  // the messages say why.
  const std::string torn = TempPath("torn.fslog");
  {
    std::ifstream in(QuietLog(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(torn, std::ios::binary) << bytes.substr(0, bytes.size() - 10);
  }
  const std::string no_traces_dir = TempPath("no_traces");
  std::filesystem::create_directories(no_traces_dir);
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"analyze"}, 2, "no trace given"},
      {{"analyze", QuietLog(), "--bogus"}, 2, "unknown flag '--bogus'"},
      {{"sweep", "--bogus"}, 2, "unknown flag '--bogus'\nRun 'fragscope sweep --help' for usage."},
      {{"analyze", QuietLog(), "--json", "a.json", "--json=b.json"}, 2, "flag --json given twice"},
      {{"analyze", QuietLog(), "--no-sweep", "--max-split-size-mb", "64"},
       2,
       "--max-split-size-mb sets the sweep's grid, and --no-sweep skips the sweep"},
      {{"analyze", "/nonexistent/trace.fslog", "--conf", "backend:cudaMallocAsync"},
       2,
       "backend:cudaMallocAsync is not simulated"},
      // A bad grid value is a usage error, found before the trace is read (it was exit 1 after).
      {{"analyze", "/nonexistent/trace.fslog", "--max-split-size-mb", "10"},
       2,
       "max_split_size_mb: 10 is too small, must be >= 20"},
      {{"convert", QuietLog(), "x.json", "--capacity", "1GiB", "--capacity", "2GiB"},
       2,
       "flag --capacity given twice"},
      {{"analyze", "/nonexistent/trace.fslog"}, 1, "cannot open the file: No such file"},
      // A directory stands for its traces (several: the ranks of a job); none is an error.
      {{"analyze", no_traces_dir}, 1, "a directory with no trace"},
      {{"verify", no_traces_dir}, 1, "is a directory, not a trace file"},
      {{"analyze", torn}, 1, "torn tail: incomplete chunk"},
      {{"verify", torn}, 1, "torn tail: incomplete chunk"},
      {{"analyze", empty}, 1, "the file is empty"},
      {{"analyze", garbage}, 1, "not a format fragscope reads"},
      {{"analyze", no_events}, 1, "the trace is empty"},
      {{"analyze", other_device}, 1, "mixed devices"},
      {{"analyze", QuietLog(0, 2), QuietLog(0, 2)}, 1, "not the ranks of one job"},
      {{"analyze", QuietLog(0, 2), QuietLog(1, 4)}, 1, "not the ranks of one job"},
      {{"analyze", QuietLog(), "--capacity", "lots"}, 2, "--capacity expects a size"},
      // Flag values are usage errors, found before any trace is replayed.
      {{"analyze", QuietLog(), "--model", "no-such-model"}, 2, "unknown preset 'no-such-model'"},
      {{"analyze", QuietLog(), "--model", "gpt2-small:seq=x"}, 2, "seq expects"},
      {{"analyze", QuietLog(), "--conf", "bogus:1"}, 2, "--conf 'bogus:1': Unrecognized key"},
      {{"sweep", QuietLog(), "--conf", "max_split_size_mb:10"}, 2, "must be >= 20"},
      {{"verify", QuietLog(), "--conf", "expandable_segments:maybe"}, 2, "--conf"},
      {{"convert", QuietLog(), TempPath("c.json"), "--conf", "x"}, 2, "--conf 'x'"},
      {{"verify", no_events}, 1, "the trace is empty"},
      // Once cast to an int (2^32 became device 0).
      {{"verify", QuietLog(), "--device", "4294967296"}, 2, "not a CUDA device ordinal (0 to 127)"},
      // No capacity in the snapshot: reservations are sized for 1 TiB, so addresses differ.
      {{"verify", Oracle("micro_expandable")}, 1, "--capacity so reservations land"},
      {{"sweep", QuietLog(), "--max-split-size-mb", "10"}, 2, "max_split_size_mb"},
      {{"convert", QuietLog(), TempPath("out.txt")}, 2, "cannot tell the output format"},
      {{"convert", QuietLog(), TempPath("out.json"), "--to", "bogus"},
       2,
       "--to 'bogus': expected fslog, pickle or chrome"},
      {{"convert", torn, torn}, 2, "is the input file"},
      {{"analyze", torn, "--html", torn}, 2, "--html '" + torn + "' is an input trace"},
      {{"sweep", torn, "--json", torn}, 2, "--json '" + torn + "' is an input trace"},
      {{"demo", "--steps", "x"}, 2, "--steps expects"},
      // Bounds that once crashed (std::bad_alloc) or replayed nonsense (every expandable row of
      // the sweep at 0 bytes on a 10^8 GiB device).
      {{"demo", "--steps", "100000000"}, 2, "--steps must be at most 1000"},
      {{"demo", "--capacity-gib", "100000000"}, 2, "--capacity-gib must be at most 4096"},
      {{"demo", "--capacity-gib", "0.5"}, 2, "--capacity-gib expects a positive whole number"},
      {{"demo", "--capacity-gib", "0"}, 2, "--capacity-gib expects a positive whole number"},
      {{"demo", "--micro-batch", "5000"}, 2, "--micro-batch must be at most 4096"},
      {{"analyze", QuietLog(), "--capacity", "5TiB"}, 2, "--capacity must be at most 4TiB"},
      {{"analyze", QuietLog(), "--threads", "4294967297"},
       2,
       "--threads 4294967297: expected 1 to 1024"},
      {{"analyze", huge_device}, 1, "too large to simulate (at most 4 TiB)"},
      // A cap of 0 bytes was explained as fragmentation with the whole device "available".
      {{"analyze", QuietLog(), "--allowed", "0"}, 2, "--allowed must be at least 2MiB"},
      // Accepted silently once: both caps (one ignored), a cap above the device, a device the
      // log does not record, nan as "off", and the largest count as "not swept".
      {{"analyze", QuietLog(), "--memory-fraction", "0.5", "--allowed", "8MiB"},
       2,
       "--memory-fraction and --allowed both set the cap"},
      {{"analyze", QuietLog(), "--allowed", "1GiB"}, 1, "more than the 64.00 MiB device"},
      {{"analyze", QuietLog(), "--device", "3"}, 1, "--device 3, but this log records device 0"},
      {{"sweep", QuietLog(), "--gc-threshold", "nan"}, 2, "--gc-threshold expects numbers"},
      {{"sweep", QuietLog(), "--max-split-size-mb", "0,18446744073709551615"}, 2, "too large"},
      {{"analyze", QuietLog(), "--memory-fraction", "1e-300"},
       1,
       "--memory-fraction 1e-300 caps the 64.00 MiB device at 0 bytes, below the smallest segment"},
  };
  for (const Case& c : cases) {
    CommandRun r = Fragscope(c.args);
    EXPECT_EQ(r.code, c.code) << c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : "") << "\n"
                              << r.err;
    EXPECT_THAT(r.err + r.out, HasSubstr(c.message)) << c.args[0];
  }
}

TEST(AnalysisCommandsTest, VerifyOwnLogAndOracle) {
  CommandRun own = Fragscope({"verify", FragmentedLog()});
  EXPECT_EQ(own.code, 0) << own.out << own.err;
  EXPECT_THAT(own.out, HasSubstr("faithful ("));
  CommandRun oracle = Fragscope(
      {"verify", Oracle("micro_fraction_3g"), "--capacity", "150109880320", "--allowed", "3GiB"});
  EXPECT_EQ(oracle.code, 0) << oracle.out << oracle.err;
  EXPECT_THAT(oracle.out, HasSubstr("30 OOMs match"));
  CommandRun expandable =
      Fragscope({"verify", Oracle("micro_expandable"), "--capacity", "150109880320"});
  EXPECT_EQ(expandable.code, 0) << expandable.out << expandable.err;
  EXPECT_THAT(expandable.out,
              HasSubstr("252 segment events (153 segment maps, 99 unmaps), 1637 allocations"));
  CommandRun uncapped = Fragscope({"verify", Oracle("micro_fraction_3g")});
  EXPECT_EQ(uncapped.code, 1);
  EXPECT_THAT(uncapped.out, HasSubstr("diverged at event"));
  EXPECT_THAT(uncapped.out, HasSubstr("--memory-fraction"));
  // The hints are wrapped at 100 columns.
  CommandRun no_capacity = Fragscope({"verify", Oracle("micro_expandable")});
  EXPECT_EQ(no_capacity.code, 1);
  EXPECT_THAT(no_capacity.out, HasSubstr("  hint: the trace uses expandable segments"));
  for (const CommandRun* run : {&expandable, &uncapped, &no_capacity}) {
    std::istringstream lines(run->out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("    ", 0) == 0) continue;  // the trace's own events, as recorded
      EXPECT_LE(line.size(), 100u) << line;
    }
  }
}

// --conf settings that get a snapshot's job past its OOMs under the job's cap: the explanation
// says whose figures it shows (a snapshot's OOM record has none of the job's), quotes PyTorch's
// segment size, and the peaks are those of the replay under the settings, as in the sweep row and
// memory_summary (the headline once left the served requests out: 2.83 against 2.98 GiB).
TEST(AnalysisCommandsTest, ConfThatAvoidsASnapshotsOomsKeepsOneSetOfFigures) {
  const std::string json = TempPath("conf64.json");
  CommandRun r = Fragscope({"analyze", Oracle("micro_fraction_3g"), "--capacity", "150109880320",
                            "--allowed", "3GiB", "--conf", "max_split_size_mb:64", "--json", json});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("PyTorch: \"Tried\n  to allocate 162.00 MiB\")"));
  EXPECT_THAT(r.out, HasSubstr("so they avoid this OOM. The\n      figures below are the "
                               "replay's under --conf"));
  EXPECT_THAT(r.out, Not(HasSubstr("figures below are the job's")));
  EXPECT_THAT(r.out, HasSubstr("reserved 2.98 GiB\n"));
  EXPECT_THAT(r.out, HasSubstr("* max_split_size_mb:64 [--conf]         no      2.98 GiB"));
  std::ifstream in(json);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(doc, HasSubstr("\"reserved_bytes\": 3204448256,"));
  EXPECT_THAT(doc, HasSubstr("\"reserved_bytes.all.peak\": 3204448256,"));
  // The explanation's cap is the one the replay applied (it was null).
  EXPECT_THAT(doc, HasSubstr("\"allowed_bytes\": 3221225472,\n            \"limit_bytes\""));
}

// PyTorch refuses a request of 1 EiB or more before looking at the pools; the explanation said
// "block 0 bytes" and fragmentation for one.
TEST(AnalysisCommandsTest, ARequestOfAnExabyteIsACapacityOom) {
  const std::string csv =
      RmmCsv("exabyte.csv",
             "1,10:00:00.000001,allocate,0x7f1000000000,1024,0\n"
             "1,10:00:00.000002,allocate,0x7f2000000000,1152921504606846976,0\n");
  CommandRun r = Fragscope({"analyze", csv, "--no-sweep", "--no-summary"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cause: capacity"));
  EXPECT_THAT(r.out, HasSubstr("\"Tried to allocate more than 1EB"));
  EXPECT_THAT(r.out, Not(HasSubstr("block 0 bytes")));
}

// A trace action fragscope does not know (a newer PyTorch's) is skipped with a warning that names
// it (it was skipped silently).
TEST(AnalysisCommandsTest, UnknownSnapshotActionsAreNamed) {
  CommandRun r =
      Fragscope({"analyze", std::string(FRAGSCOPE_TEST_DATA_DIR) + "/pickle/snapshot.p4.pickle",
                 "--device", "1", "--no-sweep", "--no-summary"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 trace entry with an action fragscope does not know (the "
                               "first: 'future_action') skipped"));
}

// A free whose size is not its allocation's is said (the replay frees by address).
TEST(AnalysisCommandsTest, RmmFreeOfAnotherSizeIsNamed) {
  const std::string csv = RmmCsv("mismatch.csv",
                                 "1,10:00:00.000001,allocate,0x7f1000000000,4096,0\n"
                                 "1,10:00:00.000002,free,0x7f1000000000,8192,0\n");
  CommandRun r = Fragscope({"analyze", csv, "--no-sweep", "--no-summary"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 free gives a size other than the"));
  EXPECT_THAT(r.out, HasSubstr("line 3 frees 8192 bytes at 0x7f1000000000, allocated as 4096"));
}

TEST(AnalysisCommandsTest, SweepPrintsTheTableAndRecommendation) {
  CommandRun r =
      Fragscope({"sweep", FragmentedLog(), "--max-split-size-mb", "0,128", "--threads", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("max_split_size_mb:128"));
  EXPECT_THAT(r.out, HasSubstr("(default) [trace]"));
  EXPECT_THAT(r.out, HasSubstr("Recommended"));
}

// A snapshot records no empty_cache() calls: they are inferred once, under the trace's own
// settings, and every other replay makes exactly those calls. Inferred from each row's own state,
// the job's retry-ladder releases were taken for empty_cache() calls in rows with other settings,
// and the pickle's sweep came out lower than the same trace's .fslog (3.12 vs 3.44 GiB).
TEST(AnalysisCommandsTest, ASnapshotSweepsAsItsFslogDoes) {
  const std::string log =
      std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/h100_fragmentation_oom.fslog";
  const std::vector<std::string> cap = {"--memory-fraction", "0.05051862997816944", "--capacity",
                                        "85017493504"};
  const std::string pickle = TempPath("h100.pickle");
  std::vector<std::string> convert = {"convert", log, pickle};
  convert.insert(convert.end(), cap.begin(), cap.end());
  ASSERT_EQ(Fragscope(convert).code, 0);
  const auto rows = [&](const std::string& trace) {
    std::vector<std::string> args = {"sweep", trace, "--threads", "2"};
    args.insert(args.end(), cap.begin(), cap.end());
    const std::string out = Fragscope(args).out;
    // The table up to the recommendation, without the OOM's event index (a snapshot numbers
    // its events without the log's markers).
    std::string table = out.substr(out.find("  configuration"));
    table = table.substr(0, table.find("  Recommended"));
    for (size_t at = table.find("yes, event "); at != std::string::npos;
         at = table.find("yes, event ", at)) {
      size_t end = at + 11;
      while (end < table.size() && absl::ascii_isdigit(static_cast<unsigned char>(table[end]))) {
        ++end;
      }
      table.replace(at, end - at, "yes");
    }
    return table;
  };
  EXPECT_EQ(rows(pickle), rows(log));
  EXPECT_THAT(rows(pickle), HasSubstr("* (default)                            yes      3.44 GiB"));
}

// A job's OOM that the conversion's replay serves (the cap is not in this log) stays an OOM in
// the output, with a warning; the request the replay served is not written (it was: 22 allocs
// where the job made 21, and no oom record).
TEST(AnalysisCommandsTest, ConvertKeepsAnOomTheReplayDoesNotReproduce) {
  const std::string log =
      std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/h100_fragmentation_oom.fslog";
  for (const char* name : {"uncapped.fslog", "uncapped.pickle"}) {
    const std::string out = TempPath(name);
    CommandRun convert = Fragscope({"convert", log, out});
    ASSERT_EQ(convert.code, 0) << convert.err;
    EXPECT_THAT(convert.err, HasSubstr("1 OOM of the trace did not happen in the replay"));
    if (absl::EndsWith(out, ".pickle")) {
      EXPECT_THAT(convert.err, HasSubstr("11 markers (phase annotations) of the trace are not"));
    }
    CommandRun analyze =
        Fragscope({"analyze", out, "--no-sweep", "--no-summary", "--capacity", "85017493504"});
    EXPECT_EQ(analyze.code, 0) << analyze.err;
    EXPECT_THAT(analyze.out, HasSubstr("; 21 allocations, 21 frees"));
    EXPECT_THAT(analyze.out, HasSubstr("Out of memory: 1 OOM"));
    EXPECT_THAT(analyze.out, HasSubstr("request 316.00 MiB"));
    if (absl::EndsWith(out, ".fslog")) {
      // The oom record names the request's pool (it said small for any request).
      EXPECT_THAT(Fragscope({"dump", out, "--kind", "oom"}).out, HasSubstr("pool=large"));
    }
  }
}

// A snapshot's state before its first event goes into the .fslog as state records (it was left
// out: the converted log's peaks read 2.21 GiB reserved instead of 2.47), and the analysis of the
// converted log is the snapshot's; a capacity the snapshot does not record is not written as if
// recorded (it read "(log header)").
TEST(AnalysisCommandsTest, ConvertOfASnapshotToFslogKeepsTheStateBeforeTheTrace) {
  const std::string out = TempPath("gpt2_plain.fslog");
  CommandRun convert = Fragscope({"convert", Oracle("gpt2_plain"), out});
  ASSERT_EQ(convert.code, 0) << convert.err;
  EXPECT_THAT(convert.err, Not(HasSubstr("existed before")));
  CommandRun state = Fragscope({"dump", out, "--kind", "state_segment,state_block"});
  EXPECT_EQ(std::count(state.out.begin(), state.out.end(), '\n'), 9 + 52) << state.out;
  EXPECT_THAT(state.out, HasSubstr("#0 +0.000000s state_segment  ptr=0x"));
  EXPECT_THAT(Fragscope({"dump", out, "--from", "61", "--to", "61"}).out, HasSubstr("#61 "));
  CommandRun from_snapshot = Fragscope({"analyze", Oracle("gpt2_plain"), "--no-sweep"});
  CommandRun analyze = Fragscope({"analyze", out, "--no-sweep"});
  ASSERT_EQ(analyze.code, 0) << analyze.err;
  const std::string peaks =
      "allocated 2.22 GiB   active 2.22 GiB   requested 2.21 GiB   reserved 2.47 GiB";
  EXPECT_THAT(from_snapshot.out, HasSubstr(peaks));
  EXPECT_THAT(analyze.out, HasSubstr(peaks));
  const auto summary = [](const std::string& text) { return text.substr(text.find("|====")); };
  EXPECT_EQ(summary(analyze.out), summary(from_snapshot.out));
  EXPECT_THAT(analyze.out, HasSubstr("(not recorded in the trace: assumed 1\n  TiB"));
  EXPECT_THAT(analyze.out, Not(HasSubstr("(log header)")));
}

TEST(AnalysisCommandsTest, ConvertRoundTrips) {
  const std::string log = FragmentedLog();
  const std::string pickle = TempPath("converted.pickle");
  const std::string chrome = TempPath("converted.json");
  const std::string back = TempPath("back.fslog");
  CommandRun to_pickle = Fragscope({"convert", log, pickle});
  ASSERT_EQ(to_pickle.code, 0) << to_pickle.err;
  EXPECT_THAT(to_pickle.out, HasSubstr("PyTorch snapshot"));
  // The exported snapshot is itself a faithful trace (with its OOM).
  CommandRun verify = Fragscope({"verify", pickle, "--capacity", "64MiB"});
  EXPECT_EQ(verify.code, 0) << verify.out;
  EXPECT_THAT(verify.out, HasSubstr("and 1 OOM match"));
  CommandRun to_fslog = Fragscope({"convert", pickle, back, "--capacity", "64MiB"});
  ASSERT_EQ(to_fslog.code, 0) << to_fslog.err;
  EXPECT_EQ(Fragscope({"verify", back}).code, 0);
  CommandRun to_chrome = Fragscope({"convert", log, chrome});
  ASSERT_EQ(to_chrome.code, 0) << to_chrome.err;
  std::stringstream json;
  json << std::ifstream(chrome).rdbuf();
  // One document, one record a line (the header, the records, the closing "]}"), whose counters
  // (formatted apart from the other records: chrome_trace.cc) carry the three byte counts.
  const std::string text = json.str();
  absl::StatusOr<nlohmann::json> doc = estimator::ParseJson(text);
  ASSERT_TRUE(doc.ok()) << doc.status();
  const nlohmann::json& events = doc->at("traceEvents");
  const auto count = [&](const char* name, const char* ph) {
    return std::count_if(events.begin(), events.end(), [&](const nlohmann::json& e) {
      return e.at("name") == name && e.at("ph") == ph;
    });
  };
  EXPECT_GT(count("memory", "C"), 0);
  EXPECT_EQ(count("OOM", "i"), 1);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'),
            static_cast<std::ptrdiff_t>(events.size()) + 2);
  for (const nlohmann::json& e : events) {
    if (e.at("ph") != "C") continue;
    EXPECT_TRUE(e.at("args").at("reserved").is_number_unsigned()) << e.dump();
    EXPECT_LE(e.at("args").at("allocated").get<uint64_t>(), e.at("args").at("reserved"));
  }
}

TEST(AnalysisCommandsTest, DemoSaysWhenNoSettingGetsPastTheOom) {
  CommandRun r = Fragscope({"demo", "--capacity-gib", "8", "--steps", "2", "--no-html"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("No swept setting gets past the OOM."));
  EXPECT_THAT(r.out, Not(HasSubstr("best first")));
}

// A configuration label too long for the table's column is printed whole on a line of its own:
// cut, two rows could read the same.
// A label wider than its column is cut with a note number, and the note below the table gives it
// whole: every row is one line, its columns where the header puts them, and no line is wider than
// 100 columns (a label longer than that breaks between settings, never inside a list).
TEST(AnalysisCommandsTest, SweepCutsLongLabelsAndGivesThemWholeInNotes) {
  CommandRun r = Fragscope({"sweep", FragmentedLog(), "--max-split-size-mb", "0,1024",
                            "--expandable-segments", "False,True", "--gc-threshold", "0.6",
                            "--roundup-power2-divisions", "[64:8,128:4,256:2,512:1,>:1]"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\n  #1 garbage_collection_threshold:0.6,"
                               "per_process_memory_fraction:0.999\n"));
  // The longest label, broken between settings.
  EXPECT_THAT(r.out, HasSubstr(",garbage_collection_threshold:0.6,\n"
                               "     roundup_power2_divisions:[64:8,128:4,256:2,>:1],"
                               "per_process_memory_fraction:0.999\n"));
  std::istringstream lines(r.out);
  std::string header;
  size_t rows = 0;
  size_t cut = 0;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), 100u) << line;
    if (line.rfind("  configuration ", 0) == 0) header = line;
    if (header.empty() || line == header || line.size() < 40) continue;
    const std::string exp = line.substr(header.find("exp"), 3);
    if (exp != " no" && exp != "yes") continue;  // a note or the recommendation
    ++rows;
    // The figures end where their headings do.
    EXPECT_EQ(line.find(" MiB "), header.find("peak reserved") + 9) << line;
    EXPECT_EQ(line.find(" % "), header.find("util") + 2) << line;
    if (line.find("... #") != std::string::npos) ++cut;
  }
  EXPECT_EQ(rows, 16u) << r.out;
  EXPECT_EQ(cut, 12u) << r.out;
  // Rows that differ only in expandable_segments share their note.
  EXPECT_THAT(r.out, Not(HasSubstr("#7"))) << r.out;
}

TEST(AnalysisCommandsTest, DemoTellsTheFragmentationStory) {
  const std::string html = TempPath("demo.html");
  CommandRun r = Fragscope({"demo", "--html", html, "--threads", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("The job died after 4 steps"));
  EXPECT_THAT(r.out, HasSubstr("cause: fragmentation"));
  // The OOM message's own advice, checked by re-running the job: expandable segments.
  EXPECT_THAT(r.out, HasSubstr("The fix: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
  EXPECT_THAT(r.out, HasSubstr("max_split_size_mb:256                           completes"));
  // Re-runs best first: completing ones by peak reserved, then the one that dies later.
  const size_t best = r.out.find("  expandable_segments:True                        completes");
  const size_t other = r.out.find("  max_split_size_mb:64                            completes");
  const size_t dies = r.out.find("dies later");
  EXPECT_LT(best, other);
  EXPECT_LT(other, dies);
  EXPECT_NE(dies, std::string::npos);
  // The HTML report's explanation names the fix and its peak over the whole re-run job.
  std::stringstream page;
  page << std::ifstream(html).rdbuf();
  EXPECT_THAT(page.str(), HasSubstr("expandable_segments:True avoids it, and the whole job then "
                                    "completes (peak reserved 14.90 GiB over all 12 steps)"));
  EXPECT_GT(std::filesystem::file_size(html), 10000u);
  // The text says the same, before the re-runs' table (it quoted the sweep's figures up to the
  // OOM instead, 13.55 GiB).
  EXPECT_THAT(r.out, HasSubstr("fix: expandable_segments:True avoids it, and the whole job then "
                               "completes (peak reserved 14.90\n      GiB over all 12 steps)"));
}

// A real fragmentation OOM: scripts/gpu/frag_oom_job.py under PyTorch's own allocator on an H100
// (4 GiB memory-fraction cap), logged by fragscope.observe() (tests/data/gpu/README.md).
TEST(AnalysisCommandsTest, RealH100FragmentationOomIsReplayedExplainedAndFixed) {
  const std::string log =
      std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/h100_fragmentation_oom.fslog";
  const std::vector<std::string> cap = {"--memory-fraction", "0.05051862997816944", "--capacity",
                                        "85017493504"};
  auto with_cap = [&](std::vector<std::string> args) {
    args.insert(args.end(), cap.begin(), cap.end());
    return Fragscope(args);
  };
  // Without the cap the job's retry ladder (cached segments released) is where verify diverges,
  // and it says what is missing.
  CommandRun uncapped_verify = Fragscope({"verify", log});
  EXPECT_EQ(uncapped_verify.code, 1) << uncapped_verify.err;
  EXPECT_THAT(uncapped_verify.out,
              HasSubstr("hint: PyTorch released cached segments to retry an allocation here"));
  EXPECT_THAT(uncapped_verify.out, HasSubstr("--memory-fraction or --allowed"));
  CommandRun verify = with_cap({"verify", log});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("faithful (90 events): 15 segment events, 21 allocations and "
                                    "1 OOM match the trace"));
  // Without the cap the replay serves the request; the device's free memory in the OOM record
  // shows that an unrecorded cap refused it, and bounds that cap.
  // Nor does the sweep then claim a fix.
  CommandRun uncapped = Fragscope({"analyze", log, "--no-summary", "--threads", "2"});
  EXPECT_EQ(uncapped.code, 0) << uncapped.err;
  EXPECT_THAT(uncapped.out, HasSubstr("cause: not_reproduced"));
  // Its layout departs from the job's (no cap), so a trace address is taken by then: that
  // segment goes elsewhere, with a warning, and no allocation is lost (one was, once).
  EXPECT_THAT(uncapped.out, HasSubstr("21 allocations, 21 frees"));
  EXPECT_THAT(uncapped.out, HasSubstr("1 segment could not take the trace's address"));
  EXPECT_THAT(uncapped.out, HasSubstr("although the device still had 74.71 GiB free"));
  EXPECT_THAT(uncapped.out, HasSubstr("of at least the 3.87 GiB it held and below 4.18"));
  EXPECT_THAT(uncapped.out, HasSubstr("the\n      holes and segments are the replay's"));
  EXPECT_THAT(uncapped.out, HasSubstr("fix: none shown: the job ran under a memory cap the trace "
                                      "does not record"));
  EXPECT_THAT(uncapped.out, HasSubstr("-- the job's OOM is not\n  reproduced: the job ran under a "
                                      "memory cap the trace does not record"));
  // Nor are --conf settings credited with it, the job's own included (they were).
  for (const char* conf : {"", "max_split_size_mb:256"}) {
    CommandRun with_conf = Fragscope({"analyze", log, "--no-summary", "--conf", conf});
    EXPECT_EQ(with_conf.code, 0) << with_conf.err;
    EXPECT_THAT(with_conf.out, Not(HasSubstr("so they avoid this OOM")));
    EXPECT_THAT(with_conf.out, Not(HasSubstr("under the --conf settings (the baseline row)")));
    EXPECT_THAT(with_conf.out, HasSubstr("to tell\n      whether the --conf settings avoid"));
  }
  CommandRun analyze = with_cap({"analyze", log, "--no-sweep", "--no-summary"});
  EXPECT_EQ(analyze.code, 0) << analyze.err;
  EXPECT_THAT(analyze.out, HasSubstr("request 316.00 MiB"));
  EXPECT_THAT(analyze.out, HasSubstr("cause: fragmentation"));
  EXPECT_THAT(analyze.out, HasSubstr("the largest was 199.00 MiB"));
  // The sweep alone says the same, and that the trace has an OOM (it said "the trace has no OOM").
  CommandRun uncapped_sweep = Fragscope({"sweep", log, "--threads", "2"});
  EXPECT_EQ(uncapped_sweep.code, 0) << uncapped_sweep.err;
  EXPECT_THAT(uncapped_sweep.out, Not(HasSubstr("has no OOM")));
  EXPECT_THAT(uncapped_sweep.out, HasSubstr("the job's OOM is not\n  reproduced"));
  EXPECT_THAT(uncapped_sweep.out, HasSubstr("give the job's own with --memory-fraction F"));
  EXPECT_THAT(uncapped_sweep.out, HasSubstr("Note: the trace records 1 OOM that the baseline row's "
                                            "replay does not reproduce"));
  // The log ends where the job died: under --conf too, the recommendation says how far it holds.
  CommandRun conf =
      with_cap({"analyze", log, "--no-summary", "--conf", "expandable_segments:True"});
  EXPECT_THAT(conf.out, HasSubstr("(the baseline row)"));
  EXPECT_THAT(conf.out, HasSubstr("only as far as the trace goes"));
  CommandRun sweep = with_cap({"sweep", log, "--threads", "2"});
  EXPECT_EQ(sweep.code, 0) << sweep.err;
  EXPECT_THAT(sweep.out, HasSubstr("(--capacity; memory fraction cap 4.00 GiB)"));
  // A cap in the settings is the replay's cap too, and the device line says so.
  CommandRun conf_cap =
      Fragscope({"analyze", log, "--no-sweep", "--no-summary", "--conf",
                 "per_process_memory_fraction:0.05051862997816944", "--capacity", "85017493504"});
  EXPECT_THAT(conf_cap.out, HasSubstr("; memory fraction cap 4.00 GiB\n"));
  EXPECT_THAT(conf_cap.out, HasSubstr("cause: fragmentation"));
  EXPECT_THAT(sweep.out, Not(HasSubstr("Note: the trace records")));
  EXPECT_THAT(sweep.out,
              HasSubstr("Recommended (*): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
}

// GPT-2 small training (seq 1024 x 16) capped at 0.9x its torch-autocast estimate, observed on an
// H100 (scripts/gpu/model_oom_check.py): the OOM looks like fragmentation by 57 MiB, but the job
// is at its cap (Note [Headroom at an OOM]) and its model's peak does not fit the cap at all. No
// setting is recommended, with or without --model; with it, the cause becomes capacity.
TEST(AnalysisCommandsTest, RealH100Gpt2OomIsACapacityProblemByTheModel) {
  const std::string log =
      std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/h100_gpt2_capacity_oom.fslog";
  const std::vector<std::string> cap = {"--memory-fraction", "0.26854656403068167", "--capacity",
                                        "85017493504"};
  std::vector<std::string> verify = {"verify", log};
  verify.insert(verify.end(), cap.begin(), cap.end());
  CommandRun v = Fragscope(verify);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_THAT(v.out, HasSubstr("faithful (2207 events): 156 segment events, 684 allocations"));
  const std::string json = TempPath("gpt2_verdict.json");
  std::vector<std::string> plain = {"analyze",      log,      "--threads", "2",
                                    "--no-summary", "--json", json};
  plain.insert(plain.end(), cap.begin(), cap.end());
  CommandRun a = Fragscope(plain);
  EXPECT_EQ(a.code, 0) << a.err;
  EXPECT_THAT(a.out, HasSubstr("request 3.07 GiB"));
  EXPECT_THAT(a.out, HasSubstr("cause: fragmentation"));  // the allocation's own class
  EXPECT_THAT(a.out, HasSubstr("Verdict: capacity-bound (the job is at its cap)"));
  EXPECT_THAT(a.out, HasSubstr("would have left 57.01 MiB (0.26% of the 21.26 GiB available"));
  EXPECT_THAT(a.out, HasSubstr("Recommended: none"));
  EXPECT_THAT(a.out, Not(HasSubstr("* max_split_size_mb")));
  EXPECT_THAT(a.out, HasSubstr("max_split_size_mb:64 gets past\n      this allocation only"));
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"capacity_bound\": true"));
  EXPECT_THAT(text.str(), HasSubstr("\"basis\": \"headroom\""));
  EXPECT_THAT(text.str(), HasSubstr("\"recommended\": null"));
  EXPECT_THAT(text.str(), Not(HasSubstr("\"recommended\": 1")));

  std::vector<std::string> with_model = {
      "analyze",
      log,
      "--threads",
      "2",
      "--no-summary",
      "--model",
      "gpt2-small:seq=1024,micro_batch=16,flash=1,activations=torch-autocast"};
  with_model.insert(with_model.end(), cap.begin(), cap.end());
  CommandRun m = Fragscope(with_model);
  EXPECT_EQ(m.code, 0) << m.err;
  EXPECT_THAT(m.out, HasSubstr("Verdict: capacity-bound (the model's footprint)"));
  EXPECT_THAT(m.out, HasSubstr("the model's theoretical peak (23.56 GiB) is above the 21.26 GiB"));
  EXPECT_THAT(m.out, HasSubstr("largest micro-batch that fits: 14"));
  EXPECT_THAT(m.out, HasSubstr("instead: micro_batch 14: peak 20.82 GiB, fits"));
  EXPECT_THAT(m.out, HasSubstr("activations torch-autocast (given)"));
  EXPECT_THAT(m.out, HasSubstr("dropout on (default)"));
  EXPECT_THAT(m.out, HasSubstr("Recommended: none"));
}

}  // namespace
}  // namespace fragscope::testing
