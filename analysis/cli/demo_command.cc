// `fragscope demo`: runs the built-in transformer training workload (analysis/demo_workload.h)
// through the faithful allocator on a simulated device and reports what the allocator did.
#include <charconv>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "allocator/caching_allocator.h"
#include "allocator/format_size.h"
#include "allocator/memory_summary.h"
#include "allocator/simulated_backend.h"
#include "analysis/cli/command_line.h"
#include "analysis/demo_workload.h"

namespace fragscope::cli {
namespace {

constexpr char kUsage[] =
    "usage: fragscope demo [--conf PYTORCH_CUDA_ALLOC_CONF] [--capacity-gib N] [--steps N]\n"
    "                      [--micro-batch N] [--seed N]\n\n"
    "Simulates mixed-precision AdamW training of a GPT-2-medium-sized model (355M parameters)\n"
    "with variable sequence lengths on a simulated GPU (16 GiB by default), through fragscope's\n"
    "reimplementation of PyTorch's caching allocator, and prints the allocator's report.\n";

bool ParseInt(std::string_view text, int64_t* value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size() && *value > 0;
}

}  // namespace

int RunDemoCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string conf;
  int64_t capacity_gib = 16;
  DemoWorkloadConfig workload;
  workload.micro_batch = 4;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      out << kUsage;
      return 0;
    }
    if (i + 1 >= args.size()) {
      err << "fragscope demo: " << flag
          << (flag.rfind("--", 0) == 0 ? " needs a value\n" : ": unexpected argument\n") << kUsage;
      return 2;
    }
    const std::string& value = args[++i];
    int64_t number = 0;
    if (flag == "--conf") {
      conf = value;
      continue;
    }
    if (!ParseInt(value, &number)) {
      err << "fragscope demo: " << flag << " expects a positive integer, got '" << value << "'\n";
      return 2;
    }
    if (flag == "--capacity-gib") {
      capacity_gib = number;
    } else if (flag == "--steps") {
      workload.steps = static_cast<int>(number);
    } else if (flag == "--micro-batch") {
      workload.micro_batch = static_cast<int>(number);
    } else if (flag == "--seed") {
      workload.seed = static_cast<uint64_t>(number);
    } else {
      err << "fragscope demo: unknown flag " << flag << "\n" << kUsage;
      return 2;
    }
  }
  absl::StatusOr<AllocatorOptions> options = ParseAllocatorOptions(conf);
  if (!options.ok()) {
    err << "fragscope demo: --conf: " << options.status().message() << "\n";
    return 2;
  }

  SimulatedBackend device(static_cast<uint64_t>(capacity_gib) * kGiB);
  CachingAllocator allocator(device, *options);
  const std::vector<WorkloadOp> ops = GenerateDemoWorkload(workload);
  out << absl::StrFormat(
      "fragscope demo: %d training steps of a %.0fM-parameter GPT-style model (bf16, AdamW),\n"
      "micro-batch %d, variable sequence lengths, on a simulated %d GiB GPU%s\n\n",
      workload.steps, static_cast<double>(DemoModelParameters(workload)) / 1e6,
      workload.micro_batch, capacity_gib,
      conf.empty() ? "" : absl::StrCat(" with PYTORCH_CUDA_ALLOC_CONF=", conf));

  absl::flat_hash_map<uint64_t, DevicePtr> live;
  std::string phase = "start";
  for (const WorkloadOp& op : ops) {
    if (op.kind == WorkloadOp::Kind::kMark) {
      phase = op.text;
      continue;
    }
    if (op.kind == WorkloadOp::Kind::kFree) {
      absl::Status status = allocator.Free(live.at(op.id));
      if (!status.ok()) {
        err << "fragscope demo: internal error: " << status.message() << "\n";
        return 1;
      }
      live.erase(op.id);
      continue;
    }
    absl::StatusOr<DevicePtr> ptr = allocator.Allocate(op.bytes, 0);
    if (!ptr.ok()) {
      out << "The job died in " << phase << " allocating " << FormatSize(op.bytes) << ":\n\n"
          << ptr.status().message() << "\n\n";
      out << MemorySummary(allocator.GetStats(), 0);
      return 0;
    }
    live.emplace(op.id, *ptr);
  }
  out << "The job completed.\n\n" << MemorySummary(allocator.GetStats(), 0);
  return 0;
}

}  // namespace fragscope::cli
