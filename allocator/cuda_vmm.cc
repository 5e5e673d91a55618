#include "allocator/cuda_vmm.h"

#include <cuda.h>  // types and enums only: the functions are reached through DriverApi
#include <cuda_runtime_api.h>

#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "allocator/check.h"

#if CUDART_VERSION < 12000
#error "fragscope's CUDA backend needs CUDA 12 or newer (driver entry points by version)"
#endif

namespace fragscope {
namespace {

// The driver functions CudaVirtualMemory calls, looked up through the runtime so that nothing
// links against libcuda.so. Null members are listed in `missing`.
struct DriverApi {
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) mem_get_allocation_granularity = nullptr;
  decltype(&::cuMemAddressReserve) mem_address_reserve = nullptr;
  decltype(&::cuMemAddressFree) mem_address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  std::string missing;  // names not found, comma-separated; empty when all were found
};

// The ABI version asked for. None of the functions above changed signature since CUDA 10.2 (the
// virtual memory API), and 12.0 is the oldest driver a CUDA 12 or 13 runtime runs on. Asking for
// a version newer than the driver fails, so this must not be CUDART_VERSION.
constexpr unsigned int kDriverApiVersion = 12000;

template <typename Fn>
void Lookup(const char* name, Fn& fn, std::string& missing) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &address, kDriverApiVersion,
                                                         cudaEnableDefault, &found);
#else
  const cudaError_t e = cudaGetDriverEntryPoint(name, &address, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    (void)cudaGetLastError();
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
    return;
  }
  fn = reinterpret_cast<Fn>(address);
}

DriverApi LoadDriverApi() {
  DriverApi api;
  Lookup("cuGetErrorName", api.get_error_name, api.missing);
  Lookup("cuDeviceGet", api.device_get, api.missing);
  Lookup("cuDeviceGetAttribute", api.device_get_attribute, api.missing);
  Lookup("cuMemGetAllocationGranularity", api.mem_get_allocation_granularity, api.missing);
  Lookup("cuMemAddressReserve", api.mem_address_reserve, api.missing);
  Lookup("cuMemAddressFree", api.mem_address_free, api.missing);
  Lookup("cuMemCreate", api.mem_create, api.missing);
  Lookup("cuMemRelease", api.mem_release, api.missing);
  Lookup("cuMemMap", api.mem_map, api.missing);
  Lookup("cuMemUnmap", api.mem_unmap, api.missing);
  Lookup("cuMemSetAccess", api.mem_set_access, api.missing);
  return api;
}

// Never destroyed: backends may be destroyed during static destruction.
const DriverApi& Driver() {
  static const DriverApi* const api = new DriverApi(LoadDriverApi());
  return *api;
}

