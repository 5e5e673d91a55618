#include "cli/cli_flags.h"

#include <cmath>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "allocator/simulated_backend.h"
#include "allocator/types.h"
#include "analysis/explain/sweep.h"
#include "cli/json_output.h"
#include "estimator/gpu_presets.h"
#include "fslog/fslog_format.h"

namespace fragscope::cli {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text, std::string_view flag) {
  size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  double number = 0;
  std::string unit = absl::AsciiStrToLower(std::string(text.substr(end)));
  if (end == 0 || !absl::SimpleAtod(std::string(text.substr(0, end)), &number) || number < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s expects a size such as 16GiB, 80GB or 17179869184, got '%s'", flag, text));
  }
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kib") scale = 1024.0;
  if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  if (unit == "kb") scale = 1e3;
  if (unit == "mb") scale = 1e6;
  if (unit == "gb") scale = 1e9;
  if (unit == "tb") scale = 1e12;
  if (scale == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: unknown unit '%s' in '%s' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", flag,
        text.substr(end), text));
  }
  return static_cast<uint64_t>(std::llround(number * scale));
}

absl::StatusOr<uint64_t> ParseCount(std::string_view text, std::string_view flag) {
  uint64_t n = 0;
  if (!absl::SimpleAtoi(std::string(text), &n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s expects a non-negative integer, got '%s'", flag, text));
  }
  return n;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  out.push_back(item);
  return out;
}

absl::Status ApplyAnalysisFlags(const ParsedFlags& flags, AnalysisOptions* options) {
  if (const std::string* v = flags.Get("--gpu")) {
    if (flags.Has("--capacity")) {
      return absl::InvalidArgumentError("--gpu and --capacity both set the capacity: give one");
    }
    absl::StatusOr<estimator::GpuSpec> gpu = estimator::FindGpuPreset(*v);
    if (!gpu.ok())
      return absl::InvalidArgumentError(absl::StrCat("--gpu: ", gpu.status().message()));
    options->capacity_bytes = static_cast<uint64_t>(gpu->memory_bytes);
    options->capacity_flag = absl::StrCat("--gpu ", gpu->name);
  }
  if (const std::string* v = flags.Get("--capacity")) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(*v, "--capacity");
    if (!bytes.ok()) return bytes.status();
    if (*bytes < kSmallBufferBytes) {
      return absl::InvalidArgumentError("--capacity must be at least 2MiB");
    }
    if (*bytes > SimulatedBackend::kMaxCapacityBytes) {
      return absl::InvalidArgumentError("--capacity must be at most 4TiB (the simulated device's)");
    }
    options->capacity_bytes = *bytes;
  }
  if (const std::string* v = flags.Get("--memory-fraction")) {
    double f = 0;
    if (!absl::SimpleAtod(*v, &f) || !(f > 0 && f <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--memory-fraction expects a number in (0, 1], got '%s'", *v));
    }
    options->memory_fraction = f;
  }
  if (flags.Has("--memory-fraction") && flags.Has("--allowed")) {
    return absl::InvalidArgumentError(
        "--memory-fraction and --allowed both set the cap: give one of them");
  }
  if (const std::string* v = flags.Get("--allowed")) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(*v, "--allowed");
    if (!bytes.ok()) return bytes.status();
    // A smaller cap refuses every allocation (no segment fits under it).
    if (*bytes < kSmallBufferBytes) {
      return absl::InvalidArgumentError("--allowed must be at least 2MiB (the smallest segment)");
    }
    options->allowed_bytes = *bytes;
  }
  if (const std::string* v = flags.Get("--conf")) {
    // Parsed once, here; checked with the caps below (CheckConfOption).
    absl::StatusOr<AllocatorOptions> conf = ParseAllocatorOptions(*v);
    if (!conf.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--conf '%s': %s", *v, conf.status().message()));
    }
    options->conf = *std::move(conf);
  }
  options->env_settings = AskedSettingsFromEnv(ProcessEnv);
  if (const std::string* v = flags.Get("--device")) {
    absl::StatusOr<uint64_t> n = ParseCount(*v, "--device");
    if (!n.ok()) return n.status();
    if (*n > kMaxDeviceIndex) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--device %s: not a CUDA device ordinal (0 to %d)", *v, kMaxDeviceIndex));
    }
    options->device = static_cast<int>(*n);
  }
  if (const std::string* v = flags.Get("--threads")) {
    absl::StatusOr<uint64_t> n = ParseCount(*v, "--threads");
    if (!n.ok()) return n.status();
    if (*n == 0 || *n > kMaxThreads) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--threads %s: expected 1 to %d (leave it out for one per core)", *v, kMaxThreads));
    }
    options->threads = static_cast<int>(*n);
  }
  if (const std::string* v = flags.Get("--max-split-size-mb")) {
    options->sweep.max_split_size_mb.clear();
    for (const std::string& item : SplitList(*v)) {
      absl::StatusOr<uint64_t> n = ParseCount(item, "--max-split-size-mb");
      if (!n.ok()) return n.status();
      // (Larger values have no byte count in 64 bits; UINT64_MAX also means "not swept".)
      if (*n > (UINT64_MAX >> 20)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--max-split-size-mb %s: too large (at most %d, whose bytes fit in 64 bits)", item,
            UINT64_MAX >> 20));
      }
      options->sweep.max_split_size_mb.push_back(*n);
    }
  }
  if (const std::string* v = flags.Get("--roundup-power2-divisions")) {
    options->sweep.roundup_power2_divisions = SplitList(*v);
  }
  if (const std::string* v = flags.Get("--expandable-segments")) {
    options->sweep.expandable_segments.clear();
    for (const std::string& item : SplitList(*v)) {
      const std::string lower = absl::AsciiStrToLower(item);
      if (lower != "true" && lower != "false") {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--expandable-segments expects True or False (a list: True,False), got '%s'", item));
      }
      options->sweep.expandable_segments.push_back(lower == "true" ? "True" : "False");
    }
  }
  if (const std::string* v = flags.Get("--placement")) {
    options->sweep.placements = SplitList(*v);  // names are checked with the configurations
  }
  if (const std::string* v = flags.Get("--gc-threshold")) {
    options->sweep.garbage_collection_thresholds.clear();
    for (const std::string& item : SplitList(*v)) {
      double t = 0;
      if (!absl::SimpleAtod(item, &t) || !(t >= 0 && t < 1)) {  // (rejects nan)
        return absl::InvalidArgumentError(
            absl::StrFormat("--gc-threshold expects numbers in [0, 1) (0 = off), got '%s'", item));
      }
      options->sweep.garbage_collection_thresholds.push_back(t);
    }
  }
  options->sweep.capped =
      options->allowed_bytes.has_value() || options->memory_fraction.has_value();
  // Checked here, before any trace is read, so that a typo is a usage error at once rather than a
  // failed analysis after the trace was opened.
  if (absl::Status s = CheckConfOption(*options); !s.ok()) return s;
  // The grid's values are checked here, before any trace is read (a usage error): every value is
  // valid or not whatever the trace's own settings are.
  if (absl::StatusOr<std::vector<SweepConfig>> configs =
          BuildSweepConfigs(AllocatorOptions(), options->sweep);
      !configs.ok()) {
    return configs.status();
  }
  return absl::OkStatus();
}

