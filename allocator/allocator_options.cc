// ParseAllocatorOptions / FormatAllocatorOptions: one table of named options (kOptions below,
// like mimalloc's options[]) drives both directions.
//
// Parsing follows PyTorch 2.11's AcceleratorAllocatorConfig::parseArgs (generic keys) and
// CUDAAllocatorConfig::parseArgs (CUDA keys), run on one string:
//   1. large_segment_size_mb is applied first wherever it appears, because the limits of
//      max_split_size_mb and max_non_split_rounding_mb depend on it; then
//      max_non_split_rounding defaults to the (possibly changed) large segment size.
//   2. Every other entry is applied in order; a repeated key overrides the earlier value
//      (roundup_power2_divisions lists are applied on top of each other, as in PyTorch).
//   3. An unknown key fails with 2.11's CUDA-parser text, what a job whose environment names it
//      gets: "Unrecognized key 'foo' in CUDA allocator config.".
// SetAllocatorOption edits one key through the same table (the sweep's grid).
// Sizes given in MB are clamped to SIZE_MAX / 1 MiB before the multiplication into bytes, as
// PyTorch does, so they never overflow; a number that does not fit in 64 bits is an error.
#include "allocator/allocator_options.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/alloc_conf_syntax.h"
#include "allocator/check.h"
#include "allocator/roundup_power2_divisions.h"

namespace fragscope {
namespace {

using alloc_conf::Entry;
using alloc_conf::FormatDouble;
using alloc_conf::SingleValue;
using alloc_conf::Token;
using alloc_conf::ValueError;

// Largest MB count whose byte size fits in 64 bits (PyTorch's max_allowed_*_size_mb).
constexpr uint64_t kMaxMegabytes = std::numeric_limits<uint64_t>::max() / kMiB;
// PyTorch's CUDAAllocatorConfig::pinned_max_register_threads().
constexpr uint64_t kMaxPinnedRegisterThreads = 128;

// `placement` values; adding a policy is one line here.
struct PlacementName {
  std::string_view name;
  PlacementPolicy policy;
};
constexpr PlacementName kPlacementNames[] = {
    {"best_fit", PlacementPolicy::kBestFit},
    {"first_fit", PlacementPolicy::kFirstFit},
};

// --- Per-key parse and format functions -------------------------------------------------------
// A parse function applies one entry to the options; a format function returns the value text
// for the options, or "" when the option has its default (then the key is left out).

enum class Bound : uint8_t { kInclusive, kExclusive };

// Reads the MB count of a size key, which must be >= min_mb (kInclusive) or > min_mb, clamped
// to kMaxMegabytes.
absl::StatusOr<uint64_t> ReadMegabytes(const Entry& entry, uint64_t min_mb, Bound bound) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t mb, alloc_conf::ToUint64(entry, *value));
  const bool strict = bound == Bound::kExclusive;
  if (strict ? mb <= min_mb : mb < min_mb) {
    return ValueError(entry, value->text,
                      absl::StrCat("is too small, must be ", strict ? "> " : ">= ", min_mb));
  }
  return std::min(mb, kMaxMegabytes);
}

absl::Status ParseLargeSegmentSize(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t mb,
                             ReadMegabytes(entry, kMinLargeAllocBytes / kMiB, Bound::kExclusive));
  options.large_segment_size_bytes = mb * kMiB;
  return absl::OkStatus();
}

absl::Status ParseMaxSplitSize(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(
      const uint64_t mb,
      ReadMegabytes(entry, options.large_segment_size_bytes / kMiB, Bound::kInclusive));
  options.max_split_size_bytes = mb * kMiB;
  return absl::OkStatus();
}

absl::Status ParseMaxNonSplitRounding(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(
      const uint64_t mb,
      ReadMegabytes(entry, options.large_segment_size_bytes / kMiB, Bound::kInclusive));
  options.max_non_split_rounding_bytes = mb * kMiB;
  return absl::OkStatus();
}

std::string FormatLargeSegmentSize(const AllocatorOptions& options) {
  if (options.large_segment_size_bytes == kDefaultLargeSegmentBytes) return "";
  return absl::StrCat(options.large_segment_size_bytes / kMiB);
}