// `call failed: CUDA_ERROR_X (n) context`; CUDA_ERROR_OUT_OF_MEMORY is kResourceExhausted.
absl::Status DriverError(const char* call, CUresult result, absl::string_view context = {}) {
  const char* name = nullptr;
  if (Driver().get_error_name == nullptr ||
      Driver().get_error_name(result, &name) != CUDA_SUCCESS || name == nullptr) {
    name = "unknown CUresult";
  }
  std::string message = absl::StrFormat("%s failed: %s (%d)", call, name, static_cast<int>(result));
  if (!context.empty()) absl::StrAppend(&message, " ", context);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// A pinned allocation on `device` with no shareable handle type (as PyTorch without IPC).
CUmemAllocationProp PinnedDeviceProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

// The size rules MapPages and UnmapPages share: page_bytes a positive multiple of the
// granularity, bytes a positive multiple of page_bytes.
absl::Status CheckPageSizes(const char* call, DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                            uint64_t granularity_bytes) {
  if (page_bytes == 0 || page_bytes % granularity_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s at %#x: page size %d is not a positive multiple of the page granularity (%d bytes)",
        call, ptr, page_bytes, granularity_bytes));
  }
  if (bytes == 0 || bytes % page_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s at %#x: %d bytes is not a positive multiple of the page size (%d)",
                        call, ptr, bytes, page_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<CudaVirtualMemory> CudaVirtualMemory::Create(int device, std::string device_name) {
  std::unique_ptr<CudaVirtualMemory> vmm(new CudaVirtualMemory(device, std::move(device_name)));
  const DriverApi& driver = Driver();
  if (!driver.missing.empty()) {
    vmm->unsupported_reason_ = "the CUDA driver does not provide " + driver.missing;
    return vmm;
  }
  CUdevice cu_device = 0;
  if (CUresult r = driver.device_get(&cu_device, device); r != CUDA_SUCCESS) {
    vmm->unsupported_reason_ = std::string(DriverError("cuDeviceGet", r).message());
    return vmm;
  }
  int vmm_supported = 0;
  if (CUresult r = driver.device_get_attribute(
          &vmm_supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu_device);
      r != CUDA_SUCCESS) {
    vmm->unsupported_reason_ = std::string(DriverError("cuDeviceGetAttribute", r).message());
    return vmm;
  }
  if (vmm_supported == 0) {
    vmm->unsupported_reason_ = "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0";
    return vmm;
  }
  const CUmemAllocationProp prop = PinnedDeviceProp(device);
  size_t granularity = 0;
  if (CUresult r = driver.mem_get_allocation_granularity(&granularity, &prop,
                                                         CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS || granularity == 0) {
    vmm->unsupported_reason_ =
        r != CUDA_SUCCESS ? std::string(DriverError("cuMemGetAllocationGranularity", r).message())
                          : "cuMemGetAllocationGranularity returned 0";
    return vmm;
  }
  vmm->granularity_bytes_ = granularity;
  vmm->supported_ = true;
  return vmm;
}

CudaVirtualMemory::~CudaVirtualMemory() {
  if (pages_.empty() && reservations_.empty()) return;
  const DriverApi& driver = Driver();
  // The pages may still be in use by queued work on any stream of the device.
  if (!pages_.empty()) (void)cudaDeviceSynchronize();
  for (const auto& [address, page] : pages_) {
    (void)driver.mem_unmap(address, page.bytes);
    (void)driver.mem_release(page.handle);
  }
  for (const auto& [base, bytes] : reservations_) (void)driver.mem_address_free(base, bytes);
  (void)cudaGetLastError();
}

absl::Status CudaVirtualMemory::Unsupported() const {
  return absl::UnimplementedError(absl::StrFormat(
      "%s (CUDA device %d) has no virtual memory support (expandable segments need it): %s",
      device_name_, device_, unsupported_reason_));
}

std::map<DevicePtr, uint64_t>::const_iterator CudaVirtualMemory::FindReservation(
    DevicePtr ptr, uint64_t bytes) const {
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin()) return reservations_.end();
  --it;  // the last reservation starting at or before ptr
  const uint64_t offset = ptr - it->first;
  if (offset < it->second && bytes <= it->second - offset) return it;
  return reservations_.end();
}

std::map<DevicePtr, CudaVirtualMemory::Page>::const_iterator CudaVirtualMemory::FirstPageIn(
    DevicePtr ptr, uint64_t bytes) const {
  auto it = pages_.lower_bound(ptr);
  if (it != pages_.begin()) {
    auto before = std::prev(it);
    if (before->second.bytes > ptr - before->first) return before;  // reaches into the range
  }
  if (it != pages_.end() && it->first - ptr < bytes) return it;
  return pages_.end();
}

absl::StatusOr<DevicePtr> CudaVirtualMemory::ReserveAddressRange(uint64_t bytes) {
  if (!supported_) return Unsupported();
  if (bytes == 0 || bytes % granularity_bytes_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ReserveAddressRange: %d bytes is not a positive multiple of the page granularity (%d)",
        bytes, granularity_bytes_));
  }
  CUdeviceptr base = 0;
  if (CUresult r = Driver().mem_address_reserve(&base, bytes, granularity_bytes_, 0, 0);
      r != CUDA_SUCCESS) {
    return DriverError("cuMemAddressReserve", r, absl::StrFormat("(reserving %d bytes)", bytes));
  }
  reservations_.emplace(base, bytes);
  return static_cast<DevicePtr>(base);
}

