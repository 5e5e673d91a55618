// `fragscope estimate`: the theoretical per-GPU memory of training or inference, term by term,
// against a GPU; `--explain` prints every formula with its values and source, `--json` a
// machine-readable report, `--solve` answers the inverse questions. See estimator/README.md.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fragscope::cli {

// `args` are the arguments after "estimate" (run with --help for the list). The report goes to
// `out`, errors to `err`. Returns 0 on success (an estimate that does not fit the GPU is still a
// success) and 2 on a usage or input error, whose message names the flag or field and value.
// Never throws.
int RunEstimateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace fragscope::cli
