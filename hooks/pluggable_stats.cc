// libfragscope_alloc.so: the inspection half of the C ABI (fragscope_alloc.h): PyTorch-keyed
// statistics, memory summary, snapshot JSON, log markers and flush. None of these creates an
// allocator: a device fragscope has not allocated on reads as all zeros, as in PyTorch.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/device_stats.h"
#include "allocator/memory_summary.h"
#include "fslog/allocation_role.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/pluggable_allocator.h"
#include "hooks/pluggable_internal.h"
#include "hooks/snapshot_json.h"

namespace fragscope::hooks {
namespace {

// The keys of FlattenStats, in its order. Computed once; the key set does not depend on values.
const std::vector<std::string>& StatKeys() {
  static const std::vector<std::string>* keys = [] {
    auto* result = new std::vector<std::string>;
    for (auto& [key, value] : FlattenStats(DeviceStats{})) result->push_back(key);
    return result;
  }();
  return *keys;
}

DeviceStats StatsOf(int device) {
  const RegistryPin registry;
  CachingAllocator* allocator = registry->Find(device);
  return allocator != nullptr ? allocator->GetStats() : DeviceStats{};
}

}  // namespace

void RecordOptionsInLog(AllocatorRegistry& registry, int device,
                        const CachingAllocator& allocator) {
  DeviceLogs* logs = registry.logs();
  FslogWriter* writer = logs != nullptr ? logs->Get(device) : nullptr;
  if (writer == nullptr) return;
  AllocatorOptions options = allocator.options();
  options.per_process_memory_fraction = allocator.RecordedMemoryFraction();
  writer->RecordOptionsChange(FormatAllocatorOptions(options));
}

size_t CopyOut(const std::string& text, char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

}  // namespace fragscope::hooks

using fragscope::hooks::ReportException;

extern "C" {

int fragscope_stat_count(void) {
  try {
    return static_cast<int>(fragscope::hooks::StatKeys().size());
  } catch (...) {
    ReportException("fragscope_stat_count");
  }
  return 0;
}

const char* fragscope_stat_key(int index) {
  try {
    const auto& keys = fragscope::hooks::StatKeys();
    if (index < 0 || static_cast<size_t>(index) >= keys.size()) return nullptr;
    return keys[static_cast<size_t>(index)].c_str();
  } catch (...) {
    ReportException("fragscope_stat_key");
  }
  return nullptr;
}

int fragscope_stat_values(int device, int64_t* values, int capacity) {
  try {
    if (device < 0) return -1;
    const auto flat = fragscope::FlattenStats(fragscope::hooks::StatsOf(device));
    const size_t n = std::min(flat.size(), static_cast<size_t>(std::max(capacity, 0)));
    for (size_t i = 0; i < n && values != nullptr; ++i) values[i] = flat[i].second;
    return static_cast<int>(flat.size());
  } catch (...) {
    ReportException("fragscope_stat_values");
  }
  return -1;
}

int64_t fragscope_stat(int device, const char* key) {
  try {
    if (device < 0 || key == nullptr) return 0;
    for (const auto& [name, value] : fragscope::FlattenStats(fragscope::hooks::StatsOf(device))) {
      if (name == key) return value;
    }
  } catch (...) {
    ReportException("fragscope_stat");
  }
  return 0;
}

void fragscope_reset_peak_stats(int device) {
  try {
    const fragscope::hooks::RegistryPin registry;
    if (auto* allocator = registry->Find(device)) {
      allocator->ResetPeakStats();
    }
  } catch (...) {
    ReportException("fragscope_reset_peak_stats");
  }
}

void fragscope_reset_accumulated_stats(int device) {
  try {
    const fragscope::hooks::RegistryPin registry;
    if (auto* allocator = registry->Find(device)) {
      allocator->ResetAccumulatedStats();
    }
  } catch (...) {
    ReportException("fragscope_reset_accumulated_stats");
  }
}

size_t fragscope_memory_summary(int device, char* buf, size_t len) {
  try {
    if (device < 0) return fragscope::hooks::CopyOut("", buf, len);
    return fragscope::hooks::CopyOut(
        fragscope::MemorySummary(fragscope::hooks::StatsOf(device), device), buf, len);
  } catch (...) {
    ReportException("fragscope_memory_summary");
  }
  return fragscope::hooks::CopyOut("", buf, len);
}

size_t fragscope_snapshot_json(int device, char* buf, size_t len) {
  try {
    fragscope::AllocatorSnapshot snapshot;
    const fragscope::hooks::RegistryPin registry;
    if (auto* allocator = registry->Find(device)) {
      snapshot = allocator->Snapshot();
    }
    return fragscope::hooks::CopyOut(fragscope::hooks::SnapshotJson(snapshot, device), buf, len);
  } catch (...) {
    ReportException("fragscope_snapshot_json");
  }
  return fragscope::hooks::CopyOut("", buf, len);
}

void fragscope_mark(const char* text) {
  try {
    if (text == nullptr) return;
    const fragscope::hooks::RegistryPin registry;
    if (auto* logs = registry->logs()) logs->MarkAll(text);
  } catch (...) {
    ReportException("fragscope_mark");
  }
}

void fragscope_record_model(const char* json) {
  try {
    if (json == nullptr) return;
    const fragscope::hooks::RegistryPin registry;
    if (auto* logs = registry->logs()) logs->RecordModelAll(json);
  } catch (...) {
    ReportException("fragscope_record_model");
  }
}

namespace {

bool CheckRole(const char* function, int role) {
  if (role >= 0 && fragscope::AllocationRoleOf(static_cast<uint64_t>(role)).has_value()) {
    return true;
  }
  fragscope::hooks::ReportError(absl::StrFormat("%s: role %d is not 0..%d", function, role,
                                                fragscope::kAllocationRoleCount - 1));
  return false;
}

}  // namespace

int fragscope_tag_block(const void* ptr, int device, int role) {
  return fragscope_tag_block_context(ptr, device, role, 0);
}

int fragscope_tag_block_context(const void* ptr, int device, int role, uint32_t context) {
  try {
    if (!CheckRole("fragscope_tag_block", role)) return -1;
    const fragscope::hooks::RegistryPin registry;
    if (auto* logs = registry->logs()) {
      if (fragscope::FslogWriter* writer = logs->Get(device)) {
        writer->Tag(reinterpret_cast<fragscope::DevicePtr>(ptr), static_cast<uint8_t>(role),
                    context);
      }
    }
    return 0;
  } catch (...) {
    ReportException("fragscope_tag_block");
  }
  return -1;
}

uint32_t fragscope_define_context(int role, const char* module, const char* op, const char* site,
                                  int backward) {
  try {
    if (!CheckRole("fragscope_define_context", role)) return 0;
    const fragscope::hooks::RegistryPin registry;
    auto* logs = registry->logs();
    if (logs == nullptr) return 0;
    return logs->DefineContextAll(static_cast<uint8_t>(role), module ? module : "", op ? op : "",
                                  site ? site : "", backward != 0);
  } catch (...) {
    ReportException("fragscope_define_context");
  }
  return 0;
}

void fragscope_set_context(uint32_t context) { fragscope::FslogWriter::SetThreadContext(context); }

int fragscope_flush(void) {
  try {
    const fragscope::hooks::RegistryPin registry;
    auto* logs = registry->logs();
    if (logs == nullptr) return 0;
    absl::Status status = logs->FlushAll();
    if (status.ok()) return 0;
    fragscope::hooks::ReportError(absl::StrFormat("fragscope_flush: %s", status.message()));
  } catch (...) {
    ReportException("fragscope_flush");
  }
  return -1;
}

}  // extern "C"
