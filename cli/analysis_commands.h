// The analyzer's subcommands. Each takes the arguments after its name and returns the
// process exit code: 0 success, 1 the job failed (unreadable trace, divergence, analysis error),
// 2 usage error. Every command prints its usage with --help.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fragscope::cli {

// fragscope analyze LOG... : metrics, OOM explanations, sweep, reports.
int RunAnalyzeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// fragscope verify LOG : replays the trace and compares with its own allocator decisions.
int RunVerifyCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// fragscope sweep LOG : replays under a grid of allocator settings.
int RunSweepCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// fragscope convert IN OUT : .fslog, PyTorch snapshot pickle, Chrome trace JSON.
int RunConvertCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// fragscope diff A B : two traces of one job side by side.
int RunDiffCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// fragscope view LOG : the interactive viewer, as files or served on the loopback interface.
int RunViewCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace fragscope::cli
