// libfragscope_alloc.so: the allocation half of the C ABI (fragscope_alloc.h); the registry behind
// it is in pluggable_registry.cc.
//
// Every extern "C" function catches everything: no exception ever crosses the C ABI (an exception
// unwinding into PyTorch's C caller would terminate the job). Failures become NULL / no-ops plus a
// message: this thread's fragscope_last_error() and, rate-limited, a line on stderr, because a
// pluggable allocator has no other way to tell the user.
#include "hooks/pluggable_allocator.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "allocator/alloc_conf_env.h"
#include "allocator/oom_report.h"
#include "allocator/simulated_backend.h"
#include "hooks/fragscope_alloc.h"
#include "hooks/hook_config.h"
#include "hooks/pluggable_internal.h"
#include "hooks/process_exit.h"

#ifdef FRAGSCOPE_HOOKS_WITH_CUDA
#include "allocator/cuda_backend.h"
#endif

namespace fragscope::hooks {
namespace {

thread_local std::string t_last_error;

// Error lines printed so far; after kMaxErrorLines only one "suppressed" line follows.
constexpr int kMaxErrorLines = 8;
constexpr int kMaxOomLines = 100;
std::atomic<int> g_error_lines{0};
std::atomic<int> g_oom_lines{0};

}  // namespace

void SetLastError(std::string message) { t_last_error = std::move(message); }

void ReportError(const std::string& message) {
  SetLastError(message);
  const int line = g_error_lines.fetch_add(1, std::memory_order_relaxed);
  if (line < kMaxErrorLines) {
    std::fprintf(stderr, "fragscope: %s\n", message.c_str());
  } else if (line == kMaxErrorLines) {
    std::fprintf(stderr, "fragscope: further errors are not printed (fragscope_last_error())\n");
  }
}

void ReportException(const char* function) {
  try {
    throw;
  } catch (const std::exception& e) {
    ReportError(absl::StrFormat("%s: internal error: %s", function, e.what()));
  } catch (...) {
    ReportError(absl::StrFormat("%s: internal error: unknown exception", function));
  }
}

BackendFactory DefaultBackendFactory() {
  return [](int device) -> absl::StatusOr<std::unique_ptr<DeviceBackend>> {
    if (std::optional<std::string> bytes = ProcessEnv("FRAGSCOPE_SIMULATED_DEVICE_BYTES")) {
      uint64_t capacity = 0;
      if (!absl::SimpleAtoi(*bytes, &capacity) || capacity == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "FRAGSCOPE_SIMULATED_DEVICE_BYTES=\"%s\" is not a positive byte count", *bytes));
      }
      return std::make_unique<SimulatedBackend>(capacity, device, AddressOrder::kHighestFirst);
    }
#ifdef FRAGSCOPE_HOOKS_WITH_CUDA
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(device);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<DeviceBackend>(*std::move(backend));
#else
    return absl::FailedPreconditionError(
        "libfragscope_alloc.so was built without CUDA (set FRAGSCOPE_SIMULATED_DEVICE_BYTES for "
        "a simulated device)");
#endif
  };
}

void ResetErrorReportingForTesting() {
  g_error_lines.store(0);
  g_oom_lines.store(0);
  t_last_error.clear();
}

}  // namespace fragscope::hooks

using fragscope::hooks::RegistryPin;
using fragscope::hooks::ReportError;
using fragscope::hooks::ReportException;

