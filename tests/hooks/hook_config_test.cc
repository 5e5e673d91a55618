#include "hooks/hook_config.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::hooks {
namespace {

TEST(ExpandDeviceLogPatternTest, ReplacesTheDevicePlaceholder) {
  ASSERT_OK_AND_ASSIGN(std::string path, ExpandDeviceLogPattern("/tmp/run.%d.fslog", 3));
  EXPECT_EQ(path, "/tmp/run.3.fslog");
}

TEST(ExpandDeviceLogPatternTest, LeavesWriterPlaceholdersAlone) {
  ASSERT_OK_AND_ASSIGN(std::string path, ExpandDeviceLogPattern("r%r-p%p-%%d-%d", 1));
  EXPECT_EQ(path, "r%r-p%p-%%d-1");
}

TEST(ExpandDeviceLogPatternTest, DeviceZeroKeepsAPatternWithoutPlaceholder) {
  ASSERT_OK_AND_ASSIGN(std::string path, ExpandDeviceLogPattern("/tmp/run.fslog", 0));
  EXPECT_EQ(path, "/tmp/run.fslog");
}

TEST(ExpandDeviceLogPatternTest, OtherDevicesGetASuffixBeforeTheExtension) {
  ASSERT_OK_AND_ASSIGN(std::string a, ExpandDeviceLogPattern("/tmp/run.%r.fslog", 2));
  EXPECT_EQ(a, "/tmp/run.%r.dev2.fslog");
  ASSERT_OK_AND_ASSIGN(std::string b, ExpandDeviceLogPattern("/tmp/dir.x/run", 1));
  EXPECT_EQ(b, "/tmp/dir.x/run.dev1");
  ASSERT_OK_AND_ASSIGN(std::string c, ExpandDeviceLogPattern(".hidden", 1));
  EXPECT_EQ(c, ".hidden.dev1");
}

TEST(ExpandDeviceLogPatternTest, RejectsUnknownPlaceholders) {
  EXPECT_EQ(ExpandDeviceLogPattern("run.%x", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandDeviceLogPattern("run%", 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoadHookConfigTest, ExplicitValuesWin) {
  setenv("FRAGSCOPE_ALLOC_CONF", "max_split_size_mb:2", 1);
  ASSERT_OK_AND_ASSIGN(HookConfig config, LoadHookConfig("max_split_size_mb:256", "x.%p.fslog"));
  unsetenv("FRAGSCOPE_ALLOC_CONF");
  EXPECT_EQ(config.options.max_split_size_bytes, 256 * kMiB);
  EXPECT_EQ(config.log_pattern, "x.%p.fslog");
}

TEST(LoadHookConfigTest, ReadsTheEnvironment) {
  setenv("FRAGSCOPE_ALLOC_CONF", "roundup_power2_divisions:4", 1);
  setenv("FRAGSCOPE_LOG", "/tmp/a.%r.%d.fslog", 1);
  ASSERT_OK_AND_ASSIGN(HookConfig config, LoadHookConfig(std::nullopt, std::nullopt));
  unsetenv("FRAGSCOPE_ALLOC_CONF");
  unsetenv("FRAGSCOPE_LOG");
  EXPECT_EQ(config.options.roundup_power2_divisions[0], 4u);
  EXPECT_EQ(config.log_pattern, "/tmp/a.%r.%d.fslog");
}

TEST(LoadHookConfigTest, UnsetMeansDefaultsAndNoLog) {
  unsetenv("FRAGSCOPE_ALLOC_CONF");
  unsetenv("FRAGSCOPE_LOG");
  ASSERT_OK_AND_ASSIGN(HookConfig config, LoadHookConfig(std::nullopt, std::nullopt));
  EXPECT_EQ(config.options, AllocatorOptions{});
  EXPECT_EQ(config.log_pattern, "");
}

TEST(LoadHookConfigTest, ErrorsNameTheVariableKeyAndValue) {
  setenv("FRAGSCOPE_ALLOC_CONF", "max_split_size_mb:2", 1);
  absl::StatusOr<HookConfig> bad_conf = LoadHookConfig(std::nullopt, "");
  unsetenv("FRAGSCOPE_ALLOC_CONF");
  ASSERT_FALSE(bad_conf.ok());
  EXPECT_NE(bad_conf.status().message().find("FRAGSCOPE_ALLOC_CONF=\"max_split_size_mb:2\""),
            std::string::npos)
      << bad_conf.status();
  EXPECT_NE(bad_conf.status().message().find("max_split_size_mb"), std::string::npos);

  setenv("FRAGSCOPE_LOG", "/tmp/%q.fslog", 1);
  absl::StatusOr<HookConfig> bad_log = LoadHookConfig("", std::nullopt);
  unsetenv("FRAGSCOPE_LOG");
  ASSERT_FALSE(bad_log.ok());
  EXPECT_NE(bad_log.status().message().find("FRAGSCOPE_LOG=\"/tmp/%q.fslog\""), std::string::npos)
      << bad_log.status();
}

TEST(LoadHookConfigTest, RejectsTheCudaMallocAsyncBackend) {
  absl::StatusOr<HookConfig> config = LoadHookConfig("backend:cudaMallocAsync", "");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("backend:cudaMallocAsync"), std::string::npos)
      << config.status();
}

TEST(LoadHookConfigTest, LogZstdLevelComesFromTheEnvironment) {
  setenv(kLogZstdEnv, "3", 1);
  absl::StatusOr<HookConfig> config = LoadHookConfig("", "/tmp/x.fslog");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->log_options.zstd_level, 3);
  setenv(kLogZstdEnv, "fast", 1);
  config = LoadHookConfig("", "/tmp/x.fslog");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("FRAGSCOPE_LOG_ZSTD=\"fast\""), std::string::npos)
      << config.status();
  unsetenv(kLogZstdEnv);
  config = LoadHookConfig("", "/tmp/x.fslog");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->log_options.zstd_level, 0);
}

}  // namespace
}  // namespace fragscope::hooks
