// The files the commands write: a failed run never leaves a damaged file where a good one was,
// never reports success for a write that failed (a full disk), and never lets one output
// overwrite another; and the demo's working log is gone on every way out.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/output_file.h"
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

// No temporary of this process beside `path` (output_file.h names them).
bool NoTemporaryBeside(const std::string& path) {
  const std::filesystem::path p(path);
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(p.filename().string() + ".fragscope-tmp.") &&
        name.find("." + std::to_string(getpid()) + ".") != std::string::npos) {
      return false;
    }
  }
  return true;
}

TEST(OutputFileTest, WritesBesideThePathAndRenamesOnCommit) {
  const std::string path = TempPath("out.txt");
  WriteFile(path, "old");
  {
    absl::StatusOr<std::unique_ptr<cli::OutputFile>> output = cli::OutputFile::Create(path);
    ASSERT_OK(output.status());
    EXPECT_NE((*output)->write_path(), path);
    WriteFile((*output)->write_path(), "new");
    EXPECT_EQ(ReadFile(path), "old");  // untouched until the commit
    ASSERT_OK((*output)->Commit());
  }
  EXPECT_EQ(ReadFile(path), "new");
  EXPECT_TRUE(NoTemporaryBeside(path));
}

TEST(OutputFileTest, WithoutCommitTheOldFileStaysAndTheTemporaryGoes) {
  const std::string path = TempPath("kept.txt");
  WriteFile(path, "old");
  {
    absl::StatusOr<std::unique_ptr<cli::OutputFile>> output = cli::OutputFile::Create(path);
    ASSERT_OK(output.status());
    WriteFile((*output)->write_path(), "half");
    EXPECT_FALSE(NoTemporaryBeside(path));
  }
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_TRUE(NoTemporaryBeside(path));
}

TEST(OutputFileTest, DevicesAreWrittenInPlace) {
  if (!std::filesystem::exists("/dev/null")) GTEST_SKIP() << "no /dev/null";
  absl::StatusOr<std::unique_ptr<cli::OutputFile>> output = cli::OutputFile::Create("/dev/null");
  ASSERT_OK(output.status());
  EXPECT_EQ((*output)->write_path(), "/dev/null");
  EXPECT_OK((*output)->Commit());
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

TEST(OutputFileTest, WriteErrorsNameThePathAndTheReason) {
  EXPECT_THAT(
      cli::WriteOutputFile("/nonexistent-dir/r.json", [](std::ostream& o) { o << "x"; }).message(),
      HasSubstr("/nonexistent-dir/r.json: cannot write: No such file or directory"));
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  EXPECT_THAT(cli::WriteOutputFile("/dev/full", [](std::ostream& o) { o << "x"; }).message(),
              HasSubstr("/dev/full: write failed: No space left on device"));
}

TEST(CommandOutputsTest, AFailedConvertLeavesTheExistingOutputAlone) {
  const std::string log = FragmentedOomLog({.name = "oom.fslog"});
  std::string damaged = ReadFile(log);
  damaged[damaged.size() / 2] ^= 0x5a;  // inside a chunk: a CRC error halfway through
  const std::string bad = TempPath("damaged.fslog");
  WriteFile(bad, damaged);
  for (const char* name : {"kept.fslog", "kept.json", "kept.pickle"}) {
    const std::string out = TempPath(name);
    WriteFile(out, "the user's earlier output");
    const auto r = Fragscope({"convert", bad, out});
    EXPECT_EQ(r.code, 1) << name;
    EXPECT_THAT(r.err, HasSubstr("corrupt chunk")) << name;
    EXPECT_EQ(ReadFile(out), "the user's earlier output") << name;
    EXPECT_TRUE(NoTemporaryBeside(out)) << name;
  }
}

TEST(CommandOutputsTest, AFullDiskIsAnErrorNotASuccess) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string log = FragmentedOomLog({.name = "oom.fslog"});
  const std::vector<std::vector<std::string>> runs = {
      {"analyze", log, "--no-sweep", "--json", "/dev/full"},
      {"analyze", log, "--no-sweep", "--html", "/dev/full"},
      {"sweep", log, "--max-split-size-mb", "0", "--json", "/dev/full"},
      {"convert", log, "/dev/full", "--to", "chrome"},
      {"convert", log, "/dev/full", "--to", "fslog"},
      {"convert", log, "/dev/full", "--to", "pickle"},
      {"demo", "--steps", "1", "--no-html", "--json", "/dev/full"},
  };
  for (const std::vector<std::string>& args : runs) {
    const auto r = Fragscope(args);
    EXPECT_EQ(r.code, 1) << args[0] << " " << args.back() << ": " << r.out;
    EXPECT_THAT(r.err, HasSubstr("/dev/full")) << args[0];
  }
}

