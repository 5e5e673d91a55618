// The viewer's files from a real replay, the layout API, `fragscope view --out` and the output
// directory's rules.
#include "analysis/view/view_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "analysis/view/view_replay.h"
#include "cli/output_directory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/analysis/command_run.h"
#include "tests/analysis/fragmented_oom_log.h"
#include "tests/view/view_script_json.h"

namespace fragscope {
namespace {

using testing::FragmentedOomLog;
using testing::Fragscope;
using ::testing::HasSubstr;
using testing::ScriptJson;
using testing::TempPath;

TEST(ViewFilesTest, TheFilesCarryTheReportTilesAndTheLayoutAtTheOom) {
  const std::string log = FragmentedOomLog({.marked = true});
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(log);
  ASSERT_TRUE(opener.ok());
  absl::StatusOr<ViewBuild> build = BuildViewFiles(*opener, {});
  ASSERT_TRUE(build.ok()) << build.status();
  const nlohmann::json meta = ScriptJson(build->files.at("data/meta.js"), "meta");
  EXPECT_EQ(meta["format"], "fragscope.view/1");
  EXPECT_EQ(meta["api"], false);
  EXPECT_EQ(meta["capacity_bytes"], 64 * kMiB);
  ASSERT_EQ(meta["levels"].size(), 1u);
  EXPECT_EQ(meta["levels"][0]["width"], 1);
  EXPECT_EQ(meta["levels"][0]["buckets"], meta["operations"]);
  EXPECT_TRUE(build->files.contains("data/L0-0.js"));
  EXPECT_FALSE(build->files.contains("data/L0-1.js"));
  // The analysis: the OOM with its pinning blocks, the sweep, the phases.
  const nlohmann::json& report = meta["report"];
  ASSERT_EQ(report["ooms"]["explained"].size(), 1u);
  EXPECT_EQ(report["ooms"]["explained"][0]["cause"], "fragmentation");
  EXPECT_FALSE(report["sweep"]["configs"].empty());
  EXPECT_FALSE(report["phases"].empty());
  // Layouts: at the OOM (before its request), the peak, the end.
  ASSERT_EQ(meta["layouts"].size(), 3u);
  EXPECT_EQ(meta["layouts"][0]["why"], "peak reserved");
  EXPECT_EQ(meta["layouts"][1]["why"], "OOM 1");
  EXPECT_EQ(meta["layouts"][1]["event"], report["ooms"]["explained"][0]["event"]);
  EXPECT_EQ(meta["layouts"][2]["why"], "end");
  const nlohmann::json at_oom = ScriptJson(build->files.at("data/layout-1.js"), "layout");
  EXPECT_EQ(at_oom["segments"], 2);
  EXPECT_EQ(at_oom["fragmented_segments"], 2);
  EXPECT_EQ(at_oom["blocks_left_out"], 0);
  size_t live = 0, holes = 0;
  for (const nlohmann::json& segment : at_oom["maps"]) {
    for (const nlohmann::json& block : segment["blocks"]) {
      (block["state"] == "free" ? holes : live) += 1;
    }
  }
  EXPECT_EQ(live, 4u);
  EXPECT_EQ(holes, 4u);
  // Every pinning block the explanation names is on the map.
  for (const nlohmann::json& pin : report["ooms"]["explained"][0]["pinning"]) {
    bool found = false;
    for (const nlohmann::json& segment : at_oom["maps"]) {
      for (const nlohmann::json& block : segment["blocks"]) {
        found = found || (block["address"] == pin["address"] && block.contains("phase") &&
                          absl::StartsWith(block["phase"].get<std::string>(), "step 0"));
      }
    }
    EXPECT_TRUE(found) << pin.dump();
  }
  // The page itself.
  EXPECT_TRUE(build->files.contains("index.html"));
}

TEST(ViewFilesTest, TheApiReplaysAnyEvent) {
  const std::string log = FragmentedOomLog({.marked = true});
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(log);
  ASSERT_TRUE(opener.ok());
  auto layout = [&](uint64_t event) {
    const HttpAnswer answer = ViewLayoutAnswer(*opener, {}, event);
    EXPECT_EQ(answer.status, 200);
    return nlohmann::json::parse(answer.body);
  };
  EXPECT_EQ(layout(0)["segments"], 0);  // after the first marker: nothing yet
  const nlohmann::json later = layout(1000000);
  EXPECT_EQ(later["segments"], 2);
  EXPECT_LE(later["event"].get<uint64_t>(), 1000000u);
}

TEST(ViewCommandTest, WritesTheFilesWholeAndReplacesOnlyAnEarlierView) {
  const std::string log = FragmentedOomLog({.marked = true});
  const std::string dir = TempPath("view");
  testing::CommandRun run = Fragscope({"view", log, "--out", dir});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("index.html"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/data/meta.js"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/index.html"));
  std::ifstream meta(dir + "/data/meta.js");
  const std::string text((std::istreambuf_iterator<char>(meta)), {});
  EXPECT_THAT(text, HasSubstr("\"api\":false"));
  // Again over it: replaced, and nothing left beside it.
  run = Fragscope({"view", log, "--out", dir});
  ASSERT_EQ(run.code, 0) << run.err;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir).parent_path())) {
    EXPECT_FALSE(absl::StrContains(entry.path().filename().string(), "fragscope-tmp"))
        << entry.path();
  }
  // A directory of other files, a file, a link: refused, untouched.
  const std::string other = TempPath("other");
  std::filesystem::create_directory(other);
  std::ofstream(other + "/keep.txt") << "mine";
  run = Fragscope({"view", log, "--out", other});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("holds other files"));
  EXPECT_TRUE(std::filesystem::exists(other + "/keep.txt"));
  EXPECT_FALSE(std::filesystem::exists(other + "/index.html"));
  const std::string link = TempPath("link");
  std::filesystem::create_directory_symlink(dir, link);
  run = Fragscope({"view", log, "--out", link});
  EXPECT_EQ(run.code, 1);
  EXPECT_THAT(run.err, HasSubstr("symbolic link"));
  // Usage errors.
  EXPECT_EQ(Fragscope({"view", log}).code, 2);
  EXPECT_EQ(Fragscope({"view", log, "--port", "70000"}).code, 2);
  EXPECT_EQ(Fragscope({"view", log + ".missing", "--out", TempPath("x")}).code, 1);
}