std::string FormatMaxSplitSize(const AllocatorOptions& options) {
  if (!options.max_split_size_set()) return "";
  return absl::StrCat(options.max_split_size_bytes / kMiB);
}

std::string FormatMaxNonSplitRounding(const AllocatorOptions& options) {
  if (options.max_non_split_rounding_bytes == options.large_segment_size_bytes) return "";
  return absl::StrCat(options.max_non_split_rounding_bytes / kMiB);
}

// A double key whose valid range is described by `range`, e.g. "(0.0, 1.0)".
template <double AllocatorOptions::*kField, bool (*kInRange)(double)>
absl::Status ParseFraction(const Entry& entry, AllocatorOptions& options, std::string_view range) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  FRAGSCOPE_ASSIGN_OR_RETURN(const double fraction, alloc_conf::ToFiniteDouble(entry, *value));
  if (!kInRange(fraction)) {
    return ValueError(entry, value->text,
                      absl::StrCat("is invalid, set it in ", alloc_conf::ToAbsl(range)));
  }
  options.*kField = fraction;
  return absl::OkStatus();
}

bool InOpenUnitInterval(double x) { return x > 0.0 && x < 1.0; }
bool InClosedUnitInterval(double x) { return x >= 0.0 && x <= 1.0; }

absl::Status ParseGarbageCollectionThreshold(const Entry& entry, AllocatorOptions& options) {
  return ParseFraction<&AllocatorOptions::garbage_collection_threshold, InOpenUnitInterval>(
      entry, options, "(0.0, 1.0)");
}

absl::Status ParsePerProcessMemoryFraction(const Entry& entry, AllocatorOptions& options) {
  return ParseFraction<&AllocatorOptions::per_process_memory_fraction, InClosedUnitInterval>(
      entry, options, "[0.0, 1.0]");
}

std::string FormatGarbageCollectionThreshold(const AllocatorOptions& options) {
  const double threshold = options.garbage_collection_threshold;
  return threshold == 0.0 ? "" : FormatDouble(threshold);
}

std::string FormatPerProcessMemoryFraction(const AllocatorOptions& options) {
  const double fraction = options.per_process_memory_fraction;
  return fraction == 1.0 ? "" : FormatDouble(fraction);
}

absl::Status ParseRoundupOption(const Entry& entry, AllocatorOptions& options) {
  return ApplyRoundupPower2Divisions(entry, options.roundup_power2_divisions);
}

std::string FormatRoundupOption(const AllocatorOptions& options) {
  return FormatRoundupPower2Divisions(options.roundup_power2_divisions);
}

// Every boolean key defaults to False.
template <bool AllocatorOptions::*kField>
absl::Status ParseBool(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  FRAGSCOPE_ASSIGN_OR_RETURN(options.*kField, alloc_conf::ToBool(entry, *value));
  return absl::OkStatus();
}

template <bool AllocatorOptions::*kField>
std::string FormatBool(const AllocatorOptions& options) {
  return options.*kField ? "True" : "";
}

// PyTorch (non-ROCm) accepts native and cudaMallocAsync. Its check that a runtime value matches
// the backend chosen at load time has no counterpart here.
absl::Status ParseBackend(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  if (value->text != "native" && value->text != "cudaMallocAsync") {
    return ValueError(entry, value->text,
                      "is not a known allocator backend, options are native and cudaMallocAsync");
  }
  options.backend = value->text;
  return absl::OkStatus();
}

std::string FormatBackend(const AllocatorOptions& options) {
  return options.backend == "native" ? "" : options.backend;
}

absl::Status ParsePinnedNumRegisterThreads(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t threads, alloc_conf::ToUint64(entry, *value));
  if (!std::has_single_bit(threads)) return ValueError(entry, value->text, "is not a power of 2");
  if (threads > kMaxPinnedRegisterThreads) {
    return ValueError(entry, value->text,
                      absl::StrCat("is too large, must be <= ", kMaxPinnedRegisterThreads));
  }
  options.pinned_num_register_threads = static_cast<uint32_t>(threads);
  return absl::OkStatus();
}

std::string FormatPinnedNumRegisterThreads(const AllocatorOptions& options) {
  const uint32_t threads = options.pinned_num_register_threads;
  return threads == 1 ? "" : absl::StrCat(threads);
}

