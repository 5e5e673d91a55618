#include "analysis/sources/settings_check.h"

#include <bit>
#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "allocator/roundup_power2_divisions.h"

namespace fragscope {
namespace {

// Fields of the snapshot's dict over `values` (RecordedSettingsFromSnapshot).
void ApplySnapshotFields(const SnapshotAllocatorSettings& s, RecordedSettings& r) {
  const auto record = [&r](AllocatorKey key) { r.keys.set(static_cast<size_t>(key)); };
  if (s.max_split_size.has_value()) {
    // PyTorch writes SIZE_MAX (unlimited) as -1.
    r.values.max_split_size_bytes =
        *s.max_split_size < 0 ? kUnlimitedBytes : static_cast<uint64_t>(*s.max_split_size);
    record(AllocatorKey::kMaxSplitSizeMb);
  }
  if (s.garbage_collection_threshold.has_value()) {
    r.values.garbage_collection_threshold = *s.garbage_collection_threshold;
    record(AllocatorKey::kGarbageCollectionThreshold);
  }
  if (s.expandable_segments.has_value()) {
    r.values.expandable_segments = *s.expandable_segments;
    record(AllocatorKey::kExpandableSegments);
  }
  if (s.pinned_num_register_threads.has_value() && *s.pinned_num_register_threads > 0 &&
      *s.pinned_num_register_threads <= INT32_MAX) {
    r.values.pinned_num_register_threads = static_cast<uint32_t>(*s.pinned_num_register_threads);
    record(AllocatorKey::kPinnedNumRegisterThreads);
  }
  if (s.release_lock_on_cudamalloc.has_value()) {
    r.values.release_lock_on_cudamalloc = *s.release_lock_on_cudamalloc;
    record(AllocatorKey::kReleaseLockOnCudamalloc);
  }
  if (s.pinned_use_cuda_host_register.has_value()) {
    r.values.pinned_use_cuda_host_register = *s.pinned_use_cuda_host_register;
    record(AllocatorKey::kPinnedUseCudaHostRegister);
  }
  if (s.graph_capture_record_stream_reuse.has_value()) {
    r.values.graph_capture_record_stream_reuse = *s.graph_capture_record_stream_reuse;
    record(AllocatorKey::kGraphCaptureRecordStreamReuse);
  }
  if (s.roundup_power2_divisions.has_value()) {
    // {"1": d, "2": d, ..., "32768": d}: the interval starting at that many MB.
    RoundupPower2Table table{};
    bool valid = s.roundup_power2_divisions->size() == table.size();
    for (const auto& [mb_text, divisions] : *s.roundup_power2_divisions) {
      uint64_t mb = 0;
      if (!absl::SimpleAtoi(mb_text, &mb) || !std::has_single_bit(mb) || divisions < 0 ||
          divisions > INT32_MAX) {
        valid = false;
        break;
      }
      const size_t index = static_cast<size_t>(std::bit_width(mb) - 1);
      if (index >= table.size()) {
        valid = false;
        break;
      }
      table[index] = static_cast<uint32_t>(divisions);
    }
    if (valid) {
      r.values.roundup_power2_divisions = table;
      record(AllocatorKey::kRoundupPower2Divisions);
    }
  }
}

}  // namespace

std::optional<AskedSettings> AskedSettingsFromEnv(const GetEnvFunction& getenv) {
  std::optional<AllocConfEnv> env = ReadAllocConfEnv(getenv);
  if (!env.has_value()) return std::nullopt;
  AskedSettings asked{.from = env->variable, .text = env->value};
  if (env->shadowed_value.has_value()) asked.notes.push_back(ShadowedAllocConfNote(*env));
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(env->value);
  if (options.ok()) {
    asked.options = *std::move(options);
  } else {
    asked.notes.push_back(absl::StrCat(env->variable, "='", env->value,
                                       "' is not valid settings: ", options.status().message(),
                                       " (PyTorch 2.11 refuses it at the job's first CUDA "
                                       "allocation)"));
  }
  return asked;
}

RecordedSettings RecordedSettingsFromSnapshot(const SnapshotAllocatorSettings& settings) {
  RecordedSettings r{.where = "the snapshot's allocator_settings"};
  if (settings.alloc_conf.has_value()) {
    absl::StatusOr<AllocatorOptions> parsed = ParseAllocatorOptions(*settings.alloc_conf);
    if (parsed.ok()) {
      const bool fraction_named = parsed->Given(AllocatorKey::kPerProcessMemoryFraction);
      r.values = *std::move(parsed);
      r.keys.set();
      if (!fraction_named)
        r.keys.reset(static_cast<size_t>(AllocatorKey::kPerProcessMemoryFraction));
      // A fragscope-only key no PyTorch snapshot records.
      r.keys.reset(static_cast<size_t>(AllocatorKey::kPlacement));
    }
  }
  ApplySnapshotFields(settings, r);
  return r;
}

SettingsCheck CheckSettings(const AskedSettings& asked,
                            const std::optional<RecordedSettings>& recorded) {
  SettingsCheck check{.asked_from = asked.from, .asked = asked.text, .notes = asked.notes};
  if (recorded.has_value()) check.recorded_in = recorded->where;
  check.asked_valid = asked.options.has_value();
  if (!check.asked_valid) return check;
  for (size_t i = 0; i < kAllocatorKeyCount; ++i) {
    const auto key = static_cast<AllocatorKey>(i);
    if (!asked.options->Given(key)) continue;
    if (!AffectsDeviceMemory(key)) check.ignored.push_back(key);
    if (!recorded.has_value() || !recorded->keys.test(i)) {
      check.not_recorded.push_back(key);
    } else if (!SameAllocatorOption(*asked.options, recorded->values, key)) {
      check.not_in_effect.push_back({.key = key,
                                     .asked = AllocatorOptionValueText(*asked.options, key),
                                     .in_effect = AllocatorOptionValueText(recorded->values, key)});
    }
  }
  return check;
}

}  // namespace fragscope
