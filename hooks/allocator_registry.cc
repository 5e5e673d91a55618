#include "hooks/allocator_registry.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/check.h"

namespace fragscope::hooks {

AllocatorRegistry::AllocatorRegistry(BackendFactory factory) : factory_(std::move(factory)) {}

AllocatorRegistry::~AllocatorRegistry() {
  MutexLock lock(&mu_);
  for (size_t d = 0; d < owned_.size(); ++d) {
    allocators_[d].store(nullptr, std::memory_order_release);
    if (owned_[d] == nullptr) continue;
    if (owned_[d]->log != nullptr) owned_[d]->allocator->RemoveObserver(owned_[d]->log);
    owned_[d]->allocator.reset();
    owned_[d]->backend.reset();
    owned_[d].reset();
  }
  logs_.reset();
}

bool AllocatorRegistry::AnyDeviceLocked() const {
  for (const auto& device : owned_) {
    if (device != nullptr) return true;
  }
  return false;
}

absl::Status AllocatorRegistry::Configure(std::optional<std::string_view> conf,
                                          std::optional<std::string_view> log_pattern) {
  MutexLock lock(&mu_);
  if (AnyDeviceLocked()) {
    return absl::FailedPreconditionError(
        "fragscope is already allocating: configure it before the first CUDA allocation");
  }
  absl::StatusOr<HookConfig> config = LoadHookConfig(conf, log_pattern);
  if (!config.ok()) {
    config_.reset();
    config_error_ = config.status();
    return config.status();
  }
  config_ = *std::move(config);
  config_error_ = absl::OkStatus();
  logs_ = std::make_unique<DeviceLogs>(config_->log_pattern, config_->log_options);
  return absl::OkStatus();
}

absl::Status AllocatorRegistry::SetBackendFactory(BackendFactory factory) {
  MutexLock lock(&mu_);
  if (AnyDeviceLocked()) {
    return absl::FailedPreconditionError(
        "the backend factory must be set before the first allocation");
  }
  factory_ = std::move(factory);
  return absl::OkStatus();
}

absl::Status AllocatorRegistry::LoadConfigLocked() {
  if (config_.has_value()) return absl::OkStatus();
  if (config_error_.ok()) {
    absl::StatusOr<HookConfig> config = LoadHookConfig(std::nullopt, std::nullopt);
    if (config.ok()) {
      config_ = *std::move(config);
      logs_ = std::make_unique<DeviceLogs>(config_->log_pattern, config_->log_options);
      for (const std::string& warning : config_->options.warnings) {
        std::fprintf(stderr, "fragscope: warning: %s\n", warning.c_str());
      }
      return absl::OkStatus();
    }
    config_error_ = absl::InvalidArgumentError(absl::StrCat(
        "invalid configuration, fragscope refuses to allocate: ", config.status().message()));
  }
  return config_error_;
}

absl::StatusOr<AllocatorOptions> AllocatorRegistry::Options() {
  MutexLock lock(&mu_);
  FRAGSCOPE_RETURN_IF_ERROR(LoadConfigLocked());
  return config_->options;
}

DeviceLogs* AllocatorRegistry::logs() {
  MutexLock lock(&mu_);
  if (!LoadConfigLocked().ok()) return nullptr;
  return logs_.get();
}

CachingAllocator* AllocatorRegistry::Find(int device) const {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return allocators_[static_cast<size_t>(device)].load(std::memory_order_acquire);
}

absl::StatusOr<CachingAllocator*> AllocatorRegistry::Get(int device) {
  if (device < 0 || device >= kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device %d is out of range (fragscope supports 0..%d)", device, kMaxDevices - 1));
  }
  if (CachingAllocator* allocator = Find(device)) return allocator;

  MutexLock lock(&mu_);
  const auto index = static_cast<size_t>(device);
  if (owned_[index] != nullptr) return owned_[index]->allocator.get();
  FRAGSCOPE_RETURN_IF_ERROR(LoadConfigLocked());
  if (!factory_) return absl::FailedPreconditionError("no device backend factory is installed");
  absl::StatusOr<std::unique_ptr<DeviceBackend>> backend = factory_(device);
  if (!backend.ok()) {
    return absl::Status(
        backend.status().code(),
        absl::StrFormat("cannot open device %d: %s", device, backend.status().message()));
  }
  auto entry = std::make_unique<Device>();
  entry->backend = *std::move(backend);
  entry->allocator = std::make_unique<CachingAllocator>(*entry->backend, config_->options);
  entry->log = logs_->GetOrOpen(device, [&] {
    FslogHeaderInfo info;
    info.device_name = entry->backend->name();
    const DeviceMemInfo memory = entry->backend->MemInfo();
    info.device_total_bytes = memory.total_bytes;
    info.device_free_bytes = memory.free_bytes;  // the allocator is new: it reserves nothing yet
    info.device_index = device;
    info.allocator_options = FormatAllocatorOptions(config_->options);
    return info;
  });
  if (entry->log != nullptr) entry->allocator->AddObserver(entry->log);
  owned_[index] = std::move(entry);
  allocators_[index].store(owned_[index]->allocator.get(), std::memory_order_release);
  return owned_[index]->allocator.get();
}

}  // namespace fragscope::hooks
