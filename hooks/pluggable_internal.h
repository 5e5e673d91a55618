// Helpers shared by the C ABI files of libfragscope_alloc.so (pluggable_*.cc). Not part of any
// public interface.
#pragma once

#include <string>

#include "allocator/caching_allocator.h"
#include "hooks/allocator_registry.h"

namespace fragscope::hooks {

// Sets fragscope_last_error() and prints the message on stderr (the first few only).
void ReportError(const std::string& message);
// Inside a catch block: reports the active exception as an internal error of `function`.
void ReportException(const char* function);
// Tests only: prints error lines again from the first, clears this thread's last error.
void ResetErrorReportingForTesting();

// Records `allocator`'s current options (memory fraction included) as an options change in the
// device's log, if it has one.
void RecordOptionsInLog(AllocatorRegistry& registry, int device, const CachingAllocator& allocator);

// Copies `text` into buf[0..len) snprintf-style; returns text.size().
size_t CopyOut(const std::string& text, char* buf, size_t len);

}  // namespace fragscope::hooks
