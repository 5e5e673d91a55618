// Flag parsing shared by the analyzer's commands (analyze, verify, sweep, convert, demo):
// "--flag VALUE" or "--flag=VALUE", positional arguments, and errors that name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "analysis/cli/usage_error.h"

namespace fragscope::cli {

struct FlagSpec {
  std::string_view name;  // with the dashes: "--capacity"
  bool takes_value = true;
};

struct ParsedFlags {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // flag -> value ("" for switches)
  bool Has(std::string_view flag) const { return values.count(std::string(flag)) > 0; }
  const std::string* Get(std::string_view flag) const {
    auto it = values.find(std::string(flag));
    return it == values.end() ? nullptr : &it->second;
  }
};

// Errors: an unknown flag, a missing value, a flag given twice. "--help"/"-h" is always accepted as
// a switch.
absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       const std::vector<FlagSpec>& specs);

// "17179869184", "16GiB", "16G" (GiB), "80GB" (10^9), "512MiB", "512M", "1.5TiB".
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text, std::string_view flag);
absl::StatusOr<uint64_t> ParseCount(std::string_view text, std::string_view flag);
// Comma-separated lists; commas inside [...] do not split ("4,[64:8,>:1]" is two items).
std::vector<std::string> SplitList(std::string_view text);

// The flags every trace-reading command shares.
inline const std::vector<FlagSpec> kTraceFlags = {{"--capacity"}, {"--gpu"},  {"--memory-fraction"},
                                                  {"--allowed"},  {"--conf"}, {"--device"}};
// The most sweep threads --threads takes (the sweep uses at most one per configuration).
inline constexpr uint64_t kMaxThreads = 1024;
// The sweep grid flags.
inline const std::vector<FlagSpec> kSweepFlags = {
    {"--max-split-size-mb"}, {"--roundup-power2-divisions"},
    {"--gc-threshold"},      {"--expandable-segments"},
    {"--placement"},         {"--threads"}};

// Applies kTraceFlags and kSweepFlags found in `flags`, checking every value (a --conf string
// included) before any trace is opened: an error here is a usage error.
absl::Status ApplyAnalysisFlags(const ParsedFlags& flags, AnalysisOptions* options);

// An output file and the flag that named it.
struct OutputPath {
  std::string_view flag;
  std::string path;
};
// An error naming the flag when an output names the same file as one of `inputs` (a report must
// never overwrite a trace) or as another output (one would overwrite the other). Paths are
// compared as files: "./r.json", "r.json" and a link to it are the same.
absl::Status CheckOutputPaths(const std::vector<std::string>& inputs,
                              const std::vector<OutputPath>& outputs);
// CheckOutputPaths of the `output_flags` (e.g. --json, --html) given in `flags` against its
// positional arguments.
absl::Status CheckOutputsAreNotInputs(const ParsedFlags& flags,
                                      std::initializer_list<std::string_view> output_flags);

// Concatenation helper for spec lists.
std::vector<FlagSpec> Flags(std::initializer_list<std::vector<FlagSpec>> lists);

}  // namespace fragscope::cli
