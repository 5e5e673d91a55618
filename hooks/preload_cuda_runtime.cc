// libfragscope_preload.so: the interposed CUDA runtime functions (LD_PRELOAD). See preload_state.h
// for what each mode does, real_cuda.h for how the real functions are found.
//
// Every hook has the same shape:
//   1. find the real function (resolved once, process-wide);
//   2. pass straight through when this thread is already inside a hook (the thread_local guard:
//      anything fragscope does that reaches the CUDA runtime again must not recurse into itself),
//      when exit has begun (Note [Nothing after exit began]), or in mode off;
//   3. otherwise do the mode's work, catching every exception: none crosses the C ABI.
// cudaError_t is an int-sized enum on the C ABI; the hooks declare it as int so that this file
// needs no CUDA header.
#include <cstddef>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "fslog/allocation_role.h"
#include "fslog/fslog_writer.h"
#include "hooks/preload_state.h"
#include "hooks/process_exit.h"
#include "hooks/real_cuda.h"

namespace fragscope::hooks {
namespace {

thread_local bool t_in_hook = false;

// Marks this thread as inside a hook for the scope.
class HookScope {
 public:
  HookScope() { t_in_hook = true; }
  ~HookScope() { t_in_hook = false; }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
};

const RealCuda* RealOrReport() {
  const RealCuda* real = ResolveRealCuda();
  if (real == nullptr) {
    static bool reported = [] {
      PreloadReport(
          "libfragscope_preload.so cannot find the real cudaMalloc/cudaFree (is the CUDA "
          "runtime loaded?): interposed calls fail with cudaErrorInitializationError");
      return true;
    }();
    (void)reported;
  }
  return real;
}

// The mode's state, or nullptr when this call must pass straight through.
PreloadState* ActiveState() {
  if (t_in_hook || ProcessIsExiting()) return nullptr;
  PreloadState& state = PreloadState::Get();
  return state.mode() == PreloadMode::kOff ? nullptr : &state;
}

void ReportException(const char* function) {
  try {
    throw;
  } catch (const std::exception& e) {
    PreloadReport(absl::StrFormat("%s: internal error: %s", function, e.what()));
  } catch (...) {
    PreloadReport(absl::StrFormat("%s: internal error", function));
  }
}

// The cudaMalloc family. `call_real(ptr, size)` calls the real function.
template <typename CallReal>
int Malloc(const char* name, const CallReal& call_real, void** ptr, size_t size, void* stream) {
  PreloadState* state = nullptr;
  try {
    state = ActiveState();
  } catch (...) {
    ReportException(name);
  }
  if (state == nullptr || ptr == nullptr) return call_real(ptr, size);
  HookScope scope;
  try {
    if (state->mode() == PreloadMode::kCache && size > 0) {
      return state->CacheMalloc(ptr, size, stream);
    }
  } catch (...) {
    ReportException(name);
    return kCudaErrorInitializationError;
  }
  const int error = call_real(ptr, size);
  try {
    state->ObserveMalloc(error, error == kCudaSuccess ? *ptr : nullptr, size, stream);
  } catch (...) {
    ReportException(name);
  }
  return error;
}

// The cudaFree family. `call_real(ptr)` calls the real function.
template <typename CallReal>
int Free(const char* name, const CallReal& call_real, void* ptr, void* stream,
         bool stream_ordered) {
  if (ptr == nullptr || t_in_hook) return call_real(ptr);
  HookScope scope;
  try {
    if (ProcessIsExiting()) {
      // Only a block fragscope cached needs care at exit: it is not a CUDA allocation.
      PreloadState* state = PreloadState::IfCreated();
      int error = kCudaSuccess;
      if (state != nullptr && state->mode() == PreloadMode::kCache &&
          state->CacheFree(ptr, stream, stream_ordered, &error)) {
        return error;
      }
      return call_real(ptr);
    }
    PreloadState& state = PreloadState::Get();
    if (state.mode() == PreloadMode::kCache) {
      int error = kCudaSuccess;
      if (state.CacheFree(ptr, stream, stream_ordered, &error)) return error;
    } else if (state.mode() == PreloadMode::kObserve) {
      state.ObserveFree(ptr, stream);
    }
  } catch (...) {
    ReportException(name);
  }
  return call_real(ptr);
}

// Whether `role` is one of fslog/allocation_role.h's; else reports it and returns false.
bool CheckRole(const char* function, int role) {
  if (role >= 0 && AllocationRoleOf(static_cast<uint64_t>(role)).has_value()) return true;
  PreloadReport(
      absl::StrFormat("%s: role %d is not 0..%d", function, role, kAllocationRoleCount - 1));
  return false;
}

size_t CopyOut(const std::string& text, char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    const size_t n = text.size() < len ? text.size() : len - 1;
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

}  // namespace
}  // namespace fragscope::hooks

using fragscope::kCudaErrorInitializationError;
using fragscope::hooks::PreloadState;
using fragscope::hooks::RealCuda;
using fragscope::hooks::RealOrReport;

extern "C" {

// --- The interposed CUDA runtime API ------------------------------------------------------------

int cudaMalloc(void** ptr, size_t size) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr) return kCudaErrorInitializationError;
  return fragscope::hooks::Malloc(
      "cudaMalloc", [real](void** p, size_t n) { return real->malloc(p, n); }, ptr, size, nullptr);
}

int cudaFree(void* ptr) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr) return kCudaErrorInitializationError;
  return fragscope::hooks::Free(
      "cudaFree", [real](void* p) { return real->free(p); }, ptr, nullptr,
      /*stream_ordered=*/false);
}

