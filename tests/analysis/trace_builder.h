// TraceBuilder: writes scenario traces for the analyzer's tests. A scripted job runs on
// fragscope's allocator over a SimulatedBackend while an FslogFileWriter records it, exactly as
// a job under the pluggable allocator would be recorded, so the expected allocator decisions of
// every scenario are the allocator's own.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "analysis/report/fslog_file_writer.h"
#include "gtest/gtest.h"

namespace fragscope::testing {

// A fresh path in this test process's temporary directory, which is removed at exit (ctest runs
// each test case in a process of its own: one directory each).
inline std::string TempPath(const std::string& name) {
  struct ProcessDir {
    std::filesystem::path path = std::filesystem::temp_directory_path() /
                                 absl::StrFormat("fragscope-analysis-test-%d", getpid());
    ~ProcessDir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const ProcessDir dir;
  static int counter = 0;
  std::filesystem::create_directories(dir.path);
  return (dir.path / absl::StrFormat("%d-%s", counter++, name)).string();
}

class TraceBuilder {
 public:
  // REQUIRES: conf parses.
  explicit TraceBuilder(uint64_t capacity_bytes, const std::string& conf = "",
                        const std::string& name = "trace.fslog", int32_t rank = 0,
                        int32_t world_size = 0)
      : path_(TempPath(name)), backend_(capacity_bytes) {
    FslogHeader header;
    header.device_total_bytes = capacity_bytes;
    header.device_name = "simulated test GPU";
    header.allocator_options = conf;
    header.rank = rank;
    header.world_size = world_size;
    header.start_monotonic_ns = 1'000'000'000;
    writer_ = *FslogFileWriter::Open(path_, header);
    allocator_ = std::make_unique<CachingAllocator>(backend_, *ParseAllocatorOptions(conf));
    allocator_->AddObserver(writer_.get());
  }
  ~TraceBuilder() {
    if (allocator_ != nullptr) allocator_->RemoveObserver(writer_.get());
  }

  // Advances the trace clock by 1 us per operation.
  void Tick() { writer_->set_time_ns(now_ns_ += 1000); }
  DevicePtr Alloc(uint64_t bytes, StreamId stream = 0) {
    Tick();
    absl::StatusOr<DevicePtr> p = allocator_->Allocate(bytes, stream);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : 0;
  }
  // An allocation expected to fail with an OOM.
  void AllocExpectOom(uint64_t bytes, StreamId stream = 0) {
    Tick();
    absl::StatusOr<DevicePtr> p = allocator_->Allocate(bytes, stream);
    EXPECT_FALSE(p.ok()) << "expected an OOM for " << bytes << " bytes";
  }
  void Free(DevicePtr p) {
    Tick();
    EXPECT_TRUE(allocator_->Free(p).ok());
  }
  void Mark(const std::string& text) {
    Tick();
    writer_->Mark(text, now_ns_);
  }
  // As a job's settings change: the options, and the memory fraction they carry (the hooks log
  // set_per_process_memory_fraction as an options change with per_process_memory_fraction).
  void SetOptions(const std::string& conf) {
    Tick();
    const AllocatorOptions options = *ParseAllocatorOptions(conf);
    allocator_->SetOptions(options);
    EXPECT_TRUE(allocator_->SetMemoryFraction(options.per_process_memory_fraction).ok());
    writer_->OptionsChange(conf, now_ns_);
  }
  // A block's role (Note [Tag records]), as the predictor tags it.
  void Tag(DevicePtr p, AllocationRole role) { writer_->Tag(p, role, now_ns_); }
  // Who holds the memory (Note [Context records]): strings and contexts defined, and the context
  // of the allocations made from now on (0: none).
  void DefineString(uint32_t id, std::string_view text) {
    writer_->DefineString(id, text, now_ns_);
  }
  void DefineContext(const ContextDefinition& context) { writer_->DefineContext(context, now_ns_); }
  void SetContext(uint32_t context) { writer_->set_alloc_context(context); }
  FslogFileWriter& writer() { return *writer_; }
  // The job's model (Note [Model records]), as fragscope.record_model() writes it.
  void RecordModel(const std::string& json) {
    Tick();
    writer_->RecordModel(json, now_ns_);
  }
  void EmptyCache() {
    Tick();
    allocator_->EmptyCache();
  }
  CachingAllocator& allocator() { return *allocator_; }
  SimulatedBackend& backend() { return backend_; }

  // Closes the log and returns its path.
  std::string Finish() {
    allocator_->RemoveObserver(writer_.get());
    EXPECT_TRUE(writer_->Close().ok());
    return path_;
  }

 private:
  std::string path_;
  SimulatedBackend backend_;
  std::unique_ptr<FslogFileWriter> writer_;
  std::unique_ptr<CachingAllocator> allocator_;
  uint64_t now_ns_ = 0;
};

}  // namespace fragscope::testing
