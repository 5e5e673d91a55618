// The roundup_power2_divisions table: parsing its value the way PyTorch does, and writing the
// shortest value that parses back to a given table.
//
// Parsing (PyTorch's AcceleratorAllocatorConfig::parseRoundUpPower2Divisions, newest; see
// docs/pytorch_allocator_rules.md §1):
//   - A single value N ("roundup_power2_divisions:4") fills every interval. N must be a power
//     of 2; 0 is rejected here although the list form accepts it.
//   - A list "[64:8,256:4,>:1]": each key is a power of 2 in MB and names interval
//     clamp(log2(key), 0, 15); each value is 0 or a power of 2. The first numeric key also
//     fills every interval below its own; ">" fills from the interval after the last numeric
//     key listed so far (from interval 1 when none was) to the end; others stay as they were.
//   - A second roundup_power2_divisions entry in the same string is applied on top of the first
//     (PyTorch resets the table once per parse, not per entry).
// fragscope limit: a division must be <= 2^31 (the table holds uint32_t). PyTorch accepts any
// power of 2, but a division d only changes rounding of blocks larger than 512 * d bytes.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "allocator/alloc_conf_syntax.h"
#include "allocator/types.h"

namespace fragscope {

using RoundupPower2Table = std::array<uint32_t, kRoundupPower2Intervals>;

// Applies the value of one roundup_power2_divisions entry to `table`. On error `table` may be
// partly updated.
absl::Status ApplyRoundupPower2Divisions(const alloc_conf::Entry& entry, RoundupPower2Table& table);

// The canonical value text for `table` ("" when every interval is 0, "4" when all are 4, else a
// list). REQUIRES: every entry is 0 or a power of 2.
std::string FormatRoundupPower2Divisions(const RoundupPower2Table& table);

}  // namespace fragscope
