// AllocatorOptions: every tunable of the caching allocator, parsed from a string in
// PYTORCH_CUDA_ALLOC_CONF syntax ("key:value,key:[a:b,c:d]").
//
// The struct is immutable configuration handed to CachingAllocator; the algorithms never read
// global state, so a replay or a sweep can run many configurations side by side. Defaults reproduce
// PyTorch's defaults, so a default-constructed AllocatorOptions makes the same decisions as
// PyTorch's native allocator.
//
// Validation follows PyTorch 2.11 (allocator/README.md "Settings"; c10/core/AllocatorConfig.cpp,
// c10/cuda/CUDAAllocatorConfig.cpp): exactly 2.11's keys, limits and defaults, and an error naming
// the key and the value for anything invalid, 2.11's own for an unknown key. The syntax is
// checked more strictly than PyTorch does (see allocator/alloc_conf_syntax.h).
//
// fragscope extension: the key `placement` (values: best_fit, first_fit) picks the free-block
// search policy. PyTorch rejects it as an unknown key; do not put it in a real
// PYTORCH_CUDA_ALLOC_CONF.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/types.h"

namespace fragscope {

// Where a free block is searched for. kBestFit is PyTorch's policy and the default.
enum class PlacementPolicy : uint8_t {
  kBestFit = 0,  // smallest fitting block on the stream, oldest segment, lowest address (PyTorch)
  // The lowest-address fitting block on the stream (RMM's arena and coalescing pools): packs
  // live blocks toward low addresses so free space coalesces at the top of segments.
  kFirstFit = 1,
};

// The `placement` value naming `policy` ("best_fit", "first_fit").
std::string_view PlacementPolicyName(PlacementPolicy policy);

// The keys of the settings string, in FormatAllocatorOptions order (the option table in
// allocator_options.cc has one row per key, in this order).
enum class AllocatorKey : uint8_t {
  kLargeSegmentSizeMb,
  kMaxSplitSizeMb,
  kMaxNonSplitRoundingMb,
  kGarbageCollectionThreshold,
  kRoundupPower2Divisions,
  kExpandableSegments,
  kPinnedUseBackgroundThreads,
  kBackend,
  kReleaseLockOnCudamalloc,
  kPerProcessMemoryFraction,
  kGraphCaptureRecordStreamReuse,
  kPinnedUseCudaHostRegister,
  kPinnedNumRegisterThreads,
  kPinnedReserveSegmentSizeMb,
  kPlacement,
};
inline constexpr size_t kAllocatorKeyCount = static_cast<size_t>(AllocatorKey::kPlacement) + 1;

// The key as the settings string spells it ("max_split_size_mb").
std::string_view AllocatorKeyName(AllocatorKey key);

// The key a settings string names (aliases such as release_lock_on_hipmalloc included), or
// nullopt for an unknown key.
std::optional<AllocatorKey> FindAllocatorKey(std::string_view name);

// Whether the key changes what the device allocator does. The pinned_* keys configure PyTorch's
// pinned host allocator, release_lock_on_cudamalloc only whether its lock is held around
// cudaMalloc (fragscope never drops it; no decision differs), and graph_capture_record_stream_reuse
// only frees during CUDA-graph capture, which fragscope does not replay: these are accepted and
// ignored.
bool AffectsDeviceMemory(AllocatorKey key);

struct AllocatorOptions {
  // Blocks of at least this size are never split, and serve only requests within
  // max_non_split_rounding_bytes of their size. kUnlimitedBytes = off (PyTorch's default).
  // Invariant: kUnlimitedBytes or >= large_segment_size_bytes.
  uint64_t max_split_size_bytes = kUnlimitedBytes;
  // Tolerance for serving a request >= max_split_size from a larger oversize block. Defaults to
  // large_segment_size_bytes (also when large_segment_size_mb changes it), as in PyTorch.
  // Invariant: >= large_segment_size_bytes.
  uint64_t max_non_split_rounding_bytes = kDefaultLargeSegmentBytes;
  // Segment size for requests in (1 MiB, 10 MiB), and the expandable large-pool page.
  // Invariant: > kMinLargeAllocBytes.
  uint64_t large_segment_size_bytes = kDefaultLargeSegmentBytes;
  // Divisions per power-of-two interval, indexed by clamp(log2(size) - 20, 0, 15); 0 or 1 = off.
  // Read it through RoundupPower2DivisionsFor(). Invariant: each entry is 0 or a power of 2.
  std::array<uint32_t, kRoundupPower2Intervals> roundup_power2_divisions{};
  // Reclaim unused cached large blocks once reserved exceeds this fraction of the allowed
  // maximum. 0 = off; only effective with per_process_memory_fraction < 1.
  double garbage_collection_threshold = 0.0;
  // Cap on reserved memory as a fraction of device capacity; 1.0 = no cap.
  double per_process_memory_fraction = 1.0;
  bool expandable_segments = false;
  // Accepted for compatibility; fragscope never drops its lock around device malloc.
  bool release_lock_on_cudamalloc = false;
  PlacementPolicy placement = PlacementPolicy::kBestFit;
  // "native" or "cudaMallocAsync". fragscope only implements native; the value is recorded.
  std::string backend = "native";

