// The job's memory cap through the analyzer's commands: the cap a log records, one given with
// --memory-fraction/--allowed or in --conf, and a cap the trace does not record. What each
// replay runs under, and what the explanations and the sweep may credit a setting with.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"

namespace fragscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Oracle(const std::string& name) {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/" + name + ".pickle";
}

// The log most tests below replay: the real H100 fragmentation OOM, with the 4 GiB cap the job ran
// under (per_process_memory_fraction 0.0505 of 79.18 GiB) recorded.
std::string CappedH100Log(const std::string& name) {
  const std::string capped = TempPath(name);
  const CommandRun convert = Fragscope(
      {"convert", std::string(FRAGSCOPE_TEST_DATA_DIR) + "/gpu/h100_fragmentation_oom.fslog",
       capped, "--memory-fraction", "0.05051862997816944", "--capacity", "85017493504"});
  EXPECT_EQ(convert.code, 0) << convert.err;
  return capped;
}

// The report as one line: the text wraps at 100 columns, where depends on the figures.
std::string OneLine(const std::string& out) {
  std::string text;
  for (char c : out) {
    if (c != ' ' && c != '\n') {
      text += c;
    } else if (!text.empty() && text.back() != ' ') {
      text += ' ';
    }
  }
  return text;
}

// A snapshot records no reserved bytes at its OOMs: the bounds of the unrecorded cap come from
// the replay before it served the request, less the job's ladder's releases, and hold the job's
// 3 GiB (they were 3.06-3.21 GiB, from the layout after the replay served it).
TEST(JobCapCommandsTest, TheUnrecordedCapsBoundsHoldTheJobsCap) {
  CommandRun r = Fragscope({"analyze", Oracle("micro_fraction_3g"), "--capacity", "150109880320",
                            "--no-sweep", "--no-summary"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("of at least the 2.90 GiB it held and below 3.06\n      GiB"));
  // Once the replay served one refused request it holds more than the job did: later OOMs, and
  // replays under --conf, give no bounds (they gave 3.09-3.31 GiB, 3.75-3.92 GiB, ...).
  EXPECT_THAT(r.out, HasSubstr("(the first such OOM bounds the cap)."));
  EXPECT_THAT(r.out, Not(HasSubstr("at least the 3.09 GiB")));
  CommandRun conf = Fragscope({"analyze", Oracle("micro_fraction_3g"), "--capacity", "150109880320",
                               "--no-sweep", "--no-summary", "--conf", "max_split_size_mb:64"});
  EXPECT_THAT(conf.out, HasSubstr("--conf settings (without --conf, the first such OOM bounds "
                                  "the cap)."));
  EXPECT_THAT(conf.out, Not(HasSubstr("it held and below")));
}

// A cap given in --conf and the same cap given as a flag replay alike (the empty_cache()
// inference once ignored the --conf one: 195/145 against 194/140 device mallocs/frees).
TEST(JobCapCommandsTest, ACapInConfIsTheSameCapAsAFlag) {
  const auto row = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"analyze", Oracle("micro_fraction_3g"), "--capacity", "150109880320",
                               "--no-summary", "--threads", "2"});
    // The [--conf] row's figures (a long label puts them on the next line).
    const std::string out = Fragscope(args).out;
    const size_t at = out.find("[--conf]");
    const size_t gib = out.find(" GiB", at);
    if (at == std::string::npos || gib == std::string::npos) return std::string("no [--conf] row");
    const size_t start = out.find_last_of(' ', gib - 1) + 1;  // the figure before " GiB"
    return out.substr(start, out.find('\n', gib) - start);
  };
  const std::string in_conf =
      row({"--conf", "max_split_size_mb:64,per_process_memory_fraction:0.021459116915775848"});
  const std::string as_flag = row({"--conf", "max_split_size_mb:64", "--allowed", "3GiB"});
  EXPECT_THAT(as_flag, HasSubstr("194     140"));
  EXPECT_EQ(in_conf, as_flag);
}

// A snapshot records no memory fraction; the one given to convert is kept in the .fslog, so the
// converted log replays faithfully with no flag.
TEST(JobCapCommandsTest, ConvertKeepsTheGivenCapInTheLog) {
  const std::string out = TempPath("capped.fslog");
  CommandRun convert = Fragscope({"convert", Oracle("micro_fraction_3g"), out, "--capacity",
                                  "150109880320", "--allowed", "3GiB"});
  ASSERT_EQ(convert.code, 0) << convert.err;
  CommandRun verify = Fragscope({"verify", out});
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("faithful"));
}

