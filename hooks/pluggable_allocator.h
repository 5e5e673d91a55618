// The C++ side of libfragscope_alloc.so: the process-wide registry behind the C ABI of
// fragscope_alloc.h, and the entry points that choose its device backend.
//
// Production jobs never call these: the C ABI creates a CudaBackend per device on first use. Tests
// (and tools that want a fake device) install another factory, e.g. SimulatedBackend, before the
// first allocation, then drive the unchanged C ABI.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "hooks/allocator_registry.h"

namespace fragscope::hooks {

// The registry behind the C ABI; created on first use, never destroyed.
AllocatorRegistry& PluggableRegistry();

// The default backend factory: a SimulatedBackend of that capacity when the environment variable
// FRAGSCOPE_SIMULATED_DEVICE_BYTES is set (a dry run: the pointers are not device memory and must
// never be dereferenced), else CudaBackend::Create (an error when built without CUDA).
BackendFactory DefaultBackendFactory();

// Installs the factory for the C ABI's devices. kFailedPrecondition once any allocation happened.
absl::Status SetPluggableBackendFactory(BackendFactory factory);

// fragscope_simulate: replaces the registry with a fresh one whose devices are SimulatedBackends
// of `device_bytes` each, configured as by Configure (the old registry's logs are flushed and
// closed; its pointers are forgotten). kFailedPrecondition when the current registry allocates on
// a real device; kInvalidArgument for a size outside 2 MiB..4 TiB or a bad conf.
// REQUIRES: no other thread inside the C ABI.
absl::Status SimulatePluggableDevices(uint64_t device_bytes, std::optional<std::string_view> conf,
                                      std::optional<std::string_view> log_pattern);

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
// REQUIRES: no pointer from fragscope_malloc is live and no other thread is inside the C ABI.
void ResetPluggableAllocatorForTesting(BackendFactory factory = nullptr);

// Records `message` as this thread's fragscope_last_error().
void SetLastError(std::string message);

}  // namespace fragscope::hooks