absl::Status ParsePinnedReserveSegmentSize(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  FRAGSCOPE_ASSIGN_OR_RETURN(const uint64_t mb, alloc_conf::ToUint64(entry, *value));
  if (mb == 0) return ValueError(entry, value->text, "is invalid, must be > 0");
  options.pinned_reserve_segment_size_mb = mb;
  return absl::OkStatus();
}

std::string FormatPinnedReserveSegmentSize(const AllocatorOptions& options) {
  const uint64_t mb = options.pinned_reserve_segment_size_mb;
  return mb == 0 ? "" : absl::StrCat(mb);
}

absl::Status ParsePlacement(const Entry& entry, AllocatorOptions& options) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const Token* value, SingleValue(entry));
  for (const PlacementName& placement : kPlacementNames) {
    if (placement.name == value->text) {
      options.placement = placement.policy;
      return absl::OkStatus();
    }
  }
  std::vector<std::string> names;
  for (const PlacementName& placement : kPlacementNames) names.emplace_back(placement.name);
  return ValueError(
      entry, value->text,
      absl::StrCat("is not a placement policy, options are ", absl::StrJoin(names, ", ")));
}

std::string FormatPlacement(const AllocatorOptions& options) {
  if (options.placement == PlacementPolicy::kBestFit) return "";
  return std::string(PlacementPolicyName(options.placement));
}

// --- The option table ---------------------------------------------------------------------------

// How PyTorch's CUDA parser counts a key towards its warning "backend:cudaMallocAsync ignores
// ...": it counts its own keys (except backend) but skips the generic ones, so in the newest
// source max_split_size_mb does not trigger the warning while pinned_num_register_threads does.
enum class AsyncWarning : uint8_t { kNo, kYes };

struct OptionDef {
  AllocatorKey key;
  std::string_view name;   // the key, as FormatAllocatorOptions writes it
  std::string_view alias;  // another accepted spelling (PyTorch's hipify aliases), or ""
  AsyncWarning async_warning;
  absl::Status (*parse)(const Entry& entry, AllocatorOptions& options);
  std::string (*format)(const AllocatorOptions& options);
};

template <bool AllocatorOptions::*kField>
constexpr OptionDef BoolOption(AllocatorKey key, std::string_view name, std::string_view alias,
                               AsyncWarning warn) {
  return {key, name, alias, warn, ParseBool<kField>, FormatBool<kField>};
}

// In FormatAllocatorOptions order. large_segment_size_mb must stay first (see
// ParseAllocatorOptions).
constexpr OptionDef kOptions[] = {
    // Generic keys (PyTorch's AcceleratorAllocatorConfig).
    {AllocatorKey::kLargeSegmentSizeMb, "large_segment_size_mb", "", AsyncWarning::kNo,
     ParseLargeSegmentSize, FormatLargeSegmentSize},
    {AllocatorKey::kMaxSplitSizeMb, "max_split_size_mb", "", AsyncWarning::kNo, ParseMaxSplitSize,
     FormatMaxSplitSize},
    {AllocatorKey::kMaxNonSplitRoundingMb, "max_non_split_rounding_mb", "", AsyncWarning::kNo,
     ParseMaxNonSplitRounding, FormatMaxNonSplitRounding},
    {AllocatorKey::kGarbageCollectionThreshold, "garbage_collection_threshold", "",
     AsyncWarning::kNo, ParseGarbageCollectionThreshold, FormatGarbageCollectionThreshold},
    {AllocatorKey::kRoundupPower2Divisions, "roundup_power2_divisions", "", AsyncWarning::kNo,
     ParseRoundupOption, FormatRoundupOption},
    BoolOption<&AllocatorOptions::expandable_segments>(
        AllocatorKey::kExpandableSegments, "expandable_segments", "", AsyncWarning::kNo),
    BoolOption<&AllocatorOptions::pinned_use_background_threads>(
        AllocatorKey::kPinnedUseBackgroundThreads, "pinned_use_background_threads", "",
        AsyncWarning::kNo),
    // CUDA keys (PyTorch's CUDAAllocatorConfig).
    {AllocatorKey::kBackend, "backend", "", AsyncWarning::kNo, ParseBackend, FormatBackend},
    BoolOption<&AllocatorOptions::release_lock_on_cudamalloc>(
        AllocatorKey::kReleaseLockOnCudamalloc, "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc", AsyncWarning::kYes),
    {AllocatorKey::kPerProcessMemoryFraction, "per_process_memory_fraction", "", AsyncWarning::kYes,
     ParsePerProcessMemoryFraction, FormatPerProcessMemoryFraction},
    BoolOption<&AllocatorOptions::graph_capture_record_stream_reuse>(
        AllocatorKey::kGraphCaptureRecordStreamReuse, "graph_capture_record_stream_reuse", "",
        AsyncWarning::kYes),
    BoolOption<&AllocatorOptions::pinned_use_cuda_host_register>(
        AllocatorKey::kPinnedUseCudaHostRegister, "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register", AsyncWarning::kYes),
    {AllocatorKey::kPinnedNumRegisterThreads, "pinned_num_register_threads", "", AsyncWarning::kYes,
     ParsePinnedNumRegisterThreads, FormatPinnedNumRegisterThreads},
    {AllocatorKey::kPinnedReserveSegmentSizeMb, "pinned_reserve_segment_size_mb", "",
     AsyncWarning::kYes, ParsePinnedReserveSegmentSize, FormatPinnedReserveSegmentSize},
    // fragscope extension (not a PyTorch key).
    {AllocatorKey::kPlacement, "placement", "", AsyncWarning::kNo, ParsePlacement, FormatPlacement},
};
constexpr const OptionDef& kLargeSegmentSizeOption = kOptions[0];