namespace {

bool SameFile(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec)) return true;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) return false;
  // Not both there yet: compare where they would be. (weakly_canonical leaves a relative path
  // to a missing file relative: make it absolute first.)
  const auto where = [&ec](const std::string& p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec)
        .lexically_normal();
  };
  const std::filesystem::path ca = where(a);
  if (ec) return a == b;
  const std::filesystem::path cb = where(b);
  return ec ? a == b : ca == cb;
}

}  // namespace

absl::Status CheckOutputPaths(const std::vector<std::string>& inputs,
                              const std::vector<OutputPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputPath& out = outputs[i];
    for (const std::string& in : inputs) {
      if (SameFile(out.path, in)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s '%s' is an input trace; write it to another path", out.flag, out.path));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (SameFile(out.path, outputs[j].path)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s and %s both name '%s'; give each output its own path",
                            outputs[j].flag, out.flag, out.path));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOutputsAreNotInputs(const ParsedFlags& flags,
                                      std::initializer_list<std::string_view> output_flags) {
  std::vector<OutputPath> outputs;
  for (std::string_view flag : output_flags) {
    const std::string* path = flags.Get(flag);
    // `--json -` is standard output (json_output.h), no file.
    if (path != nullptr && !(flag == "--json" && *path == kStdoutPath)) {
      outputs.push_back({flag, *path});
    }
  }
  return CheckOutputPaths(flags.positional, outputs);
}

}  // namespace fragscope::cli
