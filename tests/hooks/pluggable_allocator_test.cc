// The C ABI of libfragscope_alloc.so, driven exactly as PyTorch drives it, on simulated devices.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/simulated_backend.h"
#include "analysis/analyzer.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/pluggable_allocator.h"
#include "tests/fslog/fslog_test_util.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::hooks {
namespace {

cudaStream_t Stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

class PluggableAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FRAGSCOPE_ALLOC_CONF");
    unsetenv("FRAGSCOPE_LOG");
    UseSimulatedDevices(1 * kGiB);
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("fragscope_pluggable_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    ResetPluggableAllocatorForTesting();
    std::filesystem::remove_all(dir_);
  }

  // Every device is a SimulatedBackend of `capacity`; backends_ keeps a pointer to each.
  void UseSimulatedDevices(uint64_t capacity) {
    ResetPluggableAllocatorForTesting([this, capacity](int device) {
      std::lock_guard<std::mutex> lock(mu_);
      ++created_[device];
      auto backend = std::make_unique<SimulatedBackend>(capacity, device);
      backends_[device] = backend.get();
      return absl::StatusOr<std::unique_ptr<DeviceBackend>>(std::move(backend));
    });
  }

  std::filesystem::path dir_;
  std::mutex mu_;
  std::map<int, int> created_;
  std::map<int, SimulatedBackend*> backends_;
};

TEST_F(PluggableAllocatorTest, MallocAndFreeKeepPyTorchStats) {
  void* p = fragscope_malloc(100, 0, Stream(0));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(fragscope_stat(0, "allocation.all.current"), 1);
  EXPECT_EQ(fragscope_stat(0, "allocated_bytes.all.current"), 512);
  EXPECT_EQ(fragscope_stat(0, "requested_bytes.all.current"), 100);
  EXPECT_EQ(fragscope_stat(0, "reserved_bytes.small_pool.current"), int64_t{2 * kMiB});
  fragscope_free(p, 100, 0, Stream(0));
  EXPECT_EQ(fragscope_stat(0, "allocation.all.current"), 0);
  EXPECT_EQ(fragscope_stat(0, "reserved_bytes.all.current"), int64_t{2 * kMiB});

  // The cached block is reused: no second segment.
  void* q = fragscope_malloc(200, 0, Stream(0));
  EXPECT_EQ(q, p);
  EXPECT_EQ(fragscope_stat(0, "segment.all.allocated"), 1);
  fragscope_free(q, 200, 0, Stream(0));

  fragscope_empty_cache();
  EXPECT_EQ(fragscope_stat(0, "reserved_bytes.all.current"), 0);
  EXPECT_EQ(backends_[0]->used_bytes(), 0u);
}

TEST_F(PluggableAllocatorTest, ZeroSizeAndNullAreNoOps) {
  EXPECT_EQ(fragscope_malloc(0, 0, Stream(0)), nullptr);
  fragscope_free(nullptr, 0, 0, Stream(0));
  EXPECT_EQ(fragscope_stat(0, "allocation.all.allocated"), 0);
  EXPECT_TRUE(created_.empty()) << "no allocator is needed for empty tensors";
}

