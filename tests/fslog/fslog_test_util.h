// Helpers for event-log tests: hand-built logs (LogBuilder), sample events of every kind, and
// whole-file reading.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/allocator_events.h"
#include "fslog/fslog_format.h"
#include "fslog/fslog_reader.h"
#include "gtest/gtest.h"

namespace fragscope::testing {

inline FslogHeader SampleHeader() {
  FslogHeader header;
  header.clock = FslogClock::kMonotonic;
  header.device_index = 3;
  header.device_total_bytes = 80 * (uint64_t{1} << 30);
  header.pid = 4242;
  header.rank = 5;
  header.local_rank = 1;
  header.world_size = 8;
  header.start_wall_ns = 1'700'000'000'000'000'000;
  header.start_monotonic_ns = 1'000'000'000;
  header.device_name = "Simulated H100";
  header.host = "node-17";
  header.allocator_options = "max_split_size_mb:128,expandable_segments:False";
  return header;
}

// Builds .fslog bytes by hand, so tests can make any structure, valid or not.
class LogBuilder {
 public:
  explicit LogBuilder(const FslogHeader& header = SampleHeader())
      : bytes_(SerializeFileHeader(header)) {}

  // Appends a sealed chunk; returns its file offset.
  size_t AddChunk(const std::vector<LogRecord>& records, uint64_t first_sequence) {
    const size_t offset = bytes_.size();
    ChunkHeader chunk;
    SealChunk(static_cast<uint32_t>(records.size()), first_sequence, records.data(), &chunk);
    bytes_.append(reinterpret_cast<const char*>(&chunk), sizeof(chunk));
    bytes_.append(reinterpret_cast<const char*>(records.data()),
                  records.size() * sizeof(LogRecord));
    return offset;
  }
  // Appends a chunk with the next sequence numbers.
  size_t AddChunk(const std::vector<LogRecord>& records) {
    const size_t offset = AddChunk(records, next_sequence_);
    next_sequence_ += records.size();
    return offset;
  }

  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
  uint64_t next_sequence_ = 0;
};

// An allocator event of `kind` with every field its layout carries set to a distinct value
// derived from `seed`.
inline AllocatorEvent SampleEvent(EventKind kind, uint64_t seed) {
  AllocatorEvent e;
  e.kind = kind;
  e.pool = seed % 2 ? PoolKind::kLarge : PoolKind::kSmall;
  e.flags = static_cast<uint8_t>(seed * 7 + 1) & 0x3F;
  e.device = static_cast<int32_t>(seed % 4);
  e.bytes = 512 * (seed + 1);
  e.requested_bytes = 500 * (seed + 1);
  e.stream = 0x5000 + seed;
  if (kind == EventKind::kOom || kind == EventKind::kEmptyCache) {
    e.device_free_bytes = 1'000'000 + seed;
    e.device_total_bytes = 80'000'000'000 + seed;
    e.reserved_bytes = 3'000'000 + seed;
    e.allocated_bytes = 2'000'000 + seed;
  } else {
    e.ptr = 0x7f0000000000 + seed * 0x1000;
    e.segment = 0x7f0000000000 + seed * 0x100;
    e.split_bytes = 1024 * seed;
    // An alloc's result_bytes is 0 (its record's word 6 names its context: fslog_context.h).
    e.result_bytes = kind == EventKind::kAlloc ? 0 : 4096 * seed;
    e.merged_count = static_cast<uint8_t>(seed % 3);
  }
  return e;
}

inline bool SameEvent(const AllocatorEvent& a, const AllocatorEvent& b) {
  return a.kind == b.kind && a.pool == b.pool && a.flags == b.flags &&
         a.merged_count == b.merged_count && a.device == b.device && a.ptr == b.ptr &&
         a.bytes == b.bytes && a.requested_bytes == b.requested_bytes && a.stream == b.stream &&
         a.segment == b.segment && a.split_bytes == b.split_bytes &&
         a.result_bytes == b.result_bytes && a.device_free_bytes == b.device_free_bytes &&
         a.device_total_bytes == b.device_total_bytes && a.reserved_bytes == b.reserved_bytes &&
         a.allocated_bytes == b.allocated_bytes;
}

inline constexpr EventKind kAllocatorKinds[] = {
    EventKind::kAlloc,        EventKind::kFreeRequested, EventKind::kFreeCompleted,
    EventKind::kSegmentAlloc, EventKind::kSegmentFree,   EventKind::kSegmentMap,
    EventKind::kSegmentUnmap, EventKind::kOom,           EventKind::kEmptyCache,
};

inline LogRecord EncodedSample(EventKind kind, uint64_t seed) {
  LogRecord record;
  EncodeEvent(SampleEvent(kind, seed), 1'000'000'000 + seed, &record);
  return record;
}

// A free of `seed`'s block that completed at once, as the allocator emits it (free_requested,
// then free_completed) and as the writer stores it (one combined record: Note [Combined free
// records]). Device 3, the SampleHeader's.
struct CombinedFreeSample {
  AllocatorEvent requested;
  AllocatorEvent completed;
  LogRecord record;
};
inline CombinedFreeSample MakeCombinedFree(uint64_t seed, uint64_t timestamp_ns) {
  CombinedFreeSample free;
  free.requested = SampleEvent(EventKind::kFreeRequested, seed);
  free.requested.device = 3;
  free.requested.flags = kEventFlagOversize;
  free.requested.merged_count = 0;
  free.requested.split_bytes = free.requested.result_bytes = 0;
  free.completed = free.requested;
  free.completed.kind = EventKind::kFreeCompleted;
  free.completed.flags = kEventFlagResultIsSplit;
  free.completed.merged_count = 2;
  free.completed.split_bytes = 3 * 512 * (seed + 1);
  free.completed.result_bytes = 4 * 512 * (seed + 1);
  EncodeEvent(free.requested, timestamp_ns, &free.record);
  CombineFree(free.completed, &free.record);
  return free;
}

// Everything a reader yields for a log.
struct ReadResult {
  std::vector<LogEntry> entries;
  absl::Status status;  // the open or read error, if any
  std::vector<std::string> warnings;
  uint64_t torn_tail_bytes = 0;
  uint64_t missing_records = 0;
};

inline ReadResult ReadAll(absl::StatusOr<FslogReader> reader) {
  ReadResult result;
  if (!reader.ok()) {
    result.status = reader.status();
    return result;
  }
  LogEntry entry;
  for (;;) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    if (!more.ok()) {
      result.status = more.status();
      break;
    }
    if (!*more) break;
    result.entries.push_back(entry);
  }
  result.warnings = reader->warnings();
  result.torn_tail_bytes = reader->torn_tail_bytes();
  result.missing_records = reader->missing_records();
  return result;
}

inline ReadResult ReadFile(const std::string& path) { return ReadAll(FslogReader::Open(path)); }
inline ReadResult ReadBytes(std::string_view bytes) {
  return ReadAll(FslogReader::OpenBytes(bytes));
}

// Deletes the logs made by TempLogPath once all tests ran (in the test process only: child
// processes leave through _exit or exit, which skip it).
class TempLogCleanup : public ::testing::Environment {
 public:
  static std::vector<std::string>& Paths() {
    static std::vector<std::string> paths;
    return paths;
  }
  void TearDown() override {
    for (const std::string& path : Paths()) std::remove(path.c_str());
  }
};
inline ::testing::Environment* const kTempLogCleanup =
    ::testing::AddGlobalTestEnvironment(new TempLogCleanup);

// A fresh path in the test temp directory, deleted after the tests. Not thread-safe.
inline std::string TempLogPath(const std::string& name) {
  static int counter = 0;
  std::string path = ::testing::TempDir() + "/fragscope_" + name + "_" + std::to_string(getpid()) +
                     "_" + std::to_string(counter++) + ".fslog";
  TempLogCleanup::Paths().push_back(path);
  return path;
}

inline std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFileBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace fragscope::testing