// A log cut short (a job killed mid-write) opens with what it has, and says where it stopped.
TEST(ViewCommandTest, ADamagedLogShowsWhatItHasAndWhereItStopped) {
  const std::string log = TempPath("demo.fslog");
  ASSERT_EQ(Fragscope({"demo", "--no-html", "--log", log}).code, 0);
  const std::string torn = TempPath("torn.fslog");
  {
    std::ifstream in(log, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(torn, std::ios::binary) << bytes.substr(0, bytes.size() * 2 / 3);
  }
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(torn);
  ASSERT_TRUE(opener.ok());
  absl::StatusOr<ViewBuild> build = BuildViewFiles(*opener, {});
  ASSERT_TRUE(build.ok()) << build.status();
  const nlohmann::json meta = ScriptJson(build->files.at("data/meta.js"), "meta");
  EXPECT_GT(meta["events"].get<uint64_t>(), 1000u);
  const std::string warnings = meta["report"]["replay"]["warnings"].dump();
  EXPECT_THAT(warnings, HasSubstr("torn tail")) << warnings;
}

TEST(ViewCommandTest, OutputDirectoryRefusesNamesOutsideIt) {
  const std::string dir = TempPath("names");
  EXPECT_FALSE(cli::WriteOutputDirectory(dir, {{"../escape", "x"}}, "m").ok());
  for (const char* bad : {"a//c", "a/./c", "a/../c", "/abs", "a/", ""}) {
    EXPECT_FALSE(cli::WriteOutputDirectory(dir, {{"m", "1"}, {bad, "x"}}, "m").ok()) << bad;
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  ASSERT_TRUE(
      cli::WriteOutputDirectory(dir, {{"m", "1"}, {"data/x.js", "2"}, {"data/s0/y.js", "3"}}, "m")
          .ok());
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/data/s0/y.js"));
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
}

}  // namespace
}  // namespace fragscope
