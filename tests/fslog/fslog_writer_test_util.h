// Helpers shared by the FslogWriter tests (fslog_writer_test.cc, the crash tests in
// fslog_writer_crash_test.cc).
#pragma once

#include <cstdint>

#include "allocator/types.h"
#include "fslog/fslog_reader.h"
#include "fslog/fslog_writer.h"

namespace fragscope::testing {

// The header information every writer test opens its log with.
inline FslogHeaderInfo WriterTestInfo() {
  FslogHeaderInfo info;
  info.device_name = "Simulated H100";
  info.device_total_bytes = 80 * kGiB;
  info.device_index = 1;
  info.allocator_options = "max_split_size_mb:256";
  return info;
}

// Events are told apart by ptr: SampleEvent(kAlloc, id).ptr.
inline uint64_t IdOf(const LogEntry& entry) {
  return (entry.event().ptr - 0x7f0000000000) / 0x1000;
}

}  // namespace fragscope::testing
