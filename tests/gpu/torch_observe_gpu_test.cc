// Mode 2: PyTorch's native allocator observed through its trace tracker. The log must agree with
// PyTorch's own statistics (no event lost, none invented), and observing must not change them.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "hooks/torch_observer.h"

namespace fragscope::torch_hooks {
namespace {

int64_t NativeStat(const std::string& key) {
  const c10::CachingDeviceAllocator::DeviceStats stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const auto all = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
  if (key == "allocation") return stats.allocation[all].allocated;
  if (key == "free") return stats.allocation[all].freed;
  if (key == "segment") return stats.segment[all].allocated;
  if (key == "segment_freed") return stats.segment[all].freed;
  if (key == "requested") return stats.requested_bytes[all].allocated;
  if (key == "ooms") return stats.num_ooms;
  return -1;
}

TEST(TorchObserveGpuTest, LogMatchesPyTorchsOwnStats) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string pattern =
      absl::StrCat(::testing::TempDir(), "/fragscope_observe_gpu.%p.%d.fslog");
  ASSERT_TRUE(ObserveNativeAllocator(pattern).ok());
  EXPECT_TRUE(ObserveNativeAllocator(pattern).ok()) << "same pattern: a no-op";
  EXPECT_FALSE(ObserveNativeAllocator(pattern + ".other").ok());
  c10::cuda::CUDACachingAllocator::resetAccumulatedStats(0);

  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(256, 1024), torch::nn::ReLU(),
                              torch::nn::Linear(1024, 10));
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 10; ++step) {
    ObserveMark(absl::StrCat("step ", step));
    auto x = torch::randn({64, 256}, torch::kCUDA);
    auto y = torch::randint(0, 10, {64},
                            torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    optimizer.step();
  }
  try {
    auto huge = torch::empty({int64_t{1} << 48}, torch::TensorOptions().device(torch::kCUDA));
    FAIL() << "allocated 1 PiB";
  } catch (const c10::OutOfMemoryError&) {
  }
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  ASSERT_TRUE(ObserveFlush().ok());

  const std::string path =
      absl::StrCat(::testing::TempDir(), "/fragscope_observe_gpu.", getpid(), ".0.fslog");
  absl::StatusOr<FslogReader> reader = FslogReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->header().device_index, 0);
  EXPECT_GT(reader->header().device_total_bytes, 0u);
  std::map<EventKind, int64_t> kinds;
  int64_t requested = 0;
  LogEntry entry;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++kinds[entry.kind()];
    if (entry.kind() == EventKind::kAlloc) {
      requested += static_cast<int64_t>(entry.event().requested_bytes);
    }
  }
  EXPECT_EQ(reader->missing_records(), 0u);
  // Nothing was allocated before resetAccumulatedStats: the log and PyTorch count the same events.
  EXPECT_EQ(kinds[EventKind::kAlloc], NativeStat("allocation"));
  EXPECT_EQ(kinds[EventKind::kFreeRequested], NativeStat("free"));
  EXPECT_EQ(kinds[EventKind::kSegmentAlloc], NativeStat("segment"));
  EXPECT_EQ(kinds[EventKind::kSegmentFree], NativeStat("segment_freed"));
  EXPECT_EQ(requested, NativeStat("requested"));
  EXPECT_EQ(kinds[EventKind::kOom], 1);
  EXPECT_EQ(NativeStat("ooms"), 1);
  EXPECT_EQ(kinds[EventKind::kMarker], 10);
}

}  // namespace
}  // namespace fragscope::torch_hooks