TEST_F(PluggableAllocatorTest, StatKeysAreTorchMemoryStatsKeys) {
  const int count = fragscope_stat_count();
  ASSERT_GT(count, 50);
  std::vector<std::string> keys;
  for (int i = 0; i < count; ++i) keys.push_back(fragscope_stat_key(i));
  EXPECT_EQ(fragscope_stat_key(count), nullptr);
  EXPECT_EQ(fragscope_stat_key(-1), nullptr);
  for (const char* key : {"allocated_bytes.all.current", "reserved_bytes.large_pool.peak",
                          "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms",
                          "max_split_size", "requested_bytes.small_pool.freed"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
  void* p = fragscope_malloc(3 * kMiB, 0, Stream(0));
  std::vector<int64_t> values(static_cast<size_t>(count), -7);
  EXPECT_EQ(fragscope_stat_values(0, values.data(), count), count);
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(values[static_cast<size_t>(i)],
              fragscope_stat(0, keys[static_cast<size_t>(i)].c_str()))
        << keys[static_cast<size_t>(i)];
  }
  EXPECT_EQ(fragscope_stat_values(0, nullptr, 0), count);  // size query
  EXPECT_EQ(fragscope_stat_values(-1, values.data(), count), -1);
  EXPECT_EQ(fragscope_stat(5, "allocation.all.current"), 0) << "untouched device reads zero";
  fragscope_free(p, 0, 0, Stream(0));
}

TEST_F(PluggableAllocatorTest, OutOfMemoryReturnsNullAndExplainsOnStderr) {
  UseSimulatedDevices(64 * kMiB);
  ::testing::internal::CaptureStderr();
  void* p = fragscope_malloc(1 * kGiB, 0, Stream(0));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(err.find("CUDA out of memory"), std::string::npos) << err;
  EXPECT_NE(err.find("Tried to allocate"), std::string::npos) << err;
  EXPECT_NE(err.find("illegal memory access"), std::string::npos) << err;
  EXPECT_EQ(fragscope_stat(0, "num_ooms"), 1);
  EXPECT_NE(std::string(fragscope_last_error()).find("out of memory"), std::string::npos);
  // The allocator still works afterwards.
  void* q = fragscope_malloc(1 * kMiB, 0, Stream(0));
  EXPECT_NE(q, nullptr);
  fragscope_free(q, 0, 0, Stream(0));
}

TEST_F(PluggableAllocatorTest, BadEnvironmentConfRefusesToAllocate) {
  setenv("FRAGSCOPE_ALLOC_CONF", "max_split_size_mb:2", 1);
  UseSimulatedDevices(1 * kGiB);  // forget the configuration read so far
  ::testing::internal::CaptureStderr();
  fragscope_init(1);
  void* p = fragscope_malloc(100, 0, Stream(0));
  void* q = fragscope_malloc(100, 0, Stream(0));
  const std::string err = ::testing::internal::GetCapturedStderr();
  unsetenv("FRAGSCOPE_ALLOC_CONF");
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(q, nullptr);
  EXPECT_NE(err.find("FRAGSCOPE_ALLOC_CONF=\"max_split_size_mb:2\""), std::string::npos) << err;
  EXPECT_NE(err.find("refuses to allocate"), std::string::npos) << err;
  EXPECT_TRUE(created_.empty());
}

TEST_F(PluggableAllocatorTest, ConfigureValidatesAndApplies) {
  EXPECT_EQ(fragscope_configure("no_such_key:1", ""), -1);
  EXPECT_NE(std::string(fragscope_last_error()).find("no_such_key"), std::string::npos)
      << fragscope_last_error();
  EXPECT_EQ(fragscope_configure("backend:cudaMallocAsync", ""), -1);
  EXPECT_EQ(fragscope_configure("", "bad%x.fslog"), -1);
  EXPECT_NE(std::string(fragscope_last_error()).find("%x"), std::string::npos);

  ASSERT_EQ(fragscope_configure("max_split_size_mb:20", ""), 0) << fragscope_last_error();
  void* p = fragscope_malloc(100, 0, Stream(0));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(fragscope_stat(0, "max_split_size"), int64_t{20 * kMiB});
  EXPECT_EQ(fragscope_configure("", ""), -1) << "configuring after the first allocation fails";
  fragscope_free(p, 0, 0, Stream(0));
}

TEST_F(PluggableAllocatorTest, MemoryFractionCapsReserved) {
  fragscope_set_memory_fraction(0.1, 0);  // ~102 MiB of 1 GiB
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(fragscope_malloc(200 * kMiB, 0, Stream(0)), nullptr);
  ::testing::internal::GetCapturedStderr();
  void* p = fragscope_malloc(50 * kMiB, 0, Stream(0));
  EXPECT_NE(p, nullptr);
  fragscope_free(p, 0, 0, Stream(0));
  ::testing::internal::CaptureStderr();
  fragscope_set_memory_fraction(1.5, 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("fraction"), std::string::npos) << err;
}

TEST_F(PluggableAllocatorTest, RecordStreamDelaysReuseUntilTheStreamCompletes) {
  void* p = fragscope_malloc(4 * kMiB, 0, Stream(1));
  ASSERT_NE(p, nullptr);
  backends_[0]->SetStreamBusy(2, true);
  fragscope_record_stream(p, Stream(2));
  fragscope_free(p, 0, 0, Stream(1));
  EXPECT_EQ(fragscope_stat(0, "active.all.current"), 1) << "pending on stream 2";
  void* q = fragscope_malloc(4 * kMiB, 0, Stream(1));
  EXPECT_NE(q, p) << "the block is not reused while stream 2 runs";
  backends_[0]->CompleteStream(2);
  fragscope_free(q, 0, 0, Stream(1));
  void* r = fragscope_malloc(4 * kMiB, 0, Stream(1));
  EXPECT_EQ(fragscope_stat(0, "active.all.current"), 1);
  fragscope_free(r, 0, 0, Stream(1));
}

TEST_F(PluggableAllocatorTest, UnknownPointersAreReportedNotFatal) {
  int on_host = 0;
  ::testing::internal::CaptureStderr();
  fragscope_free(&on_host, 4, 0, Stream(0));
  fragscope_record_stream(&on_host, Stream(3));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("fragscope_free"), std::string::npos) << err;
  EXPECT_NE(err.find("fragscope_record_stream"), std::string::npos) << err;
}

