#include "hooks/device_logs.h"

#include <cstdio>
#include <utility>

#include "hooks/hook_config.h"
#include "hooks/process_exit.h"

namespace fragscope::hooks {

DeviceLogs::DeviceLogs(std::string pattern, FslogWriterOptions options)
    : pattern_(std::move(pattern)), options_(options) {}

DeviceLogs::~DeviceLogs() {
  MutexLock lock(&mu_);
  for (int d = 0; d < kMaxDevices; ++d) {
    writers_[static_cast<size_t>(d)].store(nullptr, std::memory_order_release);
    owned_[static_cast<size_t>(d)].reset();
  }
}

FslogWriter* DeviceLogs::GetOrOpen(int device, const std::function<FslogHeaderInfo()>& make_info) {
  if (!enabled() || device < 0 || device >= kMaxDevices) return nullptr;
  if (FslogWriter* writer = Get(device)) return writer;
  MutexLock lock(&mu_);
  const auto index = static_cast<size_t>(device);
  if (owned_[index] != nullptr) return owned_[index].get();
  if (failed_[index]) return nullptr;
  absl::StatusOr<std::string> pattern = ExpandDeviceLogPattern(pattern_, device);
  absl::StatusOr<std::unique_ptr<FslogWriter>> writer =
      pattern.ok() ? FslogWriter::Open(*pattern, make_info(), options_)
                   : absl::StatusOr<std::unique_ptr<FslogWriter>>(pattern.status());
  if (!writer.ok()) {
    failed_[index] = true;
    std::fprintf(stderr, "fragscope: cannot open the event log for device %d (%s): %s\n", device,
                 pattern_.c_str(), std::string(writer.status().message()).c_str());
    return nullptr;
  }
  owned_[index] = *std::move(writer);
  if (!model_json_.empty()) owned_[index]->RecordModel(model_json_);
  DefineAllLocked(owned_[index].get());
  for (const std::string& marker : early_markers_) owned_[index]->Mark(marker);
  writers_[index].store(owned_[index].get(), std::memory_order_release);
  // The writer registered its atexit flush; registering ours after it makes the hooks stop before
  // that flush runs (atexit handlers run in reverse order). See Note [Nothing after exit began].
  WatchProcessExit();
  return owned_[index].get();
}

void DeviceLogs::MarkAll(std::string_view text) {
  if (!enabled()) return;
  bool any_open = false;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (FslogWriter* writer = Get(d)) {
      writer->Mark(text);
      any_open = true;
    }
  }
  if (any_open) return;
  MutexLock lock(&mu_);
  for (const auto& writer : owned_) {
    if (writer != nullptr) {  // opened since the scan above
      writer->Mark(text);
      any_open = true;
    }
  }
  if (!any_open && early_markers_.size() < kMaxEarlyMarkers) early_markers_.emplace_back(text);
}

void DeviceLogs::RecordModelAll(std::string_view json) {
  if (!enabled()) return;
  MutexLock lock(&mu_);
  model_json_.assign(json);
  for (const auto& writer : owned_) {
    if (writer != nullptr) writer->RecordModel(json);
  }
}

uint32_t DeviceLogs::StringIdLocked(std::string_view text) {
  if (text.empty()) return 0;
  const std::string kept(TruncateUtf8(text, kMaxStringTextBytes));
  auto [it, inserted] = string_ids_.try_emplace(kept, static_cast<uint32_t>(strings_.size() + 1));
  if (inserted) {
    strings_.push_back(kept);
    for (const auto& writer : owned_) {
      if (writer != nullptr) writer->DefineString(it->second, kept);
    }
  }
  return it->second;
}

void DeviceLogs::DefineAllLocked(FslogWriter* writer) {
  for (size_t i = 0; i < strings_.size(); ++i) {
    writer->DefineString(static_cast<uint32_t>(i + 1), strings_[i]);
  }
  for (const ContextDefinition& context : contexts_) writer->DefineContext(context);
}

uint32_t DeviceLogs::DefineContextAll(uint8_t role, std::string_view module, std::string_view op,
                                      std::string_view site, bool backward) {
  if (!enabled()) return 0;
  MutexLock lock(&mu_);
  ContextDefinition context{.role = role,
                            .backward = backward,
                            .module = StringIdLocked(module),
                            .op = StringIdLocked(op),
                            .site = StringIdLocked(site)};
  auto [it, inserted] =
      context_ids_.try_emplace(std::tuple(role, backward, context.module, context.op, context.site),
                               static_cast<uint32_t>(contexts_.size() + 1));
  if (inserted) {
    context.id = it->second;
    contexts_.push_back(context);
    for (const auto& writer : owned_) {
      if (writer != nullptr) writer->DefineContext(context);
    }
  }
  return it->second;
}

absl::Status DeviceLogs::FlushAll() {
  absl::Status first;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (FslogWriter* writer = Get(d)) first.Update(writer->Flush());
  }
  return first;
}

}  // namespace fragscope::hooks