// The job's cap, recorded in the log (as the hooks and convert record it), is not one of the
// settings --conf replaces: the --conf replay keeps it, so a setting is judged under it (it was
// dropped, and any setting "avoided" the OOM).
TEST(JobCapCommandsTest, ConfKeepsTheCapTheLogRecords) {
  const std::string capped = CappedH100Log("h100-capped.fslog");
  CommandRun r = Fragscope({"analyze", capped, "--no-summary", "--conf", "max_split_size_mb:512"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("; memory fraction cap 4.00 GiB\n"));
  EXPECT_THAT(r.out, HasSubstr("cause: fragmentation"));
  EXPECT_THAT(r.out, Not(HasSubstr("so they avoid this OOM")));
  EXPECT_THAT(r.out, Not(HasSubstr("a cap the trace does not record")));
  // A cap given as a flag replaces the recorded one in the configurations too: the sweep does not
  // recommend the recorded 4 GiB cap while replaying a smaller one.
  CommandRun smaller = Fragscope({"sweep", capped, "--memory-fraction", "0.04", "--threads", "2"});
  EXPECT_EQ(smaller.code, 0) << smaller.err;
  EXPECT_THAT(smaller.out, HasSubstr("memory fraction cap 3.17 GiB"));
  EXPECT_THAT(smaller.out, Not(HasSubstr("per_process_memory_fraction:0.0505")));
  // A cap in --conf and one in the flags: which? An error, not the flag silently.
  CommandRun both = Fragscope(
      {"analyze", capped, "--memory-fraction", "0.5", "--conf", "per_process_memory_fraction:0.9"});
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("give the cap once"));
}

// A --conf fraction above the one the log records (or none) gives the job more memory: its OOM is
// not reproduced, and neither the explanation nor the sweep credits the settings with a fix.
TEST(JobCapCommandsTest, ConfThatRaisesTheRecordedCapIsNotAFix) {
  const std::string capped = CappedH100Log("h100-raised.fslog");
  for (const std::string conf :
       {"per_process_memory_fraction:0.5", "per_process_memory_fraction:1"}) {
    CommandRun r = Fragscope({"analyze", capped, "--no-summary", "--conf", conf});
    EXPECT_EQ(r.code, 0) << r.err;
    const std::string text = OneLine(r.out);
    EXPECT_THAT(text, HasSubstr("Not reproduced under --conf: the job ran out of memory here "
                                "under the 4.00 GiB cap its settings record"));
    EXPECT_THAT(text, HasSubstr(conf.back() == '1' ? "settings remove the cap"
                                                   : "settings raise the cap to 39.59 GiB"));
    EXPECT_THAT(text, HasSubstr("more memory, not better settings"));
    EXPECT_THAT(text, HasSubstr("fix: none shown: under the --conf settings the job has more "
                                "memory than its own cap"));
    EXPECT_THAT(text, HasSubstr("the job's OOM is not reproduced: under the --conf settings the "
                                "job has more memory than the per_process_memory_fraction it ran "
                                "under"));
    EXPECT_THAT(text, Not(HasSubstr("so they avoid this OOM")));
    EXPECT_THAT(text, Not(HasSubstr("a cap the trace does not record")));
  }
}

// The same with a cap flag above the recorded cap: the replay runs under the flag's cap (a flag's
// cap stands for the job's), but the explanation names the recorded cap the job ran out under
// instead of calling it "a cap the trace does not record", as it did. A flag cap below the
// recorded one reproduces the OOM, and the sweep may name a fix under it.
TEST(JobCapCommandsTest, FlagCapAboveTheRecordedCapIsNotAFix) {
  const std::string capped = CappedH100Log("h100-flag-raised.fslog");
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--memory-fraction", "0.5"},
                                               std::vector<std::string>{"--allowed", "8GiB"}}) {
    CommandRun r = Fragscope({"analyze", capped, "--no-summary", flag[0], flag[1]});
    EXPECT_EQ(r.code, 0) << r.err;
    const std::string text = OneLine(r.out);
    EXPECT_THAT(text, HasSubstr("Not reproduced under the cap given: the job ran out of memory "
                                "here under the 4.00 GiB cap its settings record"));
    EXPECT_THAT(text,
                HasSubstr(flag[0] == "--allowed" ? "(--memory-fraction/--allowed) is 8.00 GiB"
                                                 : "(--memory-fraction/--allowed) is 39.59 GiB"));
    EXPECT_THAT(text, HasSubstr("more memory, not better settings"));
    EXPECT_THAT(text,
                HasSubstr("fix: none shown: under the cap given (--memory-fraction/--allowed) "
                          "the job has more memory than its own cap"));
    EXPECT_THAT(text, HasSubstr("the job's OOM is not reproduced: under the cap given"));
    EXPECT_THAT(text, Not(HasSubstr("a cap the trace does not record")));
    EXPECT_THAT(text, Not(HasSubstr("avoids it")));
  }
  CommandRun lower = Fragscope({"analyze", capped, "--no-summary", "--memory-fraction", "0.03"});
  EXPECT_EQ(lower.code, 0) << lower.err;
  const std::string text = OneLine(lower.out);
  EXPECT_THAT(text, HasSubstr("cause: fragmentation"));
  EXPECT_THAT(text, HasSubstr("fix: expandable_segments:True avoids it"));
  EXPECT_THAT(text, Not(HasSubstr("Not reproduced")));
}

}  // namespace
}  // namespace fragscope::testing
