// The effective-settings check: the allocator settings the user says the job ran with (--conf, or
// the environment's PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF) against those the trace records
// as in effect (a PyTorch 2.11 snapshot's `allocator_settings`, an .fslog header), key by key.
// A setting asked for but recorded with another value was not in effect in the job: the usual
// cause is a second variable or a launcher's value that won (allocator/alloc_conf_env.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "allocator/alloc_conf_env.h"
#include "allocator/allocator_options.h"
#include "analysis/sources/pytorch_snapshot.h"
#include "analysis/sources/trace_event.h"

namespace fragscope {

// What the user says the job ran with.
struct AskedSettings {
  std::string from;  // "--conf", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"
  std::string text;  // as written
  // Parsed; nullopt when the text is not valid settings (then `notes` says why).
  std::optional<AllocatorOptions> options;
  std::vector<std::string> notes;
};

// The settings the environment gives (ReadAllocConfEnv), parsed; nullopt when neither variable is
// set. A value PyTorch would refuse is a note, not an error: the check is advice.
std::optional<AskedSettings> AskedSettingsFromEnv(const GetEnvFunction& getenv);

// The settings a snapshot's `allocator_settings` record as in effect: the settings string PyTorch
// parsed last (every key then counts as recorded, absent ones at their defaults, except
// per_process_memory_fraction, which set_per_process_memory_fraction() changes unrecorded), and
// over it the values PyTorch wrote as fields (max_split_size, roundup_power2_divisions, ...).
RecordedSettings RecordedSettingsFromSnapshot(const SnapshotAllocatorSettings& settings);

struct SettingNotInEffect {
  AllocatorKey key;
  std::string asked;      // AllocatorOptionValueText
  std::string in_effect;  // as the trace records it
};

struct SettingsCheck {
  std::string asked_from;
  std::string asked;
  bool asked_valid = true;  // false: `asked` is not valid settings (notes say why); nothing checked
  std::string recorded_in;  // RecordedSettings::where; "" when the trace records none
  std::vector<SettingNotInEffect> not_in_effect;
  std::vector<AllocatorKey> not_recorded;  // asked for; the trace does not say
  std::vector<AllocatorKey> ignored;       // asked for; no effect on device memory (replay ignores)
  std::vector<std::string> notes;
};

// Every key `asked` names, against `recorded`.
SettingsCheck CheckSettings(const AskedSettings& asked,
                            const std::optional<RecordedSettings>& recorded);

}  // namespace fragscope
