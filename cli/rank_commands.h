// The many-rank commands: `fragscope summarize` (one summary per trace, where the traces are),
// `fragscope merge` (the cross-rank report from summaries), and the cross-rank form of
// `fragscope analyze` (several traces). Exit codes as every command (analysis_commands.h).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "analysis/analyzer.h"
#include "cli/cli_flags.h"

namespace fragscope::cli {

int RunSummarizeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunMergeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `fragscope analyze` of `traces` (more than one, directories and patterns expanded): the
// cross-rank report, then the worst rank in full. `flags` are analyze's (--json, --html,
// --no-summary), `options` already applied from them.
int RunAnalyzeRanks(const std::vector<std::string>& traces, const ParsedFlags& flags,
                    AnalysisOptions options, std::ostream& out, std::ostream& err);

}  // namespace fragscope::cli
