// Registry of open event-log writers, the atexit flush and the fatal-signal handlers.
// See Note [Event log buffering] in fslog_writer.h.
#include "fslog/fslog_signals.h"

#include <sched.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "fslog/fslog_writer.h"

namespace fragscope::internal {
namespace {

constexpr int kMaxWriters = 64;
constexpr int kFatalSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGTERM};
constexpr int kFatalSignalCount = sizeof(kFatalSignals) / sizeof(kFatalSignals[0]);

// Read lock-free by the signal handler; written under g_registry_mu.
std::atomic<FslogWriter*> g_writers[kMaxWriters];
// Handlers currently flushing; UnregisterFslogWriter waits for it to drop to zero.
std::atomic<int> g_handlers_running{0};
// Only one handler flushes at a time (two threads may fault together).
std::atomic<bool> g_flushing{false};
// The handlers in place before ours, filled by sigaction() before ours is installed.
struct sigaction g_previous[kFatalSignalCount];

// Guards registration and the atexit flush (std::mutex: constant-initialized and trivially
// destructible, so usable during exit).
std::mutex g_registry_mu;
bool g_atexit_registered = false;   // guarded by g_registry_mu
bool g_handlers_installed = false;  // guarded by g_registry_mu

void FlushAllAtExit() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (auto& slot : g_writers) {
    if (FslogWriter* writer = slot.load(std::memory_order_acquire)) writer->Flush().IgnoreError();
  }
}

bool IsFault(int sig) { return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL; }

// Async-signal-safe: sigaction() and raise() only.
void ChainToPrevious(int sig, siginfo_t* info, void* context) {
  int index = 0;
  while (index < kFatalSignalCount && kFatalSignals[index] != sig) ++index;
  if (index == kFatalSignalCount) return;
  const struct sigaction& previous = g_previous[index];
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) {
      previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous.sa_handler == SIG_IGN) {
    if (!IsFault(sig)) return;  // returning from a fault would re-execute it forever
  } else if (previous.sa_handler != SIG_DFL) {
    previous.sa_handler(sig);
    return;
  }
  // Default action: restore it and re-raise. The signal is blocked while this handler runs, so
  // it is delivered (and kills the process, with a core where applicable) when we return.
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(sig, &default_action, nullptr);
  raise(sig);
}

void HandleFatalSignal(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (!g_flushing.exchange(true, std::memory_order_acq_rel)) {
    g_handlers_running.fetch_add(1, std::memory_order_seq_cst);
    for (auto& slot : g_writers) {
      if (FslogWriter* writer = slot.load(std::memory_order_seq_cst)) writer->EmergencyFlush();
    }
    g_handlers_running.fetch_sub(1, std::memory_order_seq_cst);
    g_flushing.store(false, std::memory_order_release);
  }
  ChainToPrevious(sig, info, context);
  errno = saved_errno;
}

// REQUIRES: g_registry_mu held.
void InstallHandlersLocked() {
  for (int i = 0; i < kFatalSignalCount; ++i) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = HandleFatalSignal;
    // SA_ONSTACK: a stack overflow's SIGSEGV still runs us if the thread has an alternate stack.
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(kFatalSignals[i], &action, &g_previous[i]);
  }
}

}  // namespace

int RegisterFslogWriter(FslogWriter* writer, bool install_signal_handlers) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (!g_atexit_registered) {
    std::atexit(FlushAllAtExit);
    g_atexit_registered = true;
  }
  if (install_signal_handlers && !g_handlers_installed) {
    InstallHandlersLocked();
    g_handlers_installed = true;
  }
  for (int i = 0; i < kMaxWriters; ++i) {
    if (g_writers[i].load(std::memory_order_relaxed) == nullptr) {
      g_writers[i].store(writer, std::memory_order_seq_cst);
      return i;
    }
  }
  return -1;
}

void UnregisterFslogWriter(int index, FslogWriter* writer) {
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    if (index < 0 || index >= kMaxWriters) return;
    FslogWriter* expected = writer;
    g_writers[index].compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst);
  }
  // A handler that loaded the pointer before we cleared it is counted here (seq_cst on both
  // sides): wait for it so the writer is not freed under it.
  while (g_handlers_running.load(std::memory_order_seq_cst) != 0) sched_yield();
}

}  // namespace fragscope::internal