TEST_F(PluggableAllocatorTest, RecordStreamPastTheBlocksLimitIsReportedAsSuch) {
  void* p = fragscope_malloc(4 * kMiB, 0, Stream(1));
  ASSERT_NE(p, nullptr);
  for (uintptr_t s = 2; s <= CachingAllocator::kMaxStreamUses + 1; ++s) {
    fragscope_record_stream(p, Stream(s));
  }
  ::testing::internal::CaptureStderr();
  fragscope_record_stream(p, Stream(CachingAllocator::kMaxStreamUses + 2));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("already in use on 32767 other streams"), std::string::npos) << err;
  EXPECT_EQ(err.find("not a fragscope allocation"), std::string::npos) << err;
  fragscope_free(p, 0, 0, Stream(1));
}

TEST_F(PluggableAllocatorTest, FreeFindsTheAllocatorWhenTheDeviceIsWrong) {
  void* p = fragscope_malloc(1000, 1, Stream(0));
  ASSERT_NE(p, nullptr);
  fragscope_free(p, 1000, 0, Stream(0));
  EXPECT_EQ(fragscope_stat(1, "allocation.all.current"), 0);
}

TEST_F(PluggableAllocatorTest, NoExceptionCrossesTheCAbi) {
  ResetPluggableAllocatorForTesting([](int) -> absl::StatusOr<std::unique_ptr<DeviceBackend>> {
    throw std::runtime_error("backend exploded");
  });
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(fragscope_malloc(100, 0, Stream(0)), nullptr);
  ::testing::internal::GetCapturedStderr();
  EXPECT_NE(std::string(fragscope_last_error()).find("backend exploded"), std::string::npos);
  EXPECT_EQ(fragscope_malloc(100, kMaxDevices, Stream(0)), nullptr);
  EXPECT_EQ(fragscope_malloc(100, -1, Stream(0)), nullptr);
}

TEST_F(PluggableAllocatorTest, SummaryAndSnapshotText) {
  void* p = fragscope_malloc(100, 0, Stream(7));
  const size_t n = fragscope_memory_summary(0, nullptr, 0);
  ASSERT_GT(n, 100u);
  std::string summary(n + 1, '\0');
  EXPECT_EQ(fragscope_memory_summary(0, summary.data(), summary.size()), n);
  summary.resize(n);
  EXPECT_NE(summary.find("PyTorch CUDA memory summary, device ID 0"), std::string::npos);

  char small[8];
  const size_t json_size = fragscope_snapshot_json(0, small, sizeof(small));
  EXPECT_EQ(std::string(small), "{\"devic") << "truncated and terminated";
  std::string json(json_size + 1, '\0');
  fragscope_snapshot_json(0, json.data(), json.size());
  json.resize(json_size);
  EXPECT_NE(json.find("\"state\":\"active_allocated\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"requested_size\":100"), std::string::npos) << json;
  EXPECT_NE(json.find("\"stream\":7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"segment_type\":\"small\""), std::string::npos) << json;
  fragscope_free(p, 0, 0, Stream(7));
  EXPECT_EQ(fragscope_snapshot_json(3, nullptr, 0),
            std::string("{\"device\":3,\"segments\":[]}").size());
}

