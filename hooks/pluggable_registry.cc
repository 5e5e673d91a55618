// libfragscope_alloc.so: the registry behind the C ABI, and its replacement by fragscope_simulate
// while other threads may be inside the C ABI (Note [Replacing the registry]).
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "allocator/simulated_backend.h"
#include "hooks/pluggable_allocator.h"
#include "hooks/pluggable_internal.h"
#include "hooks/process_exit.h"

namespace fragscope::hooks {
namespace {

// Note [Replacing the registry]
// fragscope_simulate replaces the registry while other threads may be inside the C ABI: a storage
// finalizer freeing on PyTorch's autograd thread, stats read on the main thread (ctypes releases
// the GIL for each foreign call). Each thread owns a hazard slot naming the registry its current
// call uses (RegistryPin: store the registry, re-read g_registry, retry if it changed). The
// replacing thread swaps g_registry, waits until no slot names the old registry, then destroys
// it. Waiting, rather than retiring it to be freed later, keeps the destructor where it was: the
// old registry's logs are flushed, closed and whole when fragscope_simulate returns, and no
// allocator still in use feeds a closed log. The wait lasts as long as the calls in flight on the
// old registry (one allocation, free or stats read each).
// The pin's store must be ordered before its re-read. A seq_cst store (a locked instruction) makes
// the warm malloc+free pair 86-95 ns instead of 73-77 ns without a pin (BM_PluggablePair, CPU
// time, machine D of bench/RESULTS.md); a plain store with membarrier(2) on the replacing side
// (every running thread executes a full barrier between the swap and the scan: liburcu's memb
// flavor) makes it 77-80 ns. seq_cst remains the fallback where membarrier is refused. Slots are
// per thread, each on its own cache line: a shared reader count would have threads on different
// devices write one line on every call.
std::atomic<AllocatorRegistry*> g_registry{nullptr};
std::mutex g_registry_create_mu;

struct alignas(64) PinSlot {
  std::atomic<AllocatorRegistry*> pinned{nullptr};
  std::atomic<bool> taken{true};
  PinSlot* next = nullptr;  // set before the slot is published, constant after
};
// Every slot ever made; never freed. A thread's slot is given back at its exit and reused.
std::atomic<PinSlot*> g_pin_slots{nullptr};
thread_local PinSlot* t_pin_slot = nullptr;

// Gives this thread's slot back when the thread exits. A separate variable from t_pin_slot so
// that the hot path's access to t_pin_slot needs no initialization check.
struct PinSlotRelease {
  bool armed = false;
  ~PinSlotRelease() {
    if (t_pin_slot == nullptr) return;
    t_pin_slot->taken.store(false, std::memory_order_release);
    t_pin_slot = nullptr;
  }
};
thread_local PinSlotRelease t_pin_slot_release;

// Out of line, as CreateRegistry: the pin's fast path then saves no registers.
[[gnu::noinline]] PinSlot* AcquirePinSlot() {
  PinSlot* slot = nullptr;
  for (PinSlot* s = g_pin_slots.load(std::memory_order_seq_cst); s != nullptr; s = s->next) {
    bool taken = false;
    if (!s->taken.load(std::memory_order_relaxed) &&
        s->taken.compare_exchange_strong(taken, true, std::memory_order_acquire)) {
      slot = s;
      break;
    }
  }
  if (slot == nullptr) {
    slot = new PinSlot;
    slot->next = g_pin_slots.load(std::memory_order_relaxed);
    while (!g_pin_slots.compare_exchange_weak(slot->next, slot, std::memory_order_seq_cst)) {
    }
  }
  t_pin_slot = slot;
  t_pin_slot_release.armed = true;  // registers the release at thread exit
  return slot;
}

// Whether the replacing thread can fence every thread of the process (Linux 4.14+, not forbidden
// by a seccomp filter). Set while the library loads, before any call can pin.
const bool g_heavy_barrier =
    syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;

// A full barrier on every running thread of this process, as if each had executed one.
void HeavyBarrier() {
  if (syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  // A fallback that needs no registration; slower: it waits for a scheduler grace period.
  if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0) return;
  std::perror("fragscope: membarrier failed after it was registered");
  std::abort();  // a pinned registry could be freed: never continue without the barrier
}

bool ThisThreadHoldsAPin() {
  return t_pin_slot != nullptr && t_pin_slot->pinned.load(std::memory_order_relaxed) != nullptr;
}

// Publishes `fresh` and destroys the registry it replaces once no call is inside it.
// REQUIRES: g_registry_create_mu held; !ThisThreadHoldsAPin().
void ReplaceRegistry(AllocatorRegistry* fresh) {
  AllocatorRegistry* old = g_registry.exchange(fresh, std::memory_order_seq_cst);
  if (old == nullptr) return;
  // Every pin's store is now visible, or its re-read of g_registry will see `fresh`.
  if (g_heavy_barrier) HeavyBarrier();
  // A slot published after this load belongs to a thread that will read `fresh` when it pins.
  for (PinSlot* s = g_pin_slots.load(std::memory_order_seq_cst); s != nullptr; s = s->next) {
    while (s->pinned.load(std::memory_order_seq_cst) == old) std::this_thread::yield();
  }
  delete old;  // flushes and closes its logs
}

[[gnu::noinline]] AllocatorRegistry* CreateRegistry() {
  std::lock_guard<std::mutex> lock(g_registry_create_mu);
  if (AllocatorRegistry* registry = g_registry.load(std::memory_order_acquire)) return registry;
  auto* registry = new AllocatorRegistry(DefaultBackendFactory());  // replaced, never destroyed
  WatchProcessExit();
  g_registry.store(registry, std::memory_order_seq_cst);
  return registry;
}

// Whether the registry was made by fragscope_simulate (its devices are SimulatedBackends).
bool g_simulated = false;  // guarded by g_registry_create_mu

}  // namespace

RegistryPin::RegistryPin() {
  PinSlot* slot = t_pin_slot;
  // A slot just pushed pins with seq_cst: a replacing thread that did not see it swapped
  // g_registry before the push, and the seq_cst re-read then sees the new registry.
  bool light = g_heavy_barrier;
  if (slot == nullptr) {
    slot = AcquirePinSlot();
    light = false;
  }
  if (AllocatorRegistry* held = slot->pinned.load(std::memory_order_relaxed)) {
    registry_ = held;  // nested: the outer pin keeps it alive
    slot_ = nullptr;
    return;
  }
  AllocatorRegistry* registry = g_registry.load(std::memory_order_acquire);
  if (registry == nullptr) registry = CreateRegistry();
  for (;;) {
    AllocatorRegistry* now;
    if (light) {
      slot->pinned.store(registry, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the CPU's order: HeavyBarrier
      now = g_registry.load(std::memory_order_acquire);
    } else {
      slot->pinned.store(registry, std::memory_order_seq_cst);
      now = g_registry.load(std::memory_order_seq_cst);
    }
    if (now == registry) break;
    registry = now;
  }
  registry_ = registry;
  slot_ = &slot->pinned;
}

absl::Status SetPluggableBackendFactory(BackendFactory factory) {
  return RegistryPin()->SetBackendFactory(std::move(factory));
}

absl::Status SimulatePluggableDevices(uint64_t device_bytes, std::optional<std::string_view> conf,
                                      std::optional<std::string_view> log_pattern) {
  if (device_bytes < SimulatedBackend::kGranularityBytes ||
      device_bytes > SimulatedBackend::kMaxCapacityBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragscope_simulate: %u bytes is not a simulated device's size (2 MiB to 4 TiB)",
        device_bytes));
  }
  if (ThisThreadHoldsAPin()) {
    return absl::FailedPreconditionError(
        "fragscope_simulate: called from inside another fragscope call on this thread");
  }
  std::lock_guard<std::mutex> lock(g_registry_create_mu);
  AllocatorRegistry* current = g_registry.load(std::memory_order_acquire);
  if (current != nullptr && !g_simulated) {
    for (int d = 0; d < kMaxDevices; ++d) {
      if (current->Find(d) != nullptr) {
        return absl::FailedPreconditionError(
            "fragscope_simulate: fragscope is already allocating on a real device in this "
            "process");
      }
    }
  }
  auto fresh = std::make_unique<AllocatorRegistry>(
      [device_bytes](int device) -> absl::StatusOr<std::unique_ptr<DeviceBackend>> {
        return std::make_unique<SimulatedBackend>(device_bytes, device,
                                                  AddressOrder::kHighestFirst);
      });
  if (absl::Status status = fresh->Configure(conf, log_pattern); !status.ok()) return status;
  if (current == nullptr) WatchProcessExit();
  ReplaceRegistry(fresh.release());
  g_simulated = true;
  return absl::OkStatus();
}

void ResetPluggableAllocatorForTesting(BackendFactory factory) {
  std::lock_guard<std::mutex> lock(g_registry_create_mu);
  ReplaceRegistry(new AllocatorRegistry(factory ? std::move(factory) : DefaultBackendFactory()));
  g_simulated = false;
  ResetErrorReportingForTesting();
}

}  // namespace fragscope::hooks
