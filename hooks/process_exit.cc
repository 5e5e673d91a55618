#include "hooks/process_exit.h"

#include <atomic>
#include <cstdlib>

namespace fragscope::hooks {
namespace {

std::atomic<bool> g_exiting{false};

void MarkExiting() { g_exiting.store(true, std::memory_order_release); }

}  // namespace

bool ProcessIsExiting() { return g_exiting.load(std::memory_order_acquire); }

void WatchProcessExit() { (void)std::atexit(MarkExiting); }

}  // namespace fragscope::hooks