int cudaMallocAsync(void** ptr, size_t size, void* stream) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr || real->malloc_async == nullptr) return kCudaErrorInitializationError;
  return fragscope::hooks::Malloc(
      "cudaMallocAsync",
      [real, stream](void** p, size_t n) { return real->malloc_async(p, n, stream); }, ptr, size,
      stream);
}

int cudaFreeAsync(void* ptr, void* stream) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr || real->free_async == nullptr) return kCudaErrorInitializationError;
  return fragscope::hooks::Free(
      "cudaFreeAsync", [real, stream](void* p) { return real->free_async(p, stream); }, ptr, stream,
      /*stream_ordered=*/true);
}

// The per-thread-default-stream variants (code compiled with --default-stream per-thread).
int cudaMallocAsync_ptsz(void** ptr, size_t size, void* stream) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr || real->malloc_async_ptsz == nullptr) return kCudaErrorInitializationError;
  return fragscope::hooks::Malloc(
      "cudaMallocAsync_ptsz",
      [real, stream](void** p, size_t n) { return real->malloc_async_ptsz(p, n, stream); }, ptr,
      size, stream);
}

int cudaFreeAsync_ptsz(void* ptr, void* stream) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr || real->free_async_ptsz == nullptr) return kCudaErrorInitializationError;
  return fragscope::hooks::Free(
      "cudaFreeAsync_ptsz", [real, stream](void* p) { return real->free_async_ptsz(p, stream); },
      ptr, stream, /*stream_ordered=*/true);
}

int cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const RealCuda* real = RealOrReport();
  if (real == nullptr || real->mem_get_info == nullptr) return kCudaErrorInitializationError;
  const int error = real->mem_get_info(free_bytes, total_bytes);
  if (error != fragscope::kCudaSuccess || free_bytes == nullptr || total_bytes == nullptr) {
    return error;
  }
  try {
    PreloadState* state = fragscope::hooks::ActiveState();
    if (state != nullptr && state->mode() == fragscope::hooks::PreloadMode::kCache) {
      fragscope::hooks::HookScope scope;
      state->CacheAdjustMemInfo(free_bytes, *total_bytes);
    }
  } catch (...) {
    fragscope::hooks::ReportException("cudaMemGetInfo");
  }
  return error;
}

// --- fragscope's own C API (found with dlsym(RTLD_DEFAULT, ...) or ctypes.CDLL(None)) ---------

// "observe", "cache" or "off".
const char* fragscope_preload_mode(void) {
  try {
    return PreloadState::Get().mode_name().data();
  } catch (...) {
    return "off";
  }
}

void fragscope_preload_mark(const char* text) {
  if (text == nullptr) return;
  try {
    PreloadState::Get().Mark(text);
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_mark");
  }
}

void fragscope_preload_record_model(const char* json) {
  if (json == nullptr) return;
  try {
    PreloadState::Get().RecordModel(json);
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_record_model");
  }
}

// Who holds the memory (fslog/FORMAT.md, "Context records"), as fragscope_define_context,
// fragscope_set_context and fragscope_tag_block_context of libfragscope_alloc.so
// (fragscope_alloc.h), for the interposer's logs: the id of the context (role, as
// fslog/allocation_role.h numbers them; module path, ATen op, code location, each "" or NULL when
// not known; whether in a backward pass), interned once per process and defined in every log, open
// now or later; 0 without a log, or for a role allocation_role.h does not define (reported on
// stderr). The thread's context names cache mode's alloc records and both modes' oom records;
// observe mode logs segments, whose records name no context.
uint32_t fragscope_preload_define_context(int role, const char* module, const char* op,
                                          const char* site, int backward) {
  try {
    if (!fragscope::hooks::CheckRole("fragscope_preload_define_context", role)) return 0;
    return PreloadState::Get().DefineContext(static_cast<uint8_t>(role), module ? module : "",
                                             op ? op : "", site ? site : "", backward != 0);
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_define_context");
  }
  return 0;
}

// The context of the allocations this thread makes from now on (0: none).
void fragscope_preload_set_context(uint32_t context) {
  fragscope::FslogWriter::SetThreadContext(context);
}

// The role of the block at `ptr` on `device` (a tag record in that device's log, if it is open),
// and its context from now on (0: keep it). 0, or -1 for a role allocation_role.h does not define
// (nothing written).
int fragscope_preload_tag_block_context(const void* ptr, int device, int role, uint32_t context) {
  try {
    if (!fragscope::hooks::CheckRole("fragscope_preload_tag_block_context", role)) return -1;
    PreloadState::Get().Tag(reinterpret_cast<uint64_t>(ptr), device, static_cast<uint8_t>(role),
                            context);
    return 0;
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_tag_block_context");
  }
  return -1;
}

int fragscope_preload_flush(void) {
  try {
    return PreloadState::Get().Flush();
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_flush");
  }
  return -1;
}

// Cache mode: torch.cuda.memory_stats()-keyed stats as "key value\n" lines (snprintf-style).
size_t fragscope_preload_stats_text(int device, char* buf, size_t len) {
  try {
    return fragscope::hooks::CopyOut(PreloadState::Get().CacheStatsText(device), buf, len);
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_stats_text");
  }
  return fragscope::hooks::CopyOut("", buf, len);
}

// Cache mode: torch.cuda.memory_summary()-style text (snprintf-style).
size_t fragscope_preload_memory_summary(int device, char* buf, size_t len) {
  try {
    return fragscope::hooks::CopyOut(PreloadState::Get().CacheMemorySummary(device), buf, len);
  } catch (...) {
    fragscope::hooks::ReportException("fragscope_preload_memory_summary");
  }
  return fragscope::hooks::CopyOut("", buf, len);
}

}  // extern "C"
