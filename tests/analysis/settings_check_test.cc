// The effective-settings check (settings_check.h) on the oracle snapshots, which PyTorch 2.11
// wrote with their `allocator_settings`, and through `fragscope analyze`.
#include "analysis/sources/settings_check.h"

#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "analysis/sources/open_trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/command_run.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Oracle(const std::string& name) {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/oracle/" + name + ".pickle";
}

RecordedSettings Recorded(const std::string& name) {
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(Oracle(name));
  EXPECT_TRUE(opener.ok()) << opener.status();
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
  EXPECT_TRUE(source.ok()) << source.status();
  const std::optional<RecordedSettings>& recorded = (*source)->info().recorded_settings;
  EXPECT_TRUE(recorded.has_value()) << name;
  return recorded.value_or(RecordedSettings{});
}

AskedSettings Conf(const std::string& text) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(text);
  EXPECT_TRUE(options.ok()) << options.status();
  return {.from = "--conf", .text = text, .options = *options};
}

TEST(SettingsCheckTest, EveryOraclePickleRecordsItsSettingsAsIn211) {
  // The string each job ran with (tests/data/oracle/README.md) is in effect.
  const std::map<std::string, std::string> runs = {
      {"gpt2_plain", ""},
      {"gpt2_tuned", "max_split_size_mb:128,roundup_power2_divisions:4"},
      {"micro_default", ""},
      {"micro_expandable", "expandable_segments:True"},
      {"micro_fraction_3g_gc", "garbage_collection_threshold:0.6,max_split_size_mb:64"},
      {"micro_max_split_128", "max_split_size_mb:128"},
      {"micro_roundup4", "roundup_power2_divisions:4"},
      {"micro_roundup_list", "roundup_power2_divisions:[64:8,256:4,>:1],max_split_size_mb:256"},
  };
  for (const auto& [name, conf] : runs) {
    const RecordedSettings recorded = Recorded(name);
    EXPECT_EQ(recorded.where, "the snapshot's allocator_settings");
    // Every key the pickles' dict or string can say, except the fraction the API sets.
    EXPECT_TRUE(recorded.keys.test(static_cast<size_t>(AllocatorKey::kMaxSplitSizeMb))) << name;
    EXPECT_FALSE(recorded.keys.test(static_cast<size_t>(AllocatorKey::kPerProcessMemoryFraction)))
        << name;
    const SettingsCheck check = CheckSettings(Conf(conf), recorded);
    EXPECT_THAT(check.not_in_effect, IsEmpty()) << name;
    EXPECT_THAT(check.not_recorded, IsEmpty()) << name;
  }
}

TEST(SettingsCheckTest, SettingsAskedForButNotInEffectAreNamed) {
  const SettingsCheck check = CheckSettings(
      Conf("max_split_size_mb:256,expandable_segments:True,roundup_power2_divisions:4,"
           "per_process_memory_fraction:0.5,pinned_num_register_threads:4"),
      Recorded("gpt2_tuned"));
  ASSERT_EQ(check.not_in_effect.size(), 3u);
  EXPECT_EQ(check.not_in_effect[0].key, AllocatorKey::kMaxSplitSizeMb);
  EXPECT_EQ(check.not_in_effect[0].asked, "256");
  EXPECT_EQ(check.not_in_effect[0].in_effect, "128");
  EXPECT_EQ(check.not_in_effect[1].key, AllocatorKey::kExpandableSegments);
  EXPECT_EQ(check.not_in_effect[1].in_effect, "(default)");
  EXPECT_EQ(check.not_in_effect[2].key, AllocatorKey::kPinnedNumRegisterThreads);
  EXPECT_EQ(check.not_in_effect[2].in_effect, "(default)");
  // roundup_power2_divisions:4 is what the job ran with; the fraction is not recorded.
  EXPECT_THAT(check.not_recorded, ElementsAre(AllocatorKey::kPerProcessMemoryFraction));
  EXPECT_THAT(check.ignored, ElementsAre(AllocatorKey::kPinnedNumRegisterThreads));
}

TEST(SettingsCheckTest, TheRoundupListIsComparedIntervalByInterval) {
  const RecordedSettings recorded = Recorded("micro_roundup_list");
  EXPECT_THAT(
      CheckSettings(Conf("roundup_power2_divisions:[64:8,256:4,>:1]"), recorded).not_in_effect,
      IsEmpty());
  const SettingsCheck other = CheckSettings(Conf("roundup_power2_divisions:[64:8,>:1]"), recorded);
  ASSERT_EQ(other.not_in_effect.size(), 1u);
  EXPECT_EQ(other.not_in_effect[0].asked, "[64:8,>:1]");
  EXPECT_EQ(
      other.not_in_effect[0].in_effect,
      AllocatorOptionValueText(*ParseAllocatorOptions("roundup_power2_divisions:[64:8,256:4,>:1]"),
                               AllocatorKey::kRoundupPower2Divisions));
}

TEST(SettingsCheckTest, TheEnvironmentAsPyTorch211ReadsIt) {
  const auto env = [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "PYTORCH_CUDA_ALLOC_CONF") return "max_split_size_mb:128";
    if (std::string(name) == "PYTORCH_ALLOC_CONF") return "expandable_segments:True";
    return std::nullopt;
  };
  std::optional<AskedSettings> asked = AskedSettingsFromEnv(env);
  ASSERT_TRUE(asked.has_value());
  EXPECT_EQ(asked->from, "PYTORCH_CUDA_ALLOC_CONF");
  ASSERT_EQ(asked->notes.size(), 1u);
  EXPECT_THAT(asked->notes[0], HasSubstr("PYTORCH_ALLOC_CONF='expandable_segments:True' is not"));
  EXPECT_THAT(CheckSettings(*asked, Recorded("micro_max_split_128")).not_in_effect, IsEmpty());

  const auto bad = [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "PYTORCH_ALLOC_CONF") return "throw_on_cudamalloc_oom:True";
    return std::nullopt;
  };
  asked = AskedSettingsFromEnv(bad);
  ASSERT_TRUE(asked.has_value());
  EXPECT_FALSE(asked->options.has_value());
  const SettingsCheck check = CheckSettings(*asked, Recorded("micro_default"));
  EXPECT_FALSE(check.asked_valid);
  ASSERT_EQ(check.notes.size(), 1u);
  EXPECT_THAT(check.notes[0],
              HasSubstr("Unrecognized key 'throw_on_cudamalloc_oom' in CUDA allocator config."));
}

TEST(SettingsCheckTest, AnalyzeReportsItInTextAndJson) {
  const std::string json = TempPath("settings_check.json");
  CommandRun r = Fragscope({"analyze", Oracle("micro_max_split_128"), "--no-sweep", "--conf",
                            "max_split_size_mb:256", "--json", json});
  ASSERT_EQ(r.code, 0) << r.err;
  // (The text is wrapped at 100 columns.)
  EXPECT_THAT(r.out, HasSubstr("settings asked for in --conf 'max_split_size_mb:256' but not in "
                               "effect in the job (the snapshot's"));
  EXPECT_THAT(r.out, HasSubstr("max_split_size_mb:256 (in effect: 128)"));
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"settings_check\""));
  EXPECT_THAT(text, HasSubstr("\"in_effect\": \"128\""));
}

}  // namespace
}  // namespace fragscope::testing
