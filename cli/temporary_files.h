// The temporary files beside a command's outputs (output_file.h): their names, their removal on
// SIGINT/SIGTERM, and the removal of those a killed run left behind.
//
// A temporary is named `NAME.fragscope-tmp.HOST.PID.RANDOM` (NAME the output's file name, cut
// to 120 bytes; HOST this machine's name, letters, digits and '-' only; RANDOM 16 hex digits
// from the kernel's random source). The name is unguessable, says whose it is, and lets a later
// run remove it safely: RemoveStaleTemporaries removes only regular files (not links) of this
// user, named so for this output, from this host, whose process no longer exists.
#pragma once

#include <string>

namespace fragscope::cli {

// A fresh temporary name for the output file named `name` (a file name, no directory).
std::string TemporaryName(const std::string& name);

// Removes, in directory `dir`, the temporaries of output `name` that a dead process of this user
// on this host left. Returns how many it removed.
int RemoveStaleTemporaries(const std::string& dir, const std::string& name);

// Registers `path` (an open temporary) to be removed if SIGINT or SIGTERM ends the process, and
// installs the handler once for each of the two signals that has the default disposition.
// Returns a slot for UnregisterTemporary, or -1 when every slot is taken (the file is then
// not removed on a signal).
int RegisterTemporary(const std::string& path);
void UnregisterTemporary(int slot);

// The signal handler's work, callable directly (tests): removes every registered temporary.
// Async-signal-safe.
void RemoveRegisteredTemporaries();

}  // namespace fragscope::cli
