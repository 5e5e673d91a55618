// Process-wide registry of open FslogWriters, for the atexit flush and the fatal-signal
// handlers. Internal to fslog_writer.cc; see Note [Event log buffering].
#pragma once

namespace fragscope {

class FslogWriter;

namespace internal {

// Registers `writer` for the atexit flush and, when `install_signal_handlers` is set, installs
// (once per process) handlers for SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL and SIGTERM that flush
// every registered writer and then chain to the previous handlers. Returns the registry index,
// or -1 if the registry is full (the writer then works without exit or signal flushing).
int RegisterFslogWriter(FslogWriter* writer, bool install_signal_handlers);

// Removes the writer and waits until no signal handler is using it. REQUIRES: `index` was
// returned by RegisterFslogWriter(writer, ...).
void UnregisterFslogWriter(int index, FslogWriter* writer);

}  // namespace internal
}  // namespace fragscope
