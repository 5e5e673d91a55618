// The values of the flags the trace-reading commands share (analyze, verify, sweep, convert,
// summarize): their declarations (flag_parser.h parses them), byte sizes, counts and lists, and
// their application to AnalysisOptions; and the check that no output overwrites an input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "cli/flag_parser.h"
#include "cli/usage_error.h"

namespace fragscope::cli {

// "17179869184", "16GiB", "16G" (GiB), "80GB" (10^9), "512MiB", "512M", "1.5TiB".
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text, std::string_view flag);
absl::StatusOr<uint64_t> ParseCount(std::string_view text, std::string_view flag);
// Comma-separated lists; commas inside [...] do not split ("4,[64:8,>:1]" is two items).
std::vector<std::string> SplitList(std::string_view text);

// The flags every trace-reading command shares.
inline const std::vector<FlagSpec> kTraceFlags = {
    {"--capacity", "SIZE",
     "device capacity, 2 MiB to 4 TiB (default: the log header; snapshots: inferred at OOMs)"},
    {"--gpu", "NAME",
     "... or a GPU's: a100-40gb, a100-80gb, h100-80gb, h200, rtx-4090 (as `fragscope estimate "
     "--gpu`; for a predicted log)"},
    {"--memory-fraction", "F", "per-process memory fraction the job ran with (snapshots omit it)"},
    {"--allowed", "SIZE", "... or the cap in bytes (at least 2 MiB)"},
    {"--conf", "CONF",
     "replay under these PYTORCH_CUDA_ALLOC_CONF settings instead of the trace's (a cap the log "
     "records is kept unless CONF sets one); analyze names those of its settings the trace "
     "records otherwise (not in effect in the job). Without --conf, the settings fragscope's own "
     "environment gives (PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF, as PyTorch 2.11 reads "
     "them) are checked the same way"},
    {"--device", "N",
     "one device of a snapshot (default: each device with a trace, reported one after the "
     "other)"}};
// The most sweep threads --threads takes (the sweep uses at most one per configuration).
inline constexpr uint64_t kMaxThreads = 1024;
// The sweep grid flags.
inline const std::vector<FlagSpec> kSweepFlags = {
    {"--max-split-size-mb", "LIST",
     "sweep grid (default 0,64,128,256,512,1024; 0 = unlimited, PyTorch's default)"},
    {"--roundup-power2-divisions", "LIST",
     "e.g. 4,8 or \"[64:8,>:1]\" (each against leaving it unset)"},
    {"--gc-threshold", "LIST",
     "e.g. 0.6,0.8 (each against off; it needs a memory fraction: with no cap given, "
     "per_process_memory_fraction:0.999 is added)"},
    {"--expandable-segments", "LIST", "default: the trace's own and True; e.g. False,True"},
    {"--placement", "LIST",
     "e.g. best_fit,first_fit. first_fit (address-ordered, as RMM's arena) is a fragscope policy "
     "PyTorch lacks: shown, never recommended"},
    {"--threads", "N", "replays at once, and traces summarized at once (default: one per core)"}};

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

}  // namespace fragscope::cli
