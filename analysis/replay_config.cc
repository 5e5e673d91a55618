// What a replay of `analyze` runs under: the device's capacity, the settings (the trace's or
// --conf's), the cap (recorded, in --conf, or given with --memory-fraction/--allowed), and the
// empty_cache() calls of a trace that does not record them.
#include "analysis/analyzer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/allocator_options.h"
#include "allocator/format_size.h"
#include "allocator/memory_fraction.h"
#include "analysis/replay/replay.h"
#include "analysis/sources/excerpt.h"
#include "analysis/sources/open_trace.h"

namespace fragscope {
namespace {

constexpr uint64_t kUnknownCapacityBytes = uint64_t{1} << 40;  // 1 TiB

}  // namespace

uint64_t ResolveCapacity(const TraceInfo& info, const AnalysisOptions& options,
                         std::string* source) {
  if (options.capacity_bytes.has_value()) {
    *source = options.capacity_flag;
    return *options.capacity_bytes;
  }
  if (info.capacity_bytes > 0) {
    *source = info.capacity_source.empty() ? "trace" : info.capacity_source;
    return info.capacity_bytes;
  }
  *source = "not recorded in the trace: assumed 1 TiB (pass --capacity for OOM counterfactuals)";
  return kUnknownCapacityBytes;
}

AllocatorOptions TraceOwnOptions(const TraceInfo& info) {
  AllocatorOptions options = info.settings.ok() ? *info.settings : AllocatorOptions();
  if (info.expandable_segments) options.expandable_segments = true;
  return options;
}

namespace {

// Whether --conf names per_process_memory_fraction (any value, 1.0 included).
bool ConfSetsFraction(const AnalysisOptions& options) {
  return options.conf.has_value() && options.conf->Given(AllocatorKey::kPerProcessMemoryFraction);
}

// Settings that name another backend than the native allocator are not replayed: its pools
// are the driver's (cudaMallocAsync), and the native allocator's figures under that name would
// be of an allocator the job did not use. `settings` came from --conf or the trace (`path`'s,
// named when they are its own), written as `text`.
absl::Status NativeBackendOnly(const AllocatorOptions& settings, const std::string& text,
                               bool from_conf, const std::string& path = "") {
  if (settings.backend == "native") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s '%s': backend:%s is not simulated (fragscope replays PyTorch's native caching "
      "allocator)%s",
      from_conf ? std::string("--conf") : absl::StrCat(path, ": the trace's allocator settings"),
      Excerpt(text), settings.backend,
      from_conf ? ""
                : "; give --conf with native settings (e.g. --conf '') to see what the native "
                  "allocator would do with these requests"));
}

// A cap set both in --conf and with --memory-fraction/--allowed: which one is meant?
absl::Status OneCap(const AnalysisOptions& options) {
  if (CapFromFlags(options) && ConfSetsFraction(options)) {
    return absl::InvalidArgumentError(
        "--conf sets per_process_memory_fraction and --memory-fraction/--allowed give a cap too: "
        "give the cap once");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckConfOption(const AnalysisOptions& options) {
  if (!options.conf.has_value()) return absl::OkStatus();
  // As --memory-fraction: a cap of 0 bytes can serve nothing.
  if (options.conf->per_process_memory_fraction <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--conf '%s': per_process_memory_fraction:0 caps the device at 0 bytes; expected a "
        "fraction in (0, 1]",
        options.conf->source));
  }
  if (absl::Status s = NativeBackendOnly(*options.conf, options.conf->source, true); !s.ok()) {
    return s;
  }
  return OneCap(options);
}

std::optional<uint64_t> RecordedJobCapReplaced(const TraceInfo& info,
                                               const AnalysisOptions& options,
                                               uint64_t capacity_bytes) {
  if (!options.conf.has_value() && !CapFromFlags(options)) return std::nullopt;
  const double recorded = TraceOwnOptions(info).per_process_memory_fraction;
  if (recorded >= 1.0) return std::nullopt;
  return AllowedBytesForFraction(recorded, capacity_bytes);
}

std::shared_ptr<const std::vector<uint64_t>> TraceEmptyCacheCalls(const TraceOpener& opener,
                                                                  const TraceInfo& info,
                                                                  const AnalysisOptions& options) {
  if (info.records_empty_cache) return nullptr;
  AnalysisOptions own_options = options;
  own_options.conf.reset();
  absl::StatusOr<ReplayConfig> own = MakeReplayConfig(info, own_options);
  if (!own.ok()) return nullptr;
  // A cap --conf sets is the cap the user says the job had (the settings it replaces are not).
  if (ConfSetsFraction(options) && !own->allowed_bytes.has_value()) {
    own->options.per_process_memory_fraction = options.conf->per_process_memory_fraction;
  }
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener.Open();
  if (!source.ok()) return nullptr;
  Replayer replayer(**source, *own);
  if (!replayer.Init().ok() || !replayer.Run(nullptr).ok()) return nullptr;
  return std::make_shared<const std::vector<uint64_t>>(replayer.inferred_empty_cache_at());
}

absl::StatusOr<ReplayConfig> MakeReplayConfig(const TraceInfo& info,
                                              const AnalysisOptions& options) {
  ReplayConfig config;
  std::string source;
  config.capacity_bytes = ResolveCapacity(info, options, &source);
  if (!options.conf.has_value() && !info.settings.ok()) {
    // The trace's settings are the file's: name it, and quote an excerpt (a damaged header's
    // text can be long and binary).
    return absl::InvalidArgumentError(absl::StrFormat("%s: the trace's allocator settings '%s': %s",
                                                      info.path, Excerpt(info.allocator_options),
                                                      Excerpt(info.settings.status().message())));
  }
  const AllocatorOptions& settings = options.conf.has_value() ? *options.conf : *info.settings;
  const std::string& text =
      options.conf.has_value() ? options.conf->source : info.allocator_options;
  if (absl::Status s = NativeBackendOnly(settings, text, options.conf.has_value(), info.path);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = OneCap(options); !s.ok()) return s;
  config.options = settings;
  if (options.conf.has_value()) {
    // The job's cap is not among the settings --conf replaces (PyTorch sets it apart, with
    // set_per_process_memory_fraction): a fraction the trace records stays, unless --conf sets
    // its own.
    const double recorded = TraceOwnOptions(info).per_process_memory_fraction;
    if (recorded < 1.0 && !ConfSetsFraction(options)) {
      config.options.per_process_memory_fraction = recorded;
    }
  }
  config.follow_options_changes = !options.conf.has_value();
  // Other settings make other segments: the trace's addresses would collide with them.
  config.script_addresses = !options.conf.has_value();
  if (options.allowed_bytes.has_value() || options.memory_fraction.has_value()) {
    // The cap given replaces a fraction in the settings: the configurations tested (and
    // recommended) must not name another cap than the one replayed.
    config.options.per_process_memory_fraction = 1.0;
  }
  if (options.allowed_bytes.has_value()) {
    if (*options.allowed_bytes > config.capacity_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--allowed %s is more than the %s device (%s): it would cap nothing",
          FormatSize(*options.allowed_bytes), FormatSize(config.capacity_bytes), source));
    }
    config.allowed_bytes = options.allowed_bytes;
  } else if (options.memory_fraction.has_value()) {
    // PyTorch's cap for the fraction (Note [The memory fraction's bytes]).
    config.allowed_bytes = AllowedBytesForFraction(*options.memory_fraction, config.capacity_bytes);
    if (*config.allowed_bytes < kSmallBufferBytes) {  // as --allowed (cli_flags.cc)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--memory-fraction %g caps the %s device at %s, below the smallest segment (2 MiB)",
          *options.memory_fraction, FormatSize(config.capacity_bytes),
          FormatSize(*config.allowed_bytes)));
    }
  }
  return config;
}

}  // namespace fragscope