std::vector<LogEntry> ReadAll(const std::string& path) {
  testing::ReadResult result = testing::ReadFile(path);
  EXPECT_TRUE(result.status.ok()) << result.status;
  return result.entries;
}

// fragscope.record_model() in a job: the record reaches every log, those opened later included,
// and the analyzer gives the footprint verdict from it with no flag.
TEST_F(PluggableAllocatorTest, TheRecordedModelReachesEveryLogAndTheVerdict) {
  const std::string pattern = (dir_ / "model.%d.fslog").string();
  setenv("FRAGSCOPE_LOG", pattern.c_str(), 1);
  UseSimulatedDevices(1 * kGiB);
  void* a = fragscope_malloc(5 * kMiB, 0, Stream(0));  // device 0's log opens
  const std::string json =
      R"({"format": "fragscope.model/1", "config": {"model_type": "gpt2", "n_layer": 12, )"
      R"("n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}, )"
      R"("job": {"mode": "training", "seq": 1024, "micro_batch": 16}})";
  fragscope_record_model(json.c_str());
  void* b = fragscope_malloc(5 * kMiB, 1, Stream(0));  // device 1's opens after the record
  fragscope_free(a, 0, 0, Stream(0));
  fragscope_free(b, 0, 1, Stream(0));
  EXPECT_EQ(fragscope_flush(), 0);
  unsetenv("FRAGSCOPE_LOG");
  for (int device : {0, 1}) {
    const std::string path = (dir_ / absl::StrCat("model.", device, ".fslog")).string();
    int records = 0;
    for (const LogEntry& e : ReadAll(path)) {
      if (e.kind() == EventKind::kModel) {
        ++records;
        EXPECT_EQ(e.text, json);
      }
    }
    EXPECT_EQ(records, 1) << path;
    absl::StatusOr<AnalysisReport> report = AnalyzeTraces({path}, AnalysisOptions{});
    ASSERT_TRUE(report.ok()) << report.status();
    const JobVerdict& verdict = report->ranks[0].verdict;
    ASSERT_TRUE(verdict.footprint.has_value()) << path;
    EXPECT_EQ(verdict.footprint->origin, "the log's model record");
    // GPT-2 small at seq 1024 x 16 (~23.6 GiB with torch-autocast) on a 1 GiB device.
    EXPECT_TRUE(verdict.capacity_bound);
    EXPECT_EQ(verdict.basis, VerdictBasis::kFootprint);
  }
}

TEST_F(PluggableAllocatorTest, LogsEveryDeviceToItsOwnFile) {
  const std::string pattern = (dir_ / "job.%d.fslog").string();
  setenv("FRAGSCOPE_LOG", pattern.c_str(), 1);
  UseSimulatedDevices(1 * kGiB);
  fragscope_mark("before any allocation");  // kept until the logs open
  void* a = fragscope_malloc(100, 0, Stream(0));
  void* b = fragscope_malloc(5 * kMiB, 1, Stream(0));
  fragscope_mark("step 1 / forward");
  fragscope_set_memory_fraction(0.5, 1);
  fragscope_free(a, 0, 0, Stream(0));
  fragscope_free(b, 0, 1, Stream(0));
  EXPECT_EQ(fragscope_flush(), 0);
  unsetenv("FRAGSCOPE_LOG");

  const std::vector<LogEntry> dev0 = ReadAll((dir_ / "job.0.fslog").string());
  const std::vector<LogEntry> dev1 = ReadAll((dir_ / "job.1.fslog").string());
  std::map<EventKind, int> kinds0, kinds1;
  std::vector<std::string> markers0, markers1;
  for (const LogEntry& e : dev0) {
    ++kinds0[e.kind()];
    if (e.kind() == EventKind::kMarker) markers0.push_back(e.text);
  }
  for (const LogEntry& e : dev1) {
    ++kinds1[e.kind()];
    if (e.kind() == EventKind::kMarker) markers1.push_back(e.text);
  }
  const std::vector<std::string> expected = {"before any allocation", "step 1 / forward"};
  EXPECT_EQ(markers0, expected);
  EXPECT_EQ(markers1, expected);
  EXPECT_EQ(kinds0[EventKind::kSegmentAlloc], 1);
  EXPECT_EQ(kinds0[EventKind::kAlloc], 1);
  EXPECT_EQ(kinds0[EventKind::kFreeRequested], 1);
  EXPECT_EQ(kinds0[EventKind::kFreeCompleted], 1);
  EXPECT_EQ(kinds1[EventKind::kAlloc], 1);
  EXPECT_EQ(kinds1[EventKind::kOptionsChange], 1);
  for (const LogEntry& e : dev0) {
    if (e.kind() == EventKind::kAlloc) {
      EXPECT_EQ(e.event().requested_bytes, 100u);
    }
  }
  for (const LogEntry& e : dev1) {
    if (e.kind() == EventKind::kOptionsChange) {
      EXPECT_NE(e.text.find("per_process_memory_fraction:0.5"), std::string::npos) << e.text;
    }
    EXPECT_EQ(e.record.device, 1);
  }
}