absl::Status CudaVirtualMemory::MapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes) {
  if (!supported_) return Unsupported();
  FRAGSCOPE_RETURN_IF_ERROR(CheckPageSizes("MapPages", ptr, bytes, page_bytes, granularity_bytes_));
  const auto reservation = FindReservation(ptr, bytes);
  if (reservation == reservations_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MapPages: [%#x, %#x) is not inside a reserved address range", ptr, ptr + bytes));
  }
  if ((ptr - reservation->first) % page_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MapPages: %#x is not a multiple of the page size (%d bytes) from its reservation's "
        "base %#x",
        ptr, page_bytes, reservation->first));
  }
  if (const auto page = FirstPageIn(ptr, bytes); page != pages_.end()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("MapPages: the page at %#x (%d bytes) is already mapped, in [%#x, %#x)",
                        page->first, page->second.bytes, ptr, ptr + bytes));
  }

  const DriverApi& driver = Driver();
  const CUmemAllocationProp prop = PinnedDeviceProp(device_);
  const uint64_t page_count = bytes / page_bytes;
  const auto context = [&](uint64_t done) {
    return absl::StrFormat("(mapping [%#x, %#x) in %d pages of %d bytes; %d were mapped)", ptr,
                           ptr + bytes, page_count, page_bytes, done);
  };
  std::vector<CUmemGenericAllocationHandle> mapped;  // created and mapped by this call
  mapped.reserve(page_count);
  absl::Status failure;
  for (uint64_t i = 0; i < page_count; ++i) {
    CUmemGenericAllocationHandle handle = 0;
    if (CUresult r = driver.mem_create(&handle, page_bytes, &prop, 0); r != CUDA_SUCCESS) {
      failure = DriverError("cuMemCreate", r, context(i));
      break;
    }
    if (CUresult r = driver.mem_map(ptr + i * page_bytes, page_bytes, 0, handle, 0);
        r != CUDA_SUCCESS) {
      (void)driver.mem_release(handle);
      failure = DriverError("cuMemMap", r, context(i));
      break;
    }
    mapped.push_back(handle);
  }
  if (failure.ok()) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (CUresult r = driver.mem_set_access(ptr, bytes, &access, 1); r != CUDA_SUCCESS) {
      failure = DriverError("cuMemSetAccess", r, context(page_count));
    }
  }
  if (!failure.ok()) {
    // All or nothing: undo this call's pages. Nothing has used them, so no synchronization.
    for (uint64_t i = 0; i < mapped.size(); ++i) {
      (void)driver.mem_unmap(ptr + i * page_bytes, page_bytes);
      (void)driver.mem_release(mapped[i]);
    }
    return failure;
  }
  for (uint64_t i = 0; i < page_count; ++i) {
    pages_.emplace(ptr + i * page_bytes, Page{mapped[i], page_bytes});
  }
  mapped_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status CudaVirtualMemory::UnmapPages(DevicePtr ptr, uint64_t bytes, uint64_t page_bytes,
                                           StreamId stream) {
  if (!supported_) return Unsupported();
  FRAGSCOPE_RETURN_IF_ERROR(
      CheckPageSizes("UnmapPages", ptr, bytes, page_bytes, granularity_bytes_));
  for (uint64_t offset = 0; offset < bytes; offset += page_bytes) {
    const auto page = pages_.find(ptr + offset);
    if (page == pages_.end() || page->second.bytes != page_bytes) {
      return absl::FailedPreconditionError(
          absl::StrFormat("UnmapPages: no page of %d bytes is mapped at %#x (unmapping [%#x, %#x))",
                          page_bytes, ptr + offset, ptr, ptr + bytes));
    }
  }
  // cuMemUnmap and cuMemRelease do not wait for queued work (PyTorch's unmapHandles).
  if (cudaError_t e = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
      e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InternalError(
        absl::StrFormat("cudaStreamSynchronize failed: %s (%s), before unmapping [%#x, %#x)",
                        cudaGetErrorName(e), cudaGetErrorString(e), ptr, ptr + bytes));
  }
  const DriverApi& driver = Driver();
  for (uint64_t offset = 0; offset < bytes; offset += page_bytes) {
    const auto page = pages_.find(ptr + offset);
    const auto context =
        absl::StrFormat("(page at %#x; the pages before it in [%#x, %#x) were unmapped)",
                        ptr + offset, ptr, ptr + bytes);
    if (CUresult r = driver.mem_unmap(ptr + offset, page_bytes); r != CUDA_SUCCESS) {
      return DriverError("cuMemUnmap", r, context);
    }
    const CUmemGenericAllocationHandle handle = page->second.handle;
    pages_.erase(page);
    mapped_bytes_ -= page_bytes;
    if (CUresult r = driver.mem_release(handle); r != CUDA_SUCCESS) {
      return DriverError("cuMemRelease", r, context);
    }
  }
  return absl::OkStatus();
}

absl::Status CudaVirtualMemory::ReleaseAddressRange(DevicePtr base, uint64_t bytes) {
  if (!supported_) return Unsupported();
  const auto reservation = reservations_.find(base);
  if (reservation == reservations_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ReleaseAddressRange: %#x is not the base of a reserved address range", base));
  }
  if (reservation->second != bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ReleaseAddressRange: the reservation at %#x has %d bytes, not %d", base,
                        reservation->second, bytes));
  }
  if (const auto page = FirstPageIn(base, bytes); page != pages_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "ReleaseAddressRange: the page at %#x (%d bytes) of the reservation at %#x is still "
        "mapped",
        page->first, page->second.bytes, base));
  }
  if (CUresult r = Driver().mem_address_free(base, bytes); r != CUDA_SUCCESS) {
    return DriverError("cuMemAddressFree", r, absl::StrFormat("(the reservation at %#x)", base));
  }
  reservations_.erase(reservation);
  return absl::OkStatus();
}

}  // namespace fragscope
