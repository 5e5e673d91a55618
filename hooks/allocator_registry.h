// AllocatorRegistry: the per-device CachingAllocators of a process, created on first use.
//
// The pluggable allocator (libfragscope_alloc.so) and the interposer's cache mode
// (libfragscope_preload.so) both serve a whole process from one registry: device d gets a
// DeviceBackend from the factory, a CachingAllocator configured by HookConfig, and, when a log
// pattern is set, an FslogWriter observing it (DeviceLogs).
//
// Creation is lazy and thread-safe: the fast path is one atomic load; the first use of a device
// takes the registry mutex (never an allocator's lock), creates the backend, allocator and log,
// then publishes them. Entries are never removed while the registry lives; the hooks' registries
// are never destroyed (Note [Nothing after exit began] in process_exit.h).
//
// Configuration errors are sticky: once LoadHookConfig failed, Get() returns that error for every
// device (the hooks print it on stderr). A job never runs under a configuration other than the one
// it asked for.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/caching_allocator.h"
#include "allocator/device_backend.h"
#include "allocator/mutex.h"
#include "hooks/device_logs.h"
#include "hooks/hook_config.h"

namespace fragscope::hooks {

// Makes the backend of one device. Called at most once per device, under the registry mutex.
using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<DeviceBackend>>(int device)>;

class AllocatorRegistry {
 public:
  explicit AllocatorRegistry(BackendFactory factory);
  // Destroys allocators before their logs. REQUIRES: no allocator is in use.
  ~AllocatorRegistry();
  AllocatorRegistry(const AllocatorRegistry&) = delete;
  AllocatorRegistry& operator=(const AllocatorRegistry&) = delete;

  // Sets the configuration instead of reading the environment (nullopt = that variable).
  // kFailedPrecondition once a device allocator exists; kInvalidArgument for a bad value (which
  // then also becomes the sticky error).
  absl::Status Configure(std::optional<std::string_view> conf,
                         std::optional<std::string_view> log_pattern);

  // Replaces the backend factory. kFailedPrecondition once a device allocator exists.
  absl::Status SetBackendFactory(BackendFactory factory);

  // The allocator of `device`, created on first use. Errors: the sticky configuration error,
  // kInvalidArgument for a device outside [0, kMaxDevices), the factory's error.
  absl::StatusOr<CachingAllocator*> Get(int device);
  // The allocator of `device` if it exists, else nullptr. One atomic load.
  CachingAllocator* Find(int device) const;

  // The options allocators are (or will be) created with; loads the configuration if needed.
  absl::StatusOr<AllocatorOptions> Options();

  // The per-device logs (loads the configuration if needed); nullptr when it is invalid.
  DeviceLogs* logs() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Device {
    std::unique_ptr<DeviceBackend> backend;
    std::unique_ptr<CachingAllocator> allocator;
    FslogWriter* log = nullptr;  // owned by logs_
  };

  absl::Status LoadConfigLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnyDeviceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  BackendFactory factory_ ABSL_GUARDED_BY(mu_);
  std::optional<HookConfig> config_ ABSL_GUARDED_BY(mu_);
  absl::Status config_error_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<DeviceLogs> logs_ ABSL_GUARDED_BY(mu_);
  std::array<std::unique_ptr<Device>, kMaxDevices> owned_ ABSL_GUARDED_BY(mu_);
  std::array<std::atomic<CachingAllocator*>, kMaxDevices> allocators_{};
};

}  // namespace fragscope::hooks
