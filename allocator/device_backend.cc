// The defaults of DeviceBackend's virtual-memory calls: a backend without virtual memory.
#include "allocator/device_backend.h"

namespace fragscope {
namespace {

absl::Status NoVirtualMemory(const DeviceBackend& backend) {
  return absl::UnimplementedError(backend.name() +
                                  " has no virtual memory support (expandable segments need it)");
}

}  // namespace

absl::StatusOr<DevicePtr> DeviceBackend::ReserveAddressRange(uint64_t) {
  return NoVirtualMemory(*this);
}
absl::Status DeviceBackend::MapPages(DevicePtr, uint64_t, uint64_t) {
  return NoVirtualMemory(*this);
}
absl::Status DeviceBackend::UnmapPages(DevicePtr, uint64_t, uint64_t, StreamId) {
  return NoVirtualMemory(*this);
}
absl::Status DeviceBackend::ReleaseAddressRange(DevicePtr, uint64_t) {
  return NoVirtualMemory(*this);
}

}  // namespace fragscope
