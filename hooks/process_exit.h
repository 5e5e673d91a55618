// Process exit detection for the hooks.
//
// Note [Nothing after exit began]
// A hook can be called while the process exits: static destructors of CUDA libraries free memory,
// another thread is still running, the CUDA runtime is already unloading. From then on the hooks
// do nothing of their own: the interposer passes every call straight to the real CUDA runtime (or,
// for a block fragscope cached, reports success and leaves the memory to the dying context), and
// the pluggable allocator ignores frees and refuses new allocations. Hook state (allocators, logs)
// is never destroyed, so a late call never touches a destroyed object.
//
// "Exit began" is set by an atexit handler. atexit handlers run in reverse order of registration,
// so WatchProcessExit() is called again after every event-log writer opens: the hooks then stop
// before the writer's own atexit flush runs, and that flush is the last word in the log.
#pragma once

namespace fragscope::hooks {

// True once exit() (or a return from main) has started running atexit handlers.
bool ProcessIsExiting();

// Registers the atexit handler that sets the flag (once more on every call; the handler is
// idempotent). Never fails visibly: if atexit cannot register, exit is simply not detected.
void WatchProcessExit();

}  // namespace fragscope::hooks
