// Helpers shared by the ParseAllocatorOptions / FormatAllocatorOptions tests
// (tests/allocator/allocator_options_*test.cc). Failures are reported through GoogleTest, so these
// are called from inside a TEST.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator_options.h"
#include "allocator/types.h"
#include "gtest/gtest.h"

namespace fragscope::testing {

// PyTorch's option names say "mb" and mean MiB.
inline constexpr uint64_t kMB = kMiB;

// The options `conf` parses to; a failed parse fails the test and gives the defaults.
inline AllocatorOptions ParseOk(std::string_view conf) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  EXPECT_TRUE(options.ok()) << "'" << conf << "': " << options.status();
  return options.ok() ? *std::move(options) : AllocatorOptions{};
}

// The error message of a parse that must fail with kInvalidArgument ("" if it succeeded).
inline std::string ParseError(std::string_view conf) {
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  EXPECT_FALSE(options.ok()) << "'" << conf << "' was accepted";
  if (options.ok()) return "";
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << options.status();
  return std::string(options.status().message());
}

// roundup_power2_divisions in effect for an allocation of `mb` MiB.
inline uint32_t DivisionsAtMB(const AllocatorOptions& options, uint64_t mb) {
  return RoundupPower2DivisionsFor(options, mb * kMB);
}

// Parse(Format(o)) must give back o, apart from the source string, the warnings and the keys
// named.
inline void ExpectRoundTrip(const AllocatorOptions& options) {
  const std::string text = FormatAllocatorOptions(options);
  absl::StatusOr<AllocatorOptions> parsed = ParseAllocatorOptions(text);
  ASSERT_TRUE(parsed.ok()) << "'" << text << "': " << parsed.status();
  AllocatorOptions expected = options;
  expected.source = text;
  expected.warnings = parsed->warnings;
  expected.given = parsed->given;
  EXPECT_TRUE(*parsed == expected)
      << "'" << text << "' parses to '" << FormatAllocatorOptions(*parsed) << "'";
  EXPECT_EQ(FormatAllocatorOptions(*parsed), text);
}

}  // namespace fragscope::testing
