#include "hooks/torch_predict_device.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <cstring>
#include <mutex>

// Note [Backward without a GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Under FakeTensorMode on a machine without a GPU, torch swaps the CUDA device guard for a no-op
// one (ensureCUDADeviceGuardSet: one device, every stream on device index -1). Forward ops work.
// loss.backward() then fails inside the C++ engine (torch/csrc/autograd/engine.cpp, 2.11):
//  1. compute_dependencies finds nodes with a CUDA stream and calls
//     GraphTask::stash_current_streams, which asks the CUDA hooks' hasPrimaryContext(i) for each
//     device the CUDA guard counts; the real hooks check i against the CUDA runtime's device
//     count (0) and throw "hasPrimaryContext expects a valid device index".
//  2. After the last node, exec_post_processing indexes the stashed streams with each leaf
//     stream's device index: -1 for the no-op guard's streams, out of bounds.
// Registering a PrivateUse1 backend instead makes it torch's accelerator, and the engine then
// asserts (opt_ready_stream && opt_parent_stream) for CUDA nodes, which have no stream of it.
// So, while a prediction runs, this file:
//  - points the CUDA hooks object's vtable at a copy whose hasPrimaryContext slot answers true
//    (every other slot is the original's: the hooks keep answering isBuilt, hasCUDA, ... as
//    before), and
//  - installs a CUDA device guard like the no-op one but on device 0, with one default stream
//    and events that are complete at once, so that streams stashed, recorded and compared by the
//    engine are all the same stream on a valid index.
// The engine's schedule, saved-variable release, gradient accumulation and hooks are then
// PyTorch's own. Both changes are undone by EndPredictDevice. The slot numbers come from the
// LibTorch headers this file is compiled against, which must be the running torch's
// (fragscope_torch_version).

namespace fragscope::torch_hooks {
namespace {

constexpr c10::DeviceType kCuda = c10::DeviceType::CUDA;

struct PredictCudaGuard final : c10::impl::NoOpDeviceGuardImpl<kCuda> {
  static c10::Device Device0() { return c10::Device(kCuda, 0); }
  c10::Device exchangeDevice(c10::Device /*unused*/) const override { return Device0(); }
  c10::Device getDevice() const override { return Device0(); }
  c10::Stream getStream(c10::Device /*unused*/) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, Device0());
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getStream(d);
  }
  c10::Stream exchangeStream(c10::Stream /*unused*/) const noexcept override {
    return getStream(Device0());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** /*event*/, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device*/,
              const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* /*event*/, const c10::DeviceIndex /*device*/) const noexcept override {}
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device*/) const override {}
};

// A class that adds one virtual function after CUDAHooksInterface's: its slot is the number of
// slots of the interface (and of the CUDAHooks implementation, which adds none).
struct SlotCounter : at::CUDAHooksInterface {
  virtual void fragscope_last_slot() const {}
};

bool AlwaysHasPrimaryContext(const void* /*self*/, c10::DeviceIndex /*device*/) { return true; }

// Itanium C++ ABI: a pointer to a virtual member function holds 1 + the slot's byte offset.
template <typename Pmf>
size_t VirtualSlot(Pmf pmf) {
  uintptr_t words[2];
  static_assert(sizeof(pmf) == sizeof(words));
  std::memcpy(words, &pmf, sizeof(words));
  return (words[0] - 1) / sizeof(void*);
}

struct State {
  std::mutex mu;
  bool active = false;
  void** original_vtable = nullptr;
  void** patched_vtable = nullptr;  // 2 header words, then the slots; kept for the process
  const c10::impl::DeviceGuardImplInterface* original_guard = nullptr;
  PredictCudaGuard* guard = nullptr;  // never destroyed: the registry may outlive End
};

State& GetState() {
  static State* state = new State();
  return *state;
}

void*** HooksObject() {
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  return reinterpret_cast<void***>(const_cast<at::CUDAHooksInterface*>(&hooks));
}

void InstallGuardLocked(State& s) { c10::impl::registerDeviceGuard(kCuda, s.guard); }

}  // namespace

absl::Status BeginPredictDevice() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.active) return absl::FailedPreconditionError("the prediction device is already active");
  void*** hooks = HooksObject();
  s.original_vtable = *hooks;
  if (s.patched_vtable == nullptr) {
    const size_t slots = VirtualSlot(&SlotCounter::fragscope_last_slot);
    const size_t slot = VirtualSlot(&at::CUDAHooksInterface::hasPrimaryContext);
    s.patched_vtable = new void*[slots + 2];
    std::memcpy(s.patched_vtable, s.original_vtable - 2, (slots + 2) * sizeof(void*));
    s.patched_vtable[2 + slot] = reinterpret_cast<void*>(&AlwaysHasPrimaryContext);
  }
  *hooks = s.patched_vtable + 2;
  if (s.guard == nullptr) s.guard = new PredictCudaGuard();
  s.original_guard = c10::impl::device_guard_impl_registry[static_cast<size_t>(kCuda)].load();
  InstallGuardLocked(s);
  s.active = true;
  return absl::OkStatus();
}

void ReinstallPredictGuard() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.active) InstallGuardLocked(s);
}

void EndPredictDevice() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.active) return;
  *HooksObject() = s.original_vtable;
  c10::impl::device_guard_impl_registry[static_cast<size_t>(kCuda)].store(s.original_guard);
  s.active = false;
}

bool PredictDeviceActive() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.active;
}

}  // namespace fragscope::torch_hooks
