// A stub CUDA runtime for the interposer tests: the handful of cudart functions
// libfragscope_preload.so interposes or calls, backed by host memory, with call counters.
//
// It is built as libfragscope_stub_cudart.so with the symbol version node of the real runtime
// (stub_cudart.map: "libcudart.so.13"), so a program linked against it makes the same versioned
// references (cudaMalloc@libcudart.so.13) a PyTorch wheel makes, and the tests prove that an
// unversioned interposer still binds them.
//
// Two devices; capacity per device from STUB_CUDART_CAPACITY_BYTES (default 256 MiB). Events are
// complete as soon as they are recorded. cudaMallocAsync is implemented by calling cudaMalloc by
// name, through the PLT: under the interposer that call re-enters libfragscope_preload.so, which
// is how the tests see the re-entrancy guard work.
#include "tests/hooks/stub_cudart.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace {

constexpr int kDevices = 2;
constexpr size_t kAlignment = 256;

std::mutex g_mu;
std::map<uintptr_t, std::pair<size_t, int>> g_live;  // ptr -> (bytes, device)
size_t g_used[kDevices] = {};
StubCudartCounters g_counters;
thread_local int t_device = 0;
thread_local int t_last_error = 0;

size_t Capacity() {
  static const size_t capacity = [] {
    const char* env = std::getenv("STUB_CUDART_CAPACITY_BYTES");
    return env != nullptr ? static_cast<size_t>(std::strtoull(env, nullptr, 10))
                          : size_t{256} << 20;
  }();
  return capacity;
}

int Fail(int error) {
  t_last_error = error;
  return error;
}

}  // namespace

extern "C" {

int cudaMalloc(void** ptr, size_t size) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_counters.malloc_calls;
  if (ptr == nullptr) return Fail(1);  // cudaErrorInvalidValue
  *ptr = nullptr;
  if (size == 0) return 0;
  const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (g_used[t_device] + rounded > Capacity()) return Fail(2);  // cudaErrorMemoryAllocation
  void* memory = std::aligned_alloc(kAlignment, rounded);
  if (memory == nullptr) return Fail(2);
  g_live[reinterpret_cast<uintptr_t>(memory)] = {rounded, t_device};
  g_used[t_device] += rounded;
  g_counters.live_bytes += rounded;
  *ptr = memory;
  return 0;
}

int cudaFree(void* ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_counters.free_calls;
  if (ptr == nullptr) return 0;
  auto it = g_live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_live.end()) return Fail(1);
  g_used[it->second.second] -= it->second.first;
  g_counters.live_bytes -= it->second.first;
  g_live.erase(it);
  std::free(ptr);
  return 0;
}

int cudaMallocAsync(void** ptr, size_t size, void* /*stream*/) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_counters.malloc_async_calls;
  }
  return cudaMalloc(ptr, size);  // by name: through the PLT, see the file comment
}

int cudaFreeAsync(void* ptr, void* /*stream*/) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_counters.free_async_calls;
  }
  return cudaFree(ptr);
}

int cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  *free_bytes = Capacity() - g_used[t_device];
  *total_bytes = Capacity();
  return 0;
}

int cudaGetDevice(int* device) {
  *device = t_device;
  return 0;
}

int cudaSetDevice(int device) {
  if (device < 0 || device >= kDevices) return Fail(101);  // cudaErrorInvalidDevice
  t_device = device;
  return 0;
}

int cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return 0;
}

int cudaDeviceSynchronize(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_counters.device_synchronize_calls;
  return 0;
}

int cudaGetLastError(void) {
  const int error = t_last_error;
  t_last_error = 0;
  return error;
}

const char* cudaGetErrorName(int error) {
  switch (error) {
    case 0:
      return "cudaSuccess";
    case 1:
      return "cudaErrorInvalidValue";
    case 2:
      return "cudaErrorMemoryAllocation";
    default:
      return "cudaErrorUnknown";
  }
}

// Only the name (the first field of cudaDeviceProp) is filled.
int cudaGetDeviceProperties_v2(void* prop, int device) {
  std::memset(prop, 0, 256);
  std::strcpy(static_cast<char*>(prop), device == 0 ? "Stub GPU 0" : "Stub GPU 1");
  return 0;
}

int cudaEventCreateWithFlags(void** event, unsigned /*flags*/) {
  *event = std::malloc(1);
  return 0;
}
int cudaEventRecord(void* /*event*/, void* /*stream*/) { return 0; }
int cudaEventQuery(void* /*event*/) { return 0; }
int cudaEventSynchronize(void* /*event*/) { return 0; }
int cudaEventDestroy(void* event) {
  std::free(event);
  return 0;
}

void stub_cudart_counters(StubCudartCounters* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  *out = g_counters;
}

}  // extern "C"