extern "C" {

void* fragscope_malloc(size_t size, int device, cudaStream_t stream) {
  try {
    if (size == 0 || fragscope::hooks::ProcessIsExiting()) return nullptr;
    const RegistryPin registry;
    absl::StatusOr<fragscope::CachingAllocator*> allocator = registry->Get(device);
    if (!allocator.ok()) {
      ReportError(absl::StrFormat("fragscope_malloc(%u bytes, device %d): %s", size, device,
                                  allocator.status().message()));
      return nullptr;
    }
    absl::StatusOr<fragscope::DevicePtr> ptr =
        (*allocator)->Allocate(size, reinterpret_cast<fragscope::StreamId>(stream));
    if (ptr.ok()) return reinterpret_cast<void*>(*ptr);
    if (fragscope::GetOomReport(ptr.status()).has_value()) {
      const std::string message(ptr.status().message());
      fragscope::hooks::SetLastError(message);
      if (fragscope::hooks::g_oom_lines.fetch_add(1, std::memory_order_relaxed) <
          fragscope::hooks::kMaxOomLines) {
        std::fprintf(stderr,
                     "fragscope: CUDA out of memory on device %d; fragscope_malloc returns NULL "
                     "(a pluggable allocator cannot raise: expect an illegal memory access next)\n"
                     "%s\n",
                     device, message.c_str());
      }
      return nullptr;
    }
    ReportError(absl::StrFormat("fragscope_malloc(%u bytes, device %d): %s", size, device,
                                ptr.status().message()));
  } catch (...) {
    ReportException("fragscope_malloc");
  }
  return nullptr;
}

void fragscope_free(void* ptr, size_t /*size*/, int device, cudaStream_t /*stream*/) {
  try {
    if (ptr == nullptr || fragscope::hooks::ProcessIsExiting()) return;
    const auto address = reinterpret_cast<fragscope::DevicePtr>(ptr);
    const RegistryPin registry;
    absl::Status first;
    if (fragscope::CachingAllocator* allocator = registry->Find(device)) {
      first = allocator->Free(address);
      if (first.ok()) return;
    }
    // The caller's device may be wrong (a plain C user); the pointer identifies its allocator.
    for (int d = 0; d < fragscope::hooks::kMaxDevices; ++d) {
      fragscope::CachingAllocator* allocator = registry->Find(d);
      if (d == device || allocator == nullptr) continue;
      if (allocator->Free(address).ok()) return;
    }
    ReportError(absl::StrFormat("fragscope_free(%p, device %d): %s", ptr, device,
                                first.ok() ? "not a fragscope allocation" : first.message()));
  } catch (...) {
    ReportException("fragscope_free");
  }
}

void fragscope_init(int /*device_count*/) {
  try {
    // Allocators are created per device on first use; validate the configuration now so that a
    // bad FRAGSCOPE_ALLOC_CONF is reported when the allocator is installed.
    absl::StatusOr<fragscope::AllocatorOptions> options = RegistryPin()->Options();
    if (!options.ok()) ReportError(std::string(options.status().message()));
  } catch (...) {
    ReportException("fragscope_init");
  }
}

void fragscope_empty_cache(void) {
  try {
    if (fragscope::hooks::ProcessIsExiting()) return;
    const RegistryPin registry;
    for (int d = 0; d < fragscope::hooks::kMaxDevices; ++d) {
      if (fragscope::CachingAllocator* allocator = registry->Find(d)) {
        allocator->EmptyCache();
      }
    }
  } catch (...) {
    ReportException("fragscope_empty_cache");
  }
}

void fragscope_set_memory_fraction(double fraction, int device) {
  try {
    const RegistryPin registry;
    absl::StatusOr<fragscope::CachingAllocator*> allocator = registry->Get(device);
    absl::Status status =
        allocator.ok() ? (*allocator)->SetMemoryFraction(fraction) : allocator.status();
    if (!status.ok()) {
      ReportError(absl::StrFormat("fragscope_set_memory_fraction(%g, device %d): %s", fraction,
                                  device, status.message()));
      return;
    }
    fragscope::hooks::RecordOptionsInLog(*registry, device, **allocator);
  } catch (...) {
    ReportException("fragscope_set_memory_fraction");
  }
}

void fragscope_record_stream(void* ptr, cudaStream_t stream) {
  try {
    if (ptr == nullptr || fragscope::hooks::ProcessIsExiting()) return;
    const auto address = reinterpret_cast<fragscope::DevicePtr>(ptr);
    const auto stream_id = reinterpret_cast<fragscope::StreamId>(stream);
    const RegistryPin registry;
    for (int d = 0; d < fragscope::hooks::kMaxDevices; ++d) {
      fragscope::CachingAllocator* allocator = registry->Find(d);
      if (allocator == nullptr) continue;
      const absl::Status status = allocator->RecordStream(address, stream_id);
      if (status.ok()) return;
      // kInvalidArgument: not this device's allocation; anything else is about this block.
      if (!absl::IsInvalidArgument(status)) {
        ReportError(absl::StrFormat("fragscope_record_stream(%p): %s", ptr, status.message()));
        return;
      }
    }
    ReportError(absl::StrFormat("fragscope_record_stream(%p): not a fragscope allocation", ptr));
  } catch (...) {
    ReportException("fragscope_record_stream");
  }
}

int fragscope_configure(const char* conf, const char* log_pattern) {
  try {
    absl::Status status = RegistryPin()->Configure(
        conf != nullptr ? std::optional<std::string_view>(conf) : std::nullopt,
        log_pattern != nullptr ? std::optional<std::string_view>(log_pattern) : std::nullopt);
    if (status.ok()) return 0;
    fragscope::hooks::SetLastError(std::string(status.message()));
  } catch (...) {
    ReportException("fragscope_configure");
  }
  return -1;
}

int fragscope_simulate(uint64_t device_bytes, const char* conf, const char* log_pattern) {
  try {
    absl::Status status = fragscope::hooks::SimulatePluggableDevices(
        device_bytes, conf != nullptr ? std::optional<std::string_view>(conf) : std::nullopt,
        log_pattern != nullptr ? std::optional<std::string_view>(log_pattern) : std::nullopt);
    if (status.ok()) return 0;
    fragscope::hooks::SetLastError(std::string(status.message()));
  } catch (...) {
    ReportException("fragscope_simulate");
  }
  return -1;
}

const char* fragscope_last_error(void) { return fragscope::hooks::t_last_error.c_str(); }

}  // extern "C"
