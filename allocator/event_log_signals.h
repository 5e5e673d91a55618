// Process-wide registry of open EventLogWriters, for the atexit flush and the fatal-signal
// handlers. Internal to event_log_writer.cc; see Note [Event log buffering].
#pragma once

namespace fragscope {

class EventLogWriter;

namespace internal {

// Registers `writer` for the atexit flush and, when `install_signal_handlers` is set, installs
// (once per process) handlers for SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL and SIGTERM that flush
// every registered writer and then chain to the previous handlers. Returns the registry index,
// or -1 if the registry is full (the writer then works without exit or signal flushing).
int RegisterEventLogWriter(EventLogWriter* writer, bool install_signal_handlers);

// Removes the writer and waits until no signal handler is using it. REQUIRES: `index` was
// returned by RegisterEventLogWriter(writer, ...).
void UnregisterEventLogWriter(int index, EventLogWriter* writer);

}  // namespace internal
}  // namespace fragscope
