// The C ABI of libfragscope_torch.so, for the Python helper (ctypes): the LibTorch registration of
// the replace mode, the observe mode and the prediction's stand-in device. Every function catches
// everything: no exception crosses the C ABI. Errors: -1 and fragscope_torch_last_error().
#include <torch/headeronly/version.h>

#include <exception>
#include <optional>
#include <string>

#include "fslog/allocation_role.h"
#include "hooks/torch_allocator.h"
#include "hooks/torch_observer.h"
#include "hooks/torch_predict_device.h"

namespace {

thread_local std::string t_last_error;

int Result(const absl::Status& status) {
  if (status.ok()) return 0;
  t_last_error = std::string(status.message());
  return -1;
}

int Failed(const char* function) {
  try {
    throw;
  } catch (const std::exception& e) {
    t_last_error = std::string(function) + ": " + e.what();
  } catch (...) {
    t_last_error = std::string(function) + ": unknown exception";
  }
  return -1;
}

// A role value of fslog/allocation_role.h.
bool ValidRole(int role) {
  return role >= 0 && fragscope::AllocationRoleOf(static_cast<uint64_t>(role)).has_value();
}

#define FRAGSCOPE_STRINGIFY_INNER(x) #x
#define FRAGSCOPE_STRINGIFY(x) FRAGSCOPE_STRINGIFY_INNER(x)

}  // namespace

extern "C" {

// The LibTorch version this library was built against ("2.11.0"): it must match the running one.
const char* fragscope_torch_version(void) {
  return FRAGSCOPE_STRINGIFY(TORCH_VERSION_MAJOR) "." FRAGSCOPE_STRINGIFY(
      TORCH_VERSION_MINOR) "." FRAGSCOPE_STRINGIFY(TORCH_VERSION_PATCH);
}

const char* fragscope_torch_last_error(void) { return t_last_error.c_str(); }

// fragscope_alloc.h's fragscope_configure semantics for conf and log (NULL = environment).
int fragscope_torch_use_allocator(const char* conf, const char* log) {
  try {
    fragscope::torch_hooks::UseAllocatorOptions options;
    if (conf != nullptr) options.conf = conf;
    if (log != nullptr) options.log = log;
    return Result(fragscope::torch_hooks::UseFragscopeAllocator(options));
  } catch (...) {
    return Failed("fragscope_torch_use_allocator");
  }
}

// NULL or "" = FRAGSCOPE_LOG.
int fragscope_torch_observe(const char* log) {
  try {
    return Result(fragscope::torch_hooks::ObserveNativeAllocator(log != nullptr ? log : ""));
  } catch (...) {
    return Failed("fragscope_torch_observe");
  }
}

void fragscope_torch_observe_mark(const char* text) {
  try {
    if (text != nullptr) fragscope::torch_hooks::ObserveMark(text);
  } catch (...) {
    Failed("fragscope_torch_observe_mark");
  }
}

void fragscope_torch_observe_record_model(const char* json) {
  try {
    if (json != nullptr) fragscope::torch_hooks::ObserveRecordModel(json);
  } catch (...) {
    Failed("fragscope_torch_observe_record_model");
  }
}

// Who holds the memory (fslog/FORMAT.md, "Context records"), as fragscope_define_context and
// fragscope_set_context of libfragscope_alloc.so, for the observer's logs. 0 for a role outside
// 0..9 or when not observing.
uint32_t fragscope_torch_observe_define_context(int role, const char* module, const char* op,
                                                const char* site, int backward) {
  try {
    if (!ValidRole(role)) return 0;
    return fragscope::torch_hooks::ObserveDefineContext(static_cast<uint8_t>(role),
                                                        module ? module : "", op ? op : "",
                                                        site ? site : "", backward != 0);
  } catch (...) {
    Failed("fragscope_torch_observe_define_context");
    return 0;
  }
}

void fragscope_torch_observe_set_context(uint32_t context) {
  fragscope::torch_hooks::ObserveSetContext(context);
}

// fragscope_tag_block_context of libfragscope_alloc.so, for the observer's logs: 0, or -1 for a
// role outside 0..9.
int fragscope_torch_observe_tag_block(const void* ptr, int device, int role, uint32_t context) {
  try {
    if (!ValidRole(role)) return -1;
    fragscope::torch_hooks::ObserveTagBlock(reinterpret_cast<uint64_t>(ptr), device,
                                            static_cast<uint8_t>(role), context);
    return 0;
  } catch (...) {
    return Failed("fragscope_torch_observe_tag_block");
  }
}

int fragscope_torch_observe_flush(void) {
  try {
    return Result(fragscope::torch_hooks::ObserveFlush());
  } catch (...) {
    return Failed("fragscope_torch_observe_flush");
  }
}

// The stand-in CUDA device of fragscope.predict (torch_predict_device.h).
int fragscope_torch_predict_begin(void) {
  try {
    return Result(fragscope::torch_hooks::BeginPredictDevice());
  } catch (...) {
    return Failed("fragscope_torch_predict_begin");
  }
}

void fragscope_torch_predict_reinstall_guard(void) {
  try {
    fragscope::torch_hooks::ReinstallPredictGuard();
  } catch (...) {
    Failed("fragscope_torch_predict_reinstall_guard");
  }
}

void fragscope_torch_predict_end(void) {
  try {
    fragscope::torch_hooks::EndPredictDevice();
  } catch (...) {
    Failed("fragscope_torch_predict_end");
  }
}

}  // extern "C"
