// gpu_allocator_comparison: the GPU half of the benchmark suite.
// fragscope's CachingAllocator over CudaBackend (with and without the .fslog writer), PyTorch's
// native caching allocator (LibTorch raw_alloc_with_stream / raw_delete), cudaMallocAsync on the
// default memory pool (caching: release threshold UINT64_MAX) and plain cudaMalloc/cudaFree, side
// by side in one run, on one device and one stream: warm pairs of 4 KiB, 1 MiB, 32 MiB and a
// seeded random workload (gpu_workloads.h). Prints a markdown table (median and minimum ns per
// operation) and, with --json, the same figures as JSON.
//
// The goal it measures: fragscope's hot path, logging on, at least 2x faster than
// PyTorch's native allocator; the last column is that ratio.
//
// Without a CUDA device it prints "skipped: no CUDA device (...)" and exits 0. Exit status 1
// when an allocator failed (its cells say why), 2 for bad flags.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "allocator/format_size.h"
#include "bench/gpu_allocator.h"
#include "bench/gpu_bench_main.h"
#include "bench/gpu_workloads.h"
#include "estimator/json_document.h"

namespace fragscope::bench {
namespace {

constexpr char kUsage[] =
    R"(usage: gpu_allocator_comparison [--device N] [--only LIST] [--sizes LIST]
    [--min-time SECONDS] [--repetitions N] [--random-steps N] [--random-repetitions N]
    [--seed N] [--log-dir DIR] [--keep-log] [--json PATH]

  --only LIST          allocators, default fragscope,fragscope_log,torch,async,cudamalloc
  --sizes LIST         warm-pair sizes in bytes, default 4096,1048576,33554432
  --min-time SECONDS   a timed warm-pair batch lasts at least this, default 0.1
  --repetitions N      timed warm-pair batches, default 5 (the median is reported)
  --random-steps N     steps of the random workload, default 20000
  --random-repetitions N   timed passes of the random workload, default 3
  --log-dir DIR        where fragscope_log writes its .fslog, default /tmp (removed unless
                       --keep-log)
PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) configures PyTorch's allocator and fragscope's.
)";

struct AllocatorKind {
  std::string key;    // --only name
  std::string title;  // column header
};

const std::vector<AllocatorKind>& AllKinds() {
  static const std::vector<AllocatorKind> kinds = {
      {"fragscope", "fragscope"},   {"fragscope_log", "fragscope + .fslog"},
      {"torch", "PyTorch native"},  {"async", "cudaMallocAsync"},
      {"cudamalloc", "cudaMalloc"},
  };
  return kinds;
}

struct Flags {
  int device = 0;
  std::vector<std::string> only;
  std::vector<uint64_t> sizes = {4096, 1 << 20, 32 << 20};
  TimingOptions timing;
  RandomWorkloadSpec random;
  std::string log_dir = "/tmp";
  bool keep_log = false;
  std::string json_path;
};