  // Reuse record_stream'ed blocks during graph capture using the graph's topology: accepted and
  // recorded; fragscope does not replay graph capture's frees.
  bool graph_capture_record_stream_reuse = false;

  // Host (pinned) allocator keys: validated like PyTorch and recorded, otherwise unused.
  bool pinned_use_cuda_host_register = false;
  uint32_t pinned_num_register_threads = 1;  // Invariant: a power of 2, <= 128.
  bool pinned_use_background_threads = false;
  uint64_t pinned_reserve_segment_size_mb = 0;  // 0 = unset; a parsed value is > 0.

  // The keys the settings named (ParseAllocatorOptions; SetAllocatorOption adds its key,
  // ResetAllocatorOption removes it): what was asked for, whatever the value.
  std::bitset<kAllocatorKeyCount> given;

  // The string ParseAllocatorOptions read ("" for defaults); SetAllocatorOption and
  // ResetAllocatorOption leave it as it was. For messages that quote what the user wrote.
  std::string source;
  // What PyTorch would print with TORCH_WARN while parsing `source` (native options given with
  // backend:cudaMallocAsync).
  std::vector<std::string> warnings;

  bool max_split_size_set() const { return max_split_size_bytes != kUnlimitedBytes; }
  bool Given(AllocatorKey key) const { return given.test(static_cast<size_t>(key)); }

  // Compares every field, `source` and `warnings` included.
  friend bool operator==(const AllocatorOptions&, const AllocatorOptions&) = default;
};

// Parses a PYTORCH_CUDA_ALLOC_CONF-syntax string. An empty string gives the defaults; keys
// that are absent keep their defaults (PyTorch's runtime re-parse keeps some CUDA keys from the
// previous string instead; a fresh parse like this one matches PyTorch's first parse).
// Errors are kInvalidArgument and name the key and value, e.g.
// "max_split_size_mb: 2 is too small, must be >= 20", or the offset of a syntax error.
absl::StatusOr<AllocatorOptions> ParseAllocatorOptions(std::string_view conf);

// Sets one key of `options` to `value` (the value's text as the settings string writes it:
// "128", "True", "[64:8,>:1]"), read by the same lexer and option table as ParseAllocatorOptions
// with the same limits. The key's previous value is replaced, not added to (a roundup list starts
// from no divisions); a new large_segment_size_mb moves max_non_split_rounding_mb with it when
// that was at its default. Errors name the key and value; `options` is then unchanged.
absl::Status SetAllocatorOption(AllocatorOptions& options, AllocatorKey key,
                                std::string_view value);

// Puts one key of `options` back to its default (max_split_size_mb: unlimited). Errors when the
// default would break an invariant of the rest (large_segment_size_mb back to 20 above a
// max_split_size_mb of less); `options` is then unchanged.
absl::Status ResetAllocatorOption(AllocatorOptions& options, AllocatorKey key);

// Whether `a` and `b` have the same value for `key` (the fields it sets).
bool SameAllocatorOption(const AllocatorOptions& a, const AllocatorOptions& b, AllocatorKey key);

// The value of `key` in `options` as the settings string writes it ("128", "True", "[64:8,>:1]"),
// or "(default)" when it has PyTorch's default. For messages and reports.
std::string AllocatorOptionValueText(const AllocatorOptions& options, AllocatorKey key);

// The canonical PYTORCH_CUDA_ALLOC_CONF string for `options` (only non-default keys, fixed
// order). ParseAllocatorOptions(FormatAllocatorOptions(o)) reproduces o (except `source` and
// `warnings`). REQUIRES: `options` satisfies the invariants above, and its MB-valued fields are
// whole MiB (always true of parsed options).
std::string FormatAllocatorOptions(const AllocatorOptions& options);

// The roundup_power2_divisions entry for a block of `size_bytes`: index
// clamp(floor(log2(size_bytes)) - 20, 0, 15), so sizes below 2 MiB (and 0) use entry 0 and
// sizes from 32 GiB up use entry 15 (PyTorch's AllocatorConfig::roundup_power2_divisions(size)).
// Inline: every allocation rounds its size.
inline uint32_t RoundupPower2DivisionsFor(const AllocatorOptions& options, uint64_t size_bytes) {
  const int log2_size = size_bytes == 0 ? 0 : static_cast<int>(std::bit_width(size_bytes)) - 1;
  const int index = std::clamp(log2_size - 20, 0, static_cast<int>(kRoundupPower2Intervals) - 1);
  return options.roundup_power2_divisions[static_cast<size_t>(index)];
}

}  // namespace fragscope
