// `fragscope dump`: prints the records of an .fslog event log as text, one line per record.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fragscope::cli {

// `args` are the arguments after "dump": LOG [--kind K1,K2,...] [--from N] [--to N] [--header]
// [--bytes] [--help]. Records go to `out`; errors and reader warnings to `err`.
// Returns 0 on success (a torn tail is only a warning), 1 if the log cannot be read or is
// corrupt (records before the damage are printed first), 2 on a usage error.
int RunDumpCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace fragscope::cli