TEST(CommandOutputsTest, AnOutputThatCannotBeCreatedIsAnError) {
  const auto r =
      Fragscope({"demo", "--steps", "1", "--no-html", "--json", "/nonexistent-dir/d.json"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent-dir/d.json: cannot write"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("JSON report:")));
}

TEST(CommandOutputsTest, TwoOutputsNeverNameOneFile) {
  const std::string log = FragmentedOomLog({.name = "oom.fslog"});
  const std::string report = TempPath("report.out");
  const std::string same = std::filesystem::path(report).parent_path().string() + "/./" +
                           std::filesystem::path(report).filename().string();
  const auto analyze = Fragscope({"analyze", log, "--no-sweep", "--json", report, "--html", same});
  EXPECT_EQ(analyze.code, 2);
  EXPECT_THAT(analyze.err, HasSubstr("--json and --html both name"));
  const auto demo = Fragscope({"demo", "--no-html", "--log", report, "--json", report});
  EXPECT_EQ(demo.code, 2);
  EXPECT_THAT(demo.err, HasSubstr("--json and --log both name"));
  const auto html = Fragscope({"demo", "--html", report, "--no-html"});
  EXPECT_EQ(html.code, 2);
  EXPECT_THAT(html.err, HasSubstr("--html and --no-html contradict each other"));
  EXPECT_FALSE(std::filesystem::exists(report));
}

TEST(CommandOutputsTest, TheDemosWorkingLogIsGoneOnEveryWayOut) {
  // The working log is an exclusive temporary named after fragscope-demo.fslog.
  const std::string working =
      (std::filesystem::temp_directory_path() / "fragscope-demo.fslog").string();
  const auto ok = Fragscope({"demo", "--steps", "1", "--no-html"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("--log PATH keeps it"));
  EXPECT_THAT(ok.out, ::testing::Not(HasSubstr("fragscope-demo.fslog")));
  EXPECT_TRUE(NoTemporaryBeside(working));
  const auto failed = Fragscope({"demo", "--steps", "1", "--html", "/nonexistent-dir/d.html"});
  EXPECT_EQ(failed.code, 1);
  EXPECT_TRUE(NoTemporaryBeside(working));
}

TEST(CommandOutputsTest, TornAndEmptyLogsAreReportedBySweepAndConvert) {
  const std::string log = FragmentedOomLog({.name = "oom.fslog"});
  const std::string torn = TempPath("torn.fslog");
  WriteFile(torn, ReadFile(log).substr(0, 1000));  // the header and a piece of the first chunk
  const std::string out = TempPath("torn.json");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"sweep", torn}, std::vector<std::string>{"convert", torn, out}}) {
    const auto r = Fragscope(args);
    EXPECT_EQ(r.code, 1) << args[0];
    EXPECT_THAT(r.err, HasSubstr("warning: " + torn + ": torn tail")) << args[0];
    EXPECT_THAT(r.err, HasSubstr("the trace is empty")) << args[0];
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CommandOutputsTest, SweepTagsTheConfBaselineAsSuch) {
  const auto r =
      Fragscope({"sweep", FragmentedOomLog({.name = "oom.fslog"}), "--conf", "max_split_size_mb:20",
                 "--max-split-size-mb", "0", "--expandable-segments", "False"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("max_split_size_mb:20 [--conf]"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("[trace]")));
}

}  // namespace
}  // namespace fragscope::testing
