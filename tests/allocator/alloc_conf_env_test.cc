// PyTorch 2.11's settings surface: which environment variable wins (alloc_conf_env.h), exactly
// 2.11's key set, and 2.11's message for any other key.
#include "allocator/alloc_conf_env.h"

#include <map>
#include <optional>
#include <string>

#include "allocator/allocator_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/allocator/allocator_options_test_util.h"

namespace fragscope {
namespace {

using ::fragscope::testing::ParseError;
using ::fragscope::testing::ParseOk;
using ::testing::HasSubstr;

GetEnvFunction FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(AllocConfEnvTest, NeitherSetIsNothing) {
  EXPECT_FALSE(ReadAllocConfEnv(FakeEnv({})).has_value());
}

TEST(AllocConfEnvTest, EachNameAloneIsRead) {
  std::optional<AllocConfEnv> env =
      ReadAllocConfEnv(FakeEnv({{"PYTORCH_ALLOC_CONF", "max_split_size_mb:60"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->variable, "PYTORCH_ALLOC_CONF");
  EXPECT_EQ(env->value, "max_split_size_mb:60");
  EXPECT_FALSE(env->shadowed_value.has_value());
  env = ReadAllocConfEnv(FakeEnv({{"PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:40"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->variable, "PYTORCH_CUDA_ALLOC_CONF");
}

// 2.11 reads PYTORCH_CUDA_ALLOC_CONF first, even when it is empty, and says nothing of the other.
TEST(AllocConfEnvTest, TheOldNameWinsAsIn211) {
  std::optional<AllocConfEnv> env = ReadAllocConfEnv(FakeEnv(
      {{"PYTORCH_CUDA_ALLOC_CONF", ""}, {"PYTORCH_ALLOC_CONF", "expandable_segments:True"}}));
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->variable, "PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(env->value, "");
  ASSERT_TRUE(env->shadowed_value.has_value());
  EXPECT_EQ(*env->shadowed_value, "expandable_segments:True");
  EXPECT_EQ(ShadowedAllocConfNote(*env),
            "PYTORCH_ALLOC_CONF='expandable_segments:True' is not in effect: PyTorch 2.11 reads "
            "PYTORCH_CUDA_ALLOC_CONF='' instead whenever that is set (and warns of neither)");
}

// The keys of c10/core/AllocatorConfig.h and c10/cuda/CUDAAllocatorConfig.h at v2.11.0.
TEST(AllocatorKeySetTest, Exactly211sKeysAreAccepted) {
  for (const char* key : {"large_segment_size_mb", "max_split_size_mb", "max_non_split_rounding_mb",
                          "garbage_collection_threshold", "roundup_power2_divisions",
                          "expandable_segments", "pinned_use_background_threads", "backend",
                          "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                          "release_lock_on_hipmalloc", "pinned_use_hip_host_register",
                          "graph_capture_record_stream_reuse", "pinned_reserve_segment_size_mb",
                          "pinned_num_register_threads", "per_process_memory_fraction"}) {
    EXPECT_TRUE(FindAllocatorKey(key).has_value()) << key;
  }
  // kAllocatorKeyCount: the 16 spellings above less the two HIP aliases, plus placement.
  EXPECT_EQ(kAllocatorKeyCount, 15u);
}

TEST(AllocatorKeySetTest, OtherKeysFailWith211sMessage) {
  // Keys of PyTorch's development branch after 2.11, and of older versions.
  for (const char* key : {"throw_on_cudamalloc_oom", "expandable_segments_reserve",
                          "expandable_segments_reserve_by_class", "pinned_free_catch_all",
                          "release_lock_on_device_malloc", "foo"}) {
    EXPECT_EQ(ParseError(std::string(key) + ":True"),
              "Unrecognized key '" + std::string(key) + "' in CUDA allocator config.");
  }
}

TEST(AllocatorKeySetTest, HostAndCaptureKeysAreAcceptedAndDoNotAffectDeviceMemory) {
  const AllocatorOptions options = ParseOk(
      "pinned_use_background_threads:True,pinned_use_cuda_host_register:True,"
      "pinned_num_register_threads:4,pinned_reserve_segment_size_mb:8,"
      "release_lock_on_cudamalloc:True,graph_capture_record_stream_reuse:True");
  for (size_t i = 0; i < kAllocatorKeyCount; ++i) {
    const auto key = static_cast<AllocatorKey>(i);
    EXPECT_EQ(AffectsDeviceMemory(key), !options.Given(key)) << AllocatorKeyName(key);
  }
  EXPECT_THAT(ParseError("pinned_num_register_threads:3"), HasSubstr("not a power of 2"));
}

}  // namespace
}  // namespace fragscope