const OptionDef* FindOption(std::string_view key) {
  for (const OptionDef& def : kOptions) {
    if (def.name == key || (!def.alias.empty() && def.alias == key)) return &def;
  }
  return nullptr;
}

const OptionDef& OptionFor(AllocatorKey key) { return kOptions[static_cast<size_t>(key)]; }

// The table is indexed by AllocatorKey.
constexpr bool TableFollowsKeys() {
  for (size_t i = 0; i < std::size(kOptions); ++i) {
    if (static_cast<size_t>(kOptions[i].key) != i) return false;
  }
  return std::size(kOptions) == kAllocatorKeyCount;
}
static_assert(TableFollowsKeys());

// Sets `key`'s fields of `options` to their defaults (ResetAllocatorOption without the checks).
void ResetFields(AllocatorOptions& options, AllocatorKey key) {
  const AllocatorOptions defaults;
  switch (key) {
    case AllocatorKey::kLargeSegmentSizeMb:
      if (options.max_non_split_rounding_bytes == options.large_segment_size_bytes) {
        options.max_non_split_rounding_bytes = defaults.large_segment_size_bytes;
      }
      options.large_segment_size_bytes = defaults.large_segment_size_bytes;
      break;
    case AllocatorKey::kMaxSplitSizeMb:
      options.max_split_size_bytes = defaults.max_split_size_bytes;
      break;
    case AllocatorKey::kMaxNonSplitRoundingMb:
      options.max_non_split_rounding_bytes = options.large_segment_size_bytes;
      break;
    case AllocatorKey::kGarbageCollectionThreshold:
      options.garbage_collection_threshold = defaults.garbage_collection_threshold;
      break;
    case AllocatorKey::kRoundupPower2Divisions:
      options.roundup_power2_divisions = defaults.roundup_power2_divisions;
      break;
    case AllocatorKey::kExpandableSegments:
      options.expandable_segments = defaults.expandable_segments;
      break;
    case AllocatorKey::kPinnedUseBackgroundThreads:
      options.pinned_use_background_threads = defaults.pinned_use_background_threads;
      break;
    case AllocatorKey::kBackend:
      options.backend = defaults.backend;
      break;
    case AllocatorKey::kReleaseLockOnCudamalloc:
      options.release_lock_on_cudamalloc = defaults.release_lock_on_cudamalloc;
      break;
    case AllocatorKey::kPerProcessMemoryFraction:
      options.per_process_memory_fraction = defaults.per_process_memory_fraction;
      break;
    case AllocatorKey::kGraphCaptureRecordStreamReuse:
      options.graph_capture_record_stream_reuse = defaults.graph_capture_record_stream_reuse;
      break;
    case AllocatorKey::kPinnedUseCudaHostRegister:
      options.pinned_use_cuda_host_register = defaults.pinned_use_cuda_host_register;
      break;
    case AllocatorKey::kPinnedNumRegisterThreads:
      options.pinned_num_register_threads = defaults.pinned_num_register_threads;
      break;
    case AllocatorKey::kPinnedReserveSegmentSizeMb:
      options.pinned_reserve_segment_size_mb = defaults.pinned_reserve_segment_size_mb;
      break;
    case AllocatorKey::kPlacement:
      options.placement = defaults.placement;
      break;
  }
  options.given.reset(static_cast<size_t>(key));
}

