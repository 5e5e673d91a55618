// main() of the GPU benchmarks (gpu_allocator_comparison, gpu_history_overhead): --help prints the
// usage; a refused flag prints the parser's message and the usage and exits 2; otherwise the run,
// given the command line for its report.
#pragma once

#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_join.h"

namespace fragscope::bench {

template <typename Flags>
int GpuBenchMain(int argc, char** argv, std::string_view name, std::string_view usage,
                 bool (*parse)(int, char**, Flags*, std::string*),
                 int (*run)(const Flags&, const std::string&)) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--help") {
      std::cout << usage;
      return 0;
    }
  }
  Flags flags;
  std::string error;
  if (!parse(argc, argv, &flags, &error)) {
    std::cerr << name << ": " << error << "\n\n" << usage;
    return 2;
  }
  const std::vector<std::string> args(argv, argv + argc);
  return run(flags, absl::StrJoin(args, " "));
}

}  // namespace fragscope::bench
