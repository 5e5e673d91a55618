// The `fragscope` command line: one program, one subcommand per job.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fragscope::cli {

// Runs `fragscope ARGS...` (args[0] is the subcommand). Returns the process exit code:
// 0 success, 1 the job failed (bad file, analysis error), 2 usage error.
int RunCommandLine(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `fragscope demo`.
int RunDemoCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace fragscope::cli