// The sizes that must stay at least the large segment size (ParseAllocatorOptions applies
// large_segment_size_mb first so that its checks see it; an edit checks afterwards).
absl::Status CheckSizesAgainstLargeSegment(const AllocatorOptions& options) {
  const uint64_t min_mb = options.large_segment_size_bytes / kMiB;
  if (options.max_split_size_set() &&
      options.max_split_size_bytes < options.large_segment_size_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_split_size_mb: ", options.max_split_size_bytes / kMiB,
                     " is too small, must be >= ", min_mb, " (the large_segment_size_mb)"));
  }
  if (options.max_non_split_rounding_bytes < options.large_segment_size_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_non_split_rounding_mb: ", options.max_non_split_rounding_bytes / kMiB,
                     " is too small, must be >= ", min_mb, " (the large_segment_size_mb)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool AffectsDeviceMemory(AllocatorKey key) {
  switch (key) {
    case AllocatorKey::kPinnedUseBackgroundThreads:
    case AllocatorKey::kReleaseLockOnCudamalloc:
    case AllocatorKey::kGraphCaptureRecordStreamReuse:
    case AllocatorKey::kPinnedUseCudaHostRegister:
    case AllocatorKey::kPinnedNumRegisterThreads:
    case AllocatorKey::kPinnedReserveSegmentSizeMb:
      return false;
    default:
      return true;
  }
}

bool SameAllocatorOption(const AllocatorOptions& a, const AllocatorOptions& b, AllocatorKey key) {
  switch (key) {
    case AllocatorKey::kLargeSegmentSizeMb:
      return a.large_segment_size_bytes == b.large_segment_size_bytes;
    case AllocatorKey::kMaxSplitSizeMb:
      return a.max_split_size_bytes == b.max_split_size_bytes;
    case AllocatorKey::kMaxNonSplitRoundingMb:
      return a.max_non_split_rounding_bytes == b.max_non_split_rounding_bytes;
    case AllocatorKey::kGarbageCollectionThreshold:
      return a.garbage_collection_threshold == b.garbage_collection_threshold;
    case AllocatorKey::kRoundupPower2Divisions:
      return a.roundup_power2_divisions == b.roundup_power2_divisions;
    case AllocatorKey::kExpandableSegments:
      return a.expandable_segments == b.expandable_segments;
    case AllocatorKey::kPinnedUseBackgroundThreads:
      return a.pinned_use_background_threads == b.pinned_use_background_threads;
    case AllocatorKey::kBackend:
      return a.backend == b.backend;
    case AllocatorKey::kReleaseLockOnCudamalloc:
      return a.release_lock_on_cudamalloc == b.release_lock_on_cudamalloc;
    case AllocatorKey::kPerProcessMemoryFraction:
      return a.per_process_memory_fraction == b.per_process_memory_fraction;
    case AllocatorKey::kGraphCaptureRecordStreamReuse:
      return a.graph_capture_record_stream_reuse == b.graph_capture_record_stream_reuse;
    case AllocatorKey::kPinnedUseCudaHostRegister:
      return a.pinned_use_cuda_host_register == b.pinned_use_cuda_host_register;
    case AllocatorKey::kPinnedNumRegisterThreads:
      return a.pinned_num_register_threads == b.pinned_num_register_threads;
    case AllocatorKey::kPinnedReserveSegmentSizeMb:
      return a.pinned_reserve_segment_size_mb == b.pinned_reserve_segment_size_mb;
    case AllocatorKey::kPlacement:
      return a.placement == b.placement;
  }
  return false;
}

