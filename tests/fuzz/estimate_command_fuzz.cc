// libFuzzer target for `fragscope estimate` (cli/estimate_command.h): its flag parser,
// the configurations it builds, the estimator, the inverse searches (--solve) and the text, JSON
// and --explain renderers. The input is the argument list, one argument per line.
//
// Properties checked on every input: nothing crashes, hangs or trips a sanitizer; the command
// exits 0 (a report on stdout) or 2 (one error on stderr), never anything else, and an accepted
// estimate prints no "nan" or "inf". Inputs that would touch the disk are skipped (--model-json,
// and --json with a path: only "-", stdout, is fuzzed).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "allocator/check.h"
#include "cli/estimate_command.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = absl::StrSplit(input, '\n');
  if (args.size() > 40) return 0;
  for (size_t i = 0; i < args.size(); ++i) {
    // Files are the JSON fuzzer's business (model_spec_json_fuzz): do not read the disk here.
    if (absl::StrContains(args[i], "model-json")) return 0;
    // Nor write it: --json only to stdout ("-").
    if (absl::StartsWith(args[i], "--json=") && args[i] != "--json=-") return 0;
    if (args[i] == "--json" && i + 1 < args.size() && args[i + 1] != "-") return 0;
  }
  std::ostringstream out;
  std::ostringstream err;
  const int rc = fragscope::cli::RunEstimateCommand(args, out, err);
  FRAGSCOPE_CHECK(rc == 0 || rc == 2);
  if (rc == 2) {
    FRAGSCOPE_CHECK(!err.str().empty());
  } else {
    const std::string report = out.str();
    FRAGSCOPE_CHECK(!absl::StrContains(report, "nan") && !absl::StrContains(report, "inf ") &&
                    !absl::StrContains(report, "inf\n"));
  }
  return 0;
}