TEST_F(PluggableAllocatorTest, ConcurrentFirstUseCreatesOneAllocatorPerDevice) {
  constexpr int kThreads = 8;
  constexpr int kDevices = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 200; ++i) {
        const int device = (t + i) % kDevices;
        void* p = fragscope_malloc(static_cast<size_t>(512 * (1 + i % 7)), device,
                                   Stream(static_cast<uintptr_t>(t)));
        if (p == nullptr) ++failures;
        fragscope_free(p, 0, device, Stream(static_cast<uintptr_t>(t)));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_EQ(created_[d], 1) << "device " << d;
    EXPECT_EQ(fragscope_stat(d, "allocation.all.current"), 0);
  }
}

TEST_F(PluggableAllocatorTest, SimulateStartsOverOnAFreshSimulatedDevice) {
  const std::string first = (dir_ / "first.fslog").string();
  const std::string second = (dir_ / "second.fslog").string();
  ASSERT_EQ(fragscope_simulate(4 * kGiB, "", first.c_str()), 0) << fragscope_last_error();
  void* a = fragscope_malloc(3 * kGiB, 0, Stream(0));  // fits 4 GiB, not the fixture's 1 GiB
  ASSERT_NE(a, nullptr);
  fragscope_mark("first");
  EXPECT_EQ(fragscope_stat(0, "allocation.all.current"), 1);

  // Starting over flushes and closes the first log and forgets its allocations.
  ASSERT_EQ(fragscope_simulate(8 * kMiB, "max_split_size_mb:20", second.c_str()), 0)
      << fragscope_last_error();
  EXPECT_EQ(fragscope_stat(0, "allocation.all.current"), 0);
  EXPECT_EQ(fragscope_malloc(16 * kMiB, 0, Stream(0)), nullptr) << "an 8 MiB device";
  void* b = fragscope_malloc(1 * kMiB, 0, Stream(0));
  ASSERT_NE(b, nullptr);
  fragscope_free(b, 0, 0, Stream(0));
  EXPECT_EQ(fragscope_flush(), 0);

  int allocs = 0, markers = 0;
  for (const LogEntry& e : ReadAll(first)) {
    allocs += e.kind() == EventKind::kAlloc;
    markers += e.kind() == EventKind::kMarker;
  }
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(markers, 1);
  EXPECT_FALSE(ReadAll(second).empty());
}

TEST_F(PluggableAllocatorTest, SimulateRejectsABadSizeOrConf) {
  EXPECT_EQ(fragscope_simulate(1024, "", ""), -1);
  EXPECT_NE(std::string(fragscope_last_error()).find("1024 bytes"), std::string::npos)
      << fragscope_last_error();
  EXPECT_EQ(fragscope_simulate(uint64_t{5} << 40, "", ""), -1);
  EXPECT_EQ(fragscope_simulate(1 * kGiB, "max_split_size_mb:2", ""), -1);
  EXPECT_NE(std::string(fragscope_last_error()).find("max_split_size_mb"), std::string::npos)
      << fragscope_last_error();
}

}  // namespace
}  // namespace fragscope::hooks