std::string AllocatorOptionValueText(const AllocatorOptions& options, AllocatorKey key) {
  std::string text = OptionFor(key).format(options);
  return text.empty() ? "(default)" : text;
}

std::string_view AllocatorKeyName(AllocatorKey key) { return OptionFor(key).name; }

std::optional<AllocatorKey> FindAllocatorKey(std::string_view name) {
  const OptionDef* def = FindOption(name);
  if (def == nullptr) return std::nullopt;
  return def->key;
}

absl::Status SetAllocatorOption(AllocatorOptions& options, AllocatorKey key,
                                std::string_view value) {
  const OptionDef& def = OptionFor(key);
  const std::string text =
      absl::StrCat(alloc_conf::ToAbsl(def.name), ":", alloc_conf::ToAbsl(value));
  FRAGSCOPE_ASSIGN_OR_RETURN(const std::vector<Entry> entries, alloc_conf::SplitConfig(text));
  if (entries.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        alloc_conf::ToAbsl(def.name), ": '", alloc_conf::ToAbsl(value), "' is not one value"));
  }
  AllocatorOptions edited = options;
  ResetFields(edited, key);
  FRAGSCOPE_RETURN_IF_ERROR(def.parse(entries[0], edited));
  if (key == AllocatorKey::kLargeSegmentSizeMb &&
      options.max_non_split_rounding_bytes == options.large_segment_size_bytes) {
    edited.max_non_split_rounding_bytes = edited.large_segment_size_bytes;
  }
  FRAGSCOPE_RETURN_IF_ERROR(CheckSizesAgainstLargeSegment(edited));
  edited.given.set(static_cast<size_t>(key));
  options = std::move(edited);
  return absl::OkStatus();
}

absl::Status ResetAllocatorOption(AllocatorOptions& options, AllocatorKey key) {
  AllocatorOptions edited = options;
  ResetFields(edited, key);
  FRAGSCOPE_RETURN_IF_ERROR(CheckSizesAgainstLargeSegment(edited));
  options = std::move(edited);
  return absl::OkStatus();
}

std::string_view PlacementPolicyName(PlacementPolicy policy) {
  for (const PlacementName& placement : kPlacementNames) {
    if (placement.policy == policy) return placement.name;
  }
  return "unknown";
}

absl::StatusOr<AllocatorOptions> ParseAllocatorOptions(std::string_view conf) {
  FRAGSCOPE_ASSIGN_OR_RETURN(const std::vector<Entry> entries, alloc_conf::SplitConfig(conf));
  AllocatorOptions options;
  options.source = std::string(conf);

  for (const Entry& entry : entries) {
    if (entry.key.text == kLargeSegmentSizeOption.name) {
      FRAGSCOPE_RETURN_IF_ERROR(kLargeSegmentSizeOption.parse(entry, options));
      options.given.set(static_cast<size_t>(AllocatorKey::kLargeSegmentSizeMb));
    }
  }
  options.max_non_split_rounding_bytes = options.large_segment_size_bytes;

  bool async_warning = false;
  for (const Entry& entry : entries) {
    const OptionDef* def = FindOption(entry.key.text);
    if (def == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Unrecognized key '", entry.key.text, "' in CUDA allocator config."));
    }
    if (def == &kLargeSegmentSizeOption) continue;
    FRAGSCOPE_RETURN_IF_ERROR(def->parse(entry, options));
    options.given.set(static_cast<size_t>(def->key));
    async_warning |= def->async_warning == AsyncWarning::kYes;
  }
  if (options.backend == "cudaMallocAsync" && async_warning) {
    options.warnings.push_back(
        "backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and "
        "garbage_collect_threshold.");
  }
  return options;
}

std::string FormatAllocatorOptions(const AllocatorOptions& options) {
  std::vector<std::string> parts;
  for (const OptionDef& def : kOptions) {
    std::string value = def.format(options);
    if (!value.empty()) parts.push_back(absl::StrCat(alloc_conf::ToAbsl(def.name), ":", value));
  }
  return absl::StrJoin(parts, ",");
}

}  // namespace fragscope
