// The C++ side of libfragscope_alloc.so: the process-wide registry behind the C ABI of
// fragscope_alloc.h, and the entry points that choose its device backend.
//
// Production jobs never call these: the C ABI creates a CudaBackend per device on first use. Tests
// (and tools that want a fake device) install another factory, e.g. SimulatedBackend, before the
// first allocation, then drive the unchanged C ABI.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "hooks/allocator_registry.h"

namespace fragscope::hooks {

// The registry behind the C ABI (created on first use), pinned while this object lives:
// fragscope_simulate replaces the registry, but destroys the old one only once no pin names it
// (Note [Replacing the registry] in pluggable_allocator.cc). Every C ABI call that reads the
// registry holds one pin for its whole duration and keeps no pointer into it afterwards. A pin
// made while the thread already holds one names the same registry as the outer one.
class RegistryPin {
 public:
  RegistryPin();
  ~RegistryPin() {
    if (slot_ != nullptr) slot_->store(nullptr, std::memory_order_release);
  }
  RegistryPin(const RegistryPin&) = delete;
  RegistryPin& operator=(const RegistryPin&) = delete;

  AllocatorRegistry& operator*() const { return *registry_; }
  AllocatorRegistry* operator->() const { return registry_; }

 private:
  AllocatorRegistry* registry_;
  std::atomic<AllocatorRegistry*>* slot_;  // this thread's hazard slot; null for a nested pin
};

// The default backend factory: a SimulatedBackend of that capacity when the environment variable
// FRAGSCOPE_SIMULATED_DEVICE_BYTES is set (a dry run: the pointers are not device memory and must
// never be dereferenced), else CudaBackend::Create (an error when built without CUDA).
BackendFactory DefaultBackendFactory();

// Installs the factory for the C ABI's devices. kFailedPrecondition once any allocation happened.
absl::Status SetPluggableBackendFactory(BackendFactory factory);

// fragscope_simulate: replaces the registry with a fresh one whose devices are SimulatedBackends
// of `device_bytes` each, configured as by Configure. Calls already inside the old registry on
// other threads finish there; then the old registry is destroyed, its logs flushed and closed,
// before this returns. Its pointers are forgotten: one freed afterwards reaches the fresh
// registry (Note [Pointers of a replaced registry]).
// kFailedPrecondition when the current registry allocates on a real device, or when this thread
// is itself inside a C ABI call (it would wait for itself); kInvalidArgument for a size outside
// 2 MiB..4 TiB or a bad conf.
absl::Status SimulatePluggableDevices(uint64_t device_bytes, std::optional<std::string_view> conf,
                                      std::optional<std::string_view> log_pattern);

// Note [Pointers of a replaced registry]
// A pointer the replaced registry handed out and freed afterwards reaches the fresh registry. When
// no fresh block starts there, the free is reported as not a fragscope allocation
// (fragscope_last_error, a rate-limited line on stderr) and changes nothing. But simulated devices
// place segments deterministically, so the fresh registry may hold a block at that very address,
// and the free then releases it: the fresh job's accounting goes wrong silently. Nothing in
// fragscope_free's arguments (pointer, size, device, stream) tells the two apart, so the caller
// drops frees of a replaced registry's pointers (the predictor's capture session counts
// generations); RegistryPin only makes such a free, racing fragscope_simulate, memory-safe.

// Private pools of `device`'s allocator (pluggable_pools.cc), behind the C ABI's
// fragscope_begin_allocate_to_pool, fragscope_end_allocate_to_pool and fragscope_release_pool,
// which pass a filter accepting one stream; a caller with PyTorch's own filter (the streams
// capturing into the graph) can pass that. Begin creates the device's allocator if needed; end
// and release on a device without one are kFailedPrecondition. Otherwise the allocator's
// statuses (CachingAllocator::BeginAllocateToPool and the rest).
absl::Status BeginAllocateToPool(int device, PoolId pool, CachingAllocator::StreamFilter filter);
absl::Status EndAllocateToPool(int device, PoolId pool);
absl::Status ReleasePool(int device, PoolId pool);

// Tests only: forgets every allocator, log and configuration (the environment is read again on the
// next call) and installs `factory` (empty = DefaultBackendFactory()).
// Waits, as SimulatePluggableDevices does, for the calls inside the old registry.
// REQUIRES: no pointer from fragscope_malloc is live; this thread is not inside a C ABI call.
void ResetPluggableAllocatorForTesting(BackendFactory factory = nullptr);

// Records `message` as this thread's fragscope_last_error().
void SetLastError(std::string message);

}  // namespace fragscope::hooks
