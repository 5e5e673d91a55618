// The LibTorch hooks link and behave on a machine without a GPU (CI): registration works before
// CUDA is initialized and refuses afterwards; observe fails cleanly without a driver. The GPU
// behaviour is tested in tests/gpu/.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/headeronly/version.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "hooks/torch_allocator.h"
#include "hooks/torch_observer.h"

extern "C" const char* fragscope_torch_version(void);

namespace fragscope::torch_hooks {
namespace {

TEST(TorchHooksTest, ReportsTheLibTorchVersionItWasBuiltWith) {
  EXPECT_EQ(std::string(fragscope_torch_version()),
            absl::StrCat(TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".", TORCH_VERSION_PATCH));
}

TEST(TorchHooksTest, BadConfIsInvalidArgumentAndInstallsNothing) {
  absl::Status status = UseFragscopeAllocator({.conf = "max_split_size_mb:2", .log = ""});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("max_split_size_mb"), std::string::npos) << status;
  EXPECT_NE(c10::cuda::CUDACachingAllocator::get()->name(), "pluggable");
}

TEST(TorchHooksTest, InstallsOnceThenRefuses) {
  if (c10::cuda::device_count() > 0) GTEST_SKIP() << "tests/gpu covers machines with a GPU";
  absl::Status first = UseFragscopeAllocator({.conf = "", .log = ""});
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_EQ(c10::cuda::CUDACachingAllocator::get()->name(), "pluggable");
  absl::Status second = UseFragscopeAllocator({.conf = "", .log = ""});
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_NE(second.message().find("already initialized"), std::string::npos) << second;
  const auto stats = MemoryStats(0);
  EXPECT_GT(stats.size(), 50u);
  for (const auto& [key, value] : stats) EXPECT_EQ(value, key == "max_split_size" ? -1 : 0) << key;
  EXPECT_NE(MemorySummary(0).find("PyTorch CUDA memory summary"), std::string::npos);
  EXPECT_EQ(MemorySnapshotJson(0), "{\"device\":0,\"segments\":[]}");
}

TEST(TorchHooksTest, ObserveFailsCleanlyWithoutADriver) {
  if (c10::cuda::device_count() > 0) GTEST_SKIP() << "tests/gpu covers machines with a GPU";
  absl::Status status = ObserveNativeAllocator("/tmp/fragscope_torch_hooks_test.%p.fslog");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(ObserveFlush().ok());
  ObserveMark("no-op");
}

}  // namespace
}  // namespace fragscope::torch_hooks