bool ParseFlags(int argc, char** argv, Flags* flags, std::string* error) {
  for (const AllocatorKind& kind : AllKinds()) flags->only.push_back(kind.key);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--keep-log") {
      flags->keep_log = true;
      continue;
    }
    if (i + 1 >= argc) {
      *error = absl::StrCat("unknown flag or missing value: ", arg);
      return false;
    }
    const std::string value = argv[++i];
    bool ok = true;
    if (arg == "--device") {
      ok = absl::SimpleAtoi(value, &flags->device) && flags->device >= 0;
    } else if (arg == "--only") {
      flags->only = absl::StrSplit(value, ',', absl::SkipEmpty());
      for (const std::string& key : flags->only) {
        bool known = false;
        for (const AllocatorKind& kind : AllKinds()) known |= kind.key == key;
        ok &= known;
      }
    } else if (arg == "--sizes") {
      flags->sizes.clear();
      for (absl::string_view s : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        uint64_t size = 0;
        ok &= absl::SimpleAtoi(s, &size) && size > 0;
        flags->sizes.push_back(size);
      }
    } else if (arg == "--min-time") {
      ok = absl::SimpleAtod(value, &flags->timing.min_seconds) && flags->timing.min_seconds > 0;
    } else if (arg == "--repetitions") {
      ok = absl::SimpleAtoi(value, &flags->timing.repetitions) && flags->timing.repetitions > 0;
    } else if (arg == "--random-repetitions") {
      ok = absl::SimpleAtoi(value, &flags->timing.random_repetitions) &&
           flags->timing.random_repetitions > 0;
    } else if (arg == "--random-steps") {
      ok = absl::SimpleAtoi(value, &flags->random.steps) && flags->random.steps >= 0;
    } else if (arg == "--seed") {
      ok = absl::SimpleAtoi(value, &flags->random.seed);
    } else if (arg == "--log-dir") {
      flags->log_dir = value;
    } else if (arg == "--json") {
      flags->json_path = value;
    } else {
      *error = absl::StrCat("unknown flag: ", arg);
      return false;
    }
    if (!ok) {
      *error = absl::StrCat("bad value for ", arg, ": ", value);
      return false;
    }
  }
  return true;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string AllocConf() {
  const std::string conf = Env("PYTORCH_CUDA_ALLOC_CONF");
  return conf.empty() ? Env("PYTORCH_ALLOC_CONF") : conf;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

std::string UtcNow() {
  const time_t now = time(nullptr);
  tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return text;
}

struct Workload {
  std::string label;  // table row
  std::string unit;   // "ns/pair" or "ns/op"
  uint64_t size = 0;  // warm pair; 0 = the random workload
};

absl::StatusOr<std::unique_ptr<GpuAllocator>> Make(const std::string& key,
                                                   const GpuContext& context, const Flags& flags) {
  if (key == "fragscope") return MakeFragscopeAllocator(context, AllocConf(), "", false);
  if (key == "fragscope_log") {
    return MakeFragscopeAllocator(context, AllocConf(),
                                  absl::StrCat(flags.log_dir, "/gpu_allocator_comparison.%p.fslog"),
                                  flags.keep_log);
  }
  if (key == "torch") return MakeTorchNativeAllocator(context);
  if (key == "async") return MakeCudaMallocAsyncAllocator(context);
  return MakeCudaMallocAllocator(context);
}

std::string Cell(const Timing& t) {
  if (!t.error.empty()) return "error";
  auto number = [](double ns) {
    return ns < 10     ? absl::StrFormat("%.2f", ns)
           : ns < 1000 ? absl::StrFormat("%.1f", ns)
                       : absl::StrFormat("%.0f", ns);
  };
  return absl::StrCat(number(t.median_ns), " (", number(t.min_ns), ")");
}

int Run(const Flags& flags, const std::string& command) {
  std::string why;
  if (const int count = CudaDeviceCount(&why); count <= flags.device) {
    const std::string reason =
        count == 0 ? absl::StrCat("no CUDA device (", why, ")")
                   : absl::StrFormat("no CUDA device %d (%d devices)", flags.device, count);
    std::cout << "skipped: " << reason << "\n";
    if (!flags.json_path.empty()) {
      std::ofstream out(flags.json_path, std::ios::trunc);
      out << estimator::DumpJson({{"skipped", reason}});
    }
    return 0;
  }
  absl::StatusOr<GpuContext> context = CreateGpuContext(flags.device);
  if (!context.ok()) {
    std::cerr << "gpu_allocator_comparison: " << context.status().message() << "\n";
    return 1;
  }
  std::vector<Workload> workloads;
  for (uint64_t size : flags.sizes) {
    workloads.push_back({absl::StrCat("warm pair ", FormatSize(size)), "ns/pair", size});
  }
  const RandomWorkload random = MakeRandomWorkload(flags.random);
  workloads.push_back(
      {absl::StrFormat("random: %d ops, <= %d live (peak %d, %s), 512 B-64 MiB, seed %d",
                       random.ops.size(), flags.random.max_live, random.peak_live,
                       FormatSize(random.peak_live_bytes), flags.random.seed),
       "ns/op", 0});

  // results[allocator key][workload index]
  std::map<std::string, std::vector<Timing>> results;
  std::vector<std::string> notes;
  bool failed = false;
  for (const std::string& key : flags.only) {
    std::vector<Timing>& row = results[key];
    absl::StatusOr<std::unique_ptr<GpuAllocator>> allocator = Make(key, *context, flags);
    for (const Workload& w : workloads) {
      Timing t;
      if (!allocator.ok()) {
        t.error = std::string(allocator.status().message());
      } else if (w.size != 0) {
        t = TimeWarmPair(**allocator, w.size, flags.timing);
      } else {
        t = TimeRandomWorkload(**allocator, random, flags.timing);
      }
      if (allocator.ok()) (*allocator)->Release();
      if (!t.error.empty()) {
        failed = true;
        notes.push_back(absl::StrCat(key, ", ", w.label, ": ", t.error));
      }
      row.push_back(std::move(t));
    }
    if (allocator.ok() && !(*allocator)->Notes().empty()) {
      notes.push_back(absl::StrCat(key, ": ", (*allocator)->Notes()));
    }
  }

  const std::string device = DescribeDevice(flags.device);
  std::cout << "### GPU allocator comparison\n\n"
            << "- device: " << device << "\n- host CPU: " << CpuModel() << ", "
            << sysconf(_SC_NPROCESSORS_ONLN) << " cores\n- LibTorch " << TorchVersion()
            << "; PYTORCH_CUDA_ALLOC_CONF=\"" << AllocConf() << "\" (both caching allocators)\n"
            << "- date: " << UtcNow() << "\n- command: `" << command << "`\n"
            << "- cells: median (minimum) wall ns per operation over " << flags.timing.repetitions
            << " warm-pair batches of >= " << flags.timing.min_seconds << " s / "
            << flags.timing.random_repetitions
            << " random passes after a warm-up pass; one stream, one device\n\n";
  std::vector<std::string> header = {"workload"};
  for (const std::string& key : flags.only) {
    for (const AllocatorKind& kind : AllKinds()) {
      if (kind.key == key) header.push_back(kind.title);
    }
  }
  const bool ratio = results.count("torch") != 0 && results.count("fragscope_log") != 0;
  if (ratio) header.push_back("native / fragscope+log (goal >= 2)");
  std::cout << "| " << absl::StrJoin(header, " | ") << " |\n|";
  for (size_t i = 0; i < header.size(); ++i) std::cout << (i == 0 ? "---|" : "---:|");
  std::cout << "\n";
  for (size_t w = 0; w < workloads.size(); ++w) {
    std::vector<std::string> cells = {
        absl::StrCat(workloads[w].label, " (", workloads[w].unit, ")")};
    for (const std::string& key : flags.only) cells.push_back(Cell(results[key][w]));
    if (ratio) {
      const Timing& native = results["torch"][w];
      const Timing& ours = results["fragscope_log"][w];
      cells.push_back(native.error.empty() && ours.error.empty() && ours.median_ns > 0
                          ? absl::StrFormat("%.2fx", native.median_ns / ours.median_ns)
                          : "-");
    }
    std::cout << "| " << absl::StrJoin(cells, " | ") << " |\n";
  }
  if (!notes.empty()) std::cout << "\n- " << absl::StrJoin(notes, "\n- ") << "\n";

  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path, std::ios::trunc);
    estimator::OrderedJson json;
    json["schema"] = "fragscope.gpu_allocator_comparison/1";
    json["device"] = device;
    json["host_cpu"] = CpuModel();
    json["torch"] = TorchVersion();
    json["alloc_conf"] = AllocConf();
    json["date"] = UtcNow();
    json["command"] = command;
    estimator::OrderedJson rows = estimator::OrderedJson::array();
    for (const std::string& key : flags.only) {
      for (size_t w = 0; w < workloads.size(); ++w) {
        const Timing& t = results[key][w];
        rows.push_back({{"allocator", key},
                        {"workload", workloads[w].label},
                        {"unit", workloads[w].unit},
                        {"median_ns", estimator::JsonNumber(t.median_ns, 6)},
                        {"min_ns", estimator::JsonNumber(t.min_ns, 6)},
                        {"batch_ops", t.batch_ops},
                        {"batches", t.batches},
                        {"error", t.error}});
      }
    }
    json["results"] = std::move(rows);
    json["notes"] = notes;
    out << estimator::DumpJson(json);
    if (!out) {
      std::cerr << "gpu_allocator_comparison: cannot write " << flags.json_path << "\n";
      failed = true;
    }
  }
  DestroyGpuContext(*context);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace fragscope::bench

int main(int argc, char** argv) {
  return fragscope::bench::GpuBenchMain(argc, argv, "gpu_allocator_comparison",
                                        fragscope::bench::kUsage, fragscope::bench::ParseFlags,
                                        fragscope::bench::Run);
}
