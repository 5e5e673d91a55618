// Parser for the CSV log of RMM's logging_resource_adaptor.
//
// The format, from rmm's src/mr/detail/logging_resource_adaptor_impl.cpp and detail/format.hpp:
//
//   Thread,Time,Action,Pointer,Size,Stream          <- header, exactly this line
//   2342727,15:47:02.841961,allocate,0x10012400000,1048576,0
//   2342727,15:47:02.841977,free,0x10012400000,1048576,0
//   2342727,15:47:03.000102,allocate failure,(nil),85899345920,0x5581c1a0
//
// Thread is the OS thread id (spdlog %t, decimal). Time is wall-clock time of day
// HH:MM:SS.ffffff (spdlog %H:%M:%S.%f; no date). Action is "allocate" (logged after the upstream
// allocation succeeded), "free" (logged before the upstream deallocation) or "allocate failure"
// (logged when the upstream threw; the pointer is null). Pointer is printf %p: "0x..." hex, or
// "(nil)" for null ("0x0" from older fmt-based versions). Size is the requested byte count
// (%zu). Stream is the cudaStream_t printed with std::hex: "0" for the legacy default stream,
// otherwise "0x..." (older versions: bare hex digits).
//
// Errors name the line and the column: "rmm csv: line 7, column 4 (Pointer): expected a hex
// pointer or (nil), got 'zz'". A process that dies mid-write leaves a torn last line without a
// newline; by default it is dropped and reported in RmmLog::dropped_tail_bytes rather than
// failing the whole log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fragscope {

enum class RmmAction : uint8_t {
  kAllocate,         // "allocate"
  kFree,             // "free"
  kAllocateFailure,  // "allocate failure"
};

std::string_view RmmActionName(RmmAction action);

struct RmmLogEntry {
  uint64_t thread_id = 0;
  int64_t time_of_day_us = 0;  // microseconds since midnight, as logged
  // time_of_day_us plus 24 h for each midnight passed since the first row: the time went back by
  // more than 12 h from the previous row. Monotonic for a log that spans less than a day per row.
  int64_t timestamp_us = 0;
  RmmAction action = RmmAction::kAllocate;
  uint64_t pointer = 0;  // 0 for "(nil)"
  uint64_t size_bytes = 0;
  uint64_t stream = 0;  // cudaStream_t value; 0 = legacy default stream
  size_t line = 0;      // 1-based line in the file (the header is line 1)
};

struct RmmLog {
  std::vector<RmmLogEntry> entries;  // file order
  // Bytes of an unterminated last line that did not parse (a torn write); 0 when none.
  size_t dropped_tail_bytes = 0;
};

struct RmmCsvOptions {
  // Drop an unterminated last line that does not parse instead of failing.
  bool allow_torn_tail = true;
  // Longest line accepted; real rows are under 100 bytes.
  size_t max_line_bytes = 4096;
  size_t max_input_bytes = size_t{64} << 30;
};

absl::StatusOr<RmmLog> ParseRmmCsv(std::string_view text, const RmmCsvOptions& options = {});

// Reads and parses the file; errors name the path.
absl::StatusOr<RmmLog> ReadRmmCsvFile(const std::string& path, const RmmCsvOptions& options = {});

}  // namespace fragscope
