#include "hooks/real_cuda.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_format.h"

namespace fragscope::hooks {
namespace {

std::atomic<const RealCuda*> g_real{nullptr};
std::mutex g_resolve_mu;

// Path of a loaded object whose file name starts with "libcudart.so", or "".
int FindCudart(struct dl_phdr_info* info, size_t /*size*/, void* data) {
  const char* path = info->dlpi_name;
  if (path == nullptr || *path == '\0') return 0;
  const char* slash = std::strrchr(path, '/');
  const char* name = slash != nullptr ? slash + 1 : path;
  if (std::strncmp(name, "libcudart.so", 12) != 0) return 0;
  *static_cast<std::string*>(data) = path;
  return 1;
}

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* out) {
  void* symbol = handle != nullptr ? dlsym(handle, name) : dlsym(RTLD_NEXT, name);
  *out = reinterpret_cast<Fn>(symbol);
}

void ResolveAll(void* handle, RealCuda* cuda) {
  Resolve(handle, "cudaMalloc", &cuda->malloc);
  Resolve(handle, "cudaFree", &cuda->free);
  Resolve(handle, "cudaMallocAsync", &cuda->malloc_async);
  Resolve(handle, "cudaFreeAsync", &cuda->free_async);
  Resolve(handle, "cudaMallocAsync_ptsz", &cuda->malloc_async_ptsz);
  Resolve(handle, "cudaFreeAsync_ptsz", &cuda->free_async_ptsz);
  Resolve(handle, "cudaMemGetInfo", &cuda->mem_get_info);
  Resolve(handle, "cudaGetDevice", &cuda->get_device);
  Resolve(handle, "cudaSetDevice", &cuda->set_device);
  Resolve(handle, "cudaDeviceSynchronize", &cuda->device_synchronize);
  Resolve(handle, "cudaGetLastError", &cuda->get_last_error);
  Resolve(handle, "cudaGetErrorName", &cuda->get_error_name);
  Resolve(handle, "cudaGetDeviceProperties_v2", &cuda->get_device_properties);
  if (cuda->get_device_properties == nullptr) {
    Resolve(handle, "cudaGetDeviceProperties", &cuda->get_device_properties);
  }
  Resolve(handle, "cudaEventCreateWithFlags", &cuda->event_create_with_flags);
  Resolve(handle, "cudaEventRecord", &cuda->event_record);
  Resolve(handle, "cudaEventQuery", &cuda->event_query);
  Resolve(handle, "cudaEventSynchronize", &cuda->event_synchronize);
  Resolve(handle, "cudaEventDestroy", &cuda->event_destroy);
}

}  // namespace

bool RealCuda::CanCache() const {
  return CanObserve() && mem_get_info != nullptr && get_device != nullptr &&
         set_device != nullptr && device_synchronize != nullptr && get_last_error != nullptr &&
         event_create_with_flags != nullptr && event_record != nullptr && event_query != nullptr &&
         event_synchronize != nullptr && event_destroy != nullptr;
}

const RealCuda* ResolveRealCuda() {
  if (const RealCuda* real = g_real.load(std::memory_order_acquire)) return real;
  std::lock_guard<std::mutex> lock(g_resolve_mu);
  if (const RealCuda* real = g_real.load(std::memory_order_acquire)) return real;
  RealCuda cuda;
  ResolveAll(nullptr, &cuda);
  if (!cuda.CanObserve()) {
    std::string path;
    dl_iterate_phdr(FindCudart, &path);
    if (!path.empty()) {
      if (void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
        cuda = RealCuda{};
        ResolveAll(handle, &cuda);  // the handle stays open: the library is in use anyway
      }
    }
  }
  if (!cuda.CanObserve()) return nullptr;
  const RealCuda* resolved = new RealCuda(cuda);  // never freed: hooks run until the very end
  g_real.store(resolved, std::memory_order_release);
  return resolved;
}

CudaRuntimeTable RealCudaTable(const RealCuda& cuda) {
  CudaRuntimeTable table;
  table.get_device = cuda.get_device;
  table.set_device = cuda.set_device;
  table.malloc = cuda.malloc;
  table.free = cuda.free;
  table.mem_get_info = cuda.mem_get_info;
  table.get_last_error = cuda.get_last_error;
  table.event_create_with_flags = cuda.event_create_with_flags;
  table.event_record = cuda.event_record;
  table.event_query = cuda.event_query;
  table.event_synchronize = cuda.event_synchronize;
  table.event_destroy = cuda.event_destroy;
  table.get_error_name = cuda.get_error_name;
  return table;
}

std::string RealDeviceName(const RealCuda& cuda, int device) {
  if (cuda.get_device_properties != nullptr) {
    // cudaDeviceProp is about 1 KiB in CUDA 12-13; the buffer leaves room for growth. Only the
    // name (offset 0, char[256]) is read.
    auto prop = std::make_unique<char[]>(16384);
    if (cuda.get_device_properties(prop.get(), device) == kCudaSuccess) {
      prop[255] = '\0';
      if (prop[0] != '\0') return std::string(prop.get());
    } else if (cuda.get_last_error != nullptr) {
      cuda.get_last_error();
    }
  }
  return absl::StrFormat("CUDA device %d", device);
}

}  // namespace fragscope::hooks
