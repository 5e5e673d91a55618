#include "cli/command_line.h"

#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "cli/analysis_commands.h"
#include "cli/dump_command.h"
#include "cli/estimate_command.h"
#include "cli/python_command.h"
#include "cli/rank_commands.h"

namespace fragscope::cli {
namespace {

using CommandFn = int (*)(const std::vector<std::string>&, std::ostream&, std::ostream&);

struct Command {
  std::string_view name;
  std::string_view summary;
  CommandFn run;
};

// One line per subcommand; `fragscope help` prints this table.
constexpr Command kCommands[] = {
    {"demo", "simulate a transformer training job and explain its memory", RunDemoCommand},
    {"estimate", "theoretical memory footprint of training or inference", RunEstimateCommand},
    {"dump", "print the records of an .fslog event log", RunDumpCommand},
    {"analyze", "explain a trace's memory and OOMs, sweep settings; compare ranks",
     RunAnalyzeCommand},
    {"summarize", "reduce a rank's trace to a summary, for merge", RunSummarizeCommand},
    {"merge", "the cross-rank report from many ranks' summaries", RunMergeCommand},
    {"verify", "check that fragscope's allocator reproduces a trace's decisions", RunVerifyCommand},
    {"sweep", "replay a trace under a grid of allocator settings", RunSweepCommand},
    {"diff", "two traces of one job side by side: peaks, OOMs, each phase", RunDiffCommand},
    {"view", "an interactive memory viewer in the browser (files or a local server)",
     RunViewCommand},
    {"convert", "convert between .fslog, PyTorch snapshot pickle and Chrome trace JSON",
     RunConvertCommand},
};

// The Python package's subcommands (python_command.h).
constexpr std::pair<std::string_view, std::string_view> kPythonCommandSummaries[] = {
    {"predict", "predict a job's allocations on a CPU (fake tensors) into an .fslog"},
    {"carry", "carry a log that ends at an OOM past it, as the job would have gone on"},
    {"fit", "the largest micro-batch that fits a GPU, fragmentation included"},
};

void PrintUsage(std::ostream& out) {
  out << "usage: fragscope COMMAND [ARGS...]   (fragscope COMMAND --help for details)\n"
         "       fragscope --version\n\n"
         "Explains CUDA out-of-memory errors of PyTorch jobs: why they happened and which\n"
         "allocator setting avoids them.\n\ncommands:\n";
  for (const Command& c : kCommands) out << absl::StrFormat("  %-10s %s\n", c.name, c.summary);
  out << "\nwith Python 3 and torch (fragscope COMMAND --help; no GPU needed):\n";
  for (const auto& [name, summary] : kPythonCommandSummaries) {
    out << absl::StrFormat("  %-10s %s\n", name, summary);
  }
}

}  // namespace

int RunCommandLine(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    PrintUsage(err);
    return 2;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    PrintUsage(out);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (c.name == name) return c.run({args.begin() + 1, args.end()}, out, err);
  }
  if (IsPythonCommand(name)) return RunPythonCommand(name, {args.begin() + 1, args.end()}, err);
  err << "fragscope: unknown command '" << name << "'\n\n";
  PrintUsage(err);
  return 2;
}

}  // namespace fragscope::cli
