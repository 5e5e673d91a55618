// libFuzzer target for ParseAllocatorOptions / FormatAllocatorOptions.
//
// Contract checked on arbitrary bytes: parsing returns options or a kInvalidArgument error with
// a message (never a crash, a hang or a sanitizer report), and every accepted string round-trips:
// Parse(Format(o)) reproduces o apart from `source`, `warnings` and the keys `given` at their
// default value (Format leaves defaults out), and Format is a fixed point.
// Any violation prints the input and aborts.
//
// Build: cmake -DCMAKE_CXX_COMPILER=clang++ -DFRAGSCOPE_BUILD_FUZZERS=ON (see CMakeLists.txt).
// Run:   allocator_options_fuzz -dict=tests/fuzz/allocator_options.dict -max_total_time=60 \
//          NEW_CORPUS_DIR tests/fuzz/corpus/allocator_options
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator_options.h"

namespace {

[[noreturn]] void Fail(std::string_view what, std::string_view input, std::string_view detail) {
  std::fprintf(stderr, "allocator_options_fuzz: %.*s\n  input:  '%.*s'\n  detail: '%.*s'\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(input.size()),
               input.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fragscope::AllocatorOptions;
  const std::string_view conf(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<AllocatorOptions> options = fragscope::ParseAllocatorOptions(conf);
  if (!options.ok()) {
    const std::string message(options.status().message());
    if (options.status().code() != absl::StatusCode::kInvalidArgument || message.empty()) {
      Fail("error is not a described kInvalidArgument", conf, options.status().ToString());
    }
    return 0;
  }
  if (options->source != conf) Fail("source is not the input", conf, options->source);

  const std::string text = fragscope::FormatAllocatorOptions(*options);
  const absl::StatusOr<AllocatorOptions> again = fragscope::ParseAllocatorOptions(text);
  if (!again.ok()) Fail("formatted options do not parse", conf, again.status().ToString());
  AllocatorOptions expected = *options;
  expected.source = text;
  expected.warnings = again->warnings;
  if ((again->given & ~options->given).any()) {
    Fail("formatted options name a key the input did not", conf, text);
  }
  expected.given = again->given;
  if (!(*again == expected)) {
    Fail("round trip changed the options", conf,
         text + "' -> '" + fragscope::FormatAllocatorOptions(*again));
  }
  if (fragscope::FormatAllocatorOptions(*again) != text) Fail("format is not stable", conf, text);

  // Every size maps to a valid table entry.
  for (int shift = 0; shift < 64; ++shift) {
    const uint32_t divisions = fragscope::RoundupPower2DivisionsFor(*options, uint64_t{1} << shift);
    if (divisions != 0 && (divisions & (divisions - 1)) != 0) {
      Fail("divisions entry is not 0 or a power of 2", conf, text);
    }
  }
  return 0;
}
