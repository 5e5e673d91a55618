// gpu_history_overhead: what recording every allocation event costs PyTorch's own allocator
// (the comparison the event log's design makes: PyTorch's _record_memory_history is quoted at
// 1.5-2 us per event).
// PyTorch's native caching allocator (LibTorch raw_alloc_with_stream / raw_delete, as in
// gpu_allocator_comparison) runs the same warm pairs and random workload (gpu_workloads.h) under
// six recording settings in two phases. Without a trace tracker:
//
//   native            nothing recorded
//   history           recordHistory with a 100,000-entry ring and no context (the C++ side of
//                     torch.cuda.memory._record_memory_history(context=None, max_entries=100000))
//   history + stacks  the same with a C++ stack per event (RecordContext::ALL and
//                     CapturedTraceback::gather(cpp=true): what _record_memory_history's defaults,
//                     context="all", stacks="all", record in a process without Python frames)
//
// then, with the benchmark's own trace tracker attached (PyTorch cannot detach one), which
// forwards every entry to fragscope's observer (hooks/torch_observer.h MakeNativeObserver: the
// observe mode's converter and .fslog writer) only while observe is on:
//
//   idle tracker      the tracker forwarding nothing: what PyTorch spends on any tracker
//                     (building each TraceEntry, the call)
//   fragscope observe the tracker forwarding to the observer, as observe mode runs
//   idle + history    the idle tracker with the history ring on
//
// Each phase's settings are toggled: --rounds N runs them in turn N times, so the host's drift
// falls on all of them alike. The report gives each setting's median ns per pair / operation (the
// median of its rounds' medians) and the ns it adds per event against native (a warm pair is 3
// events: alloc, free_requested, free_completed; an operation of the random workload 1.5, since
// every allocation is freed); then what observe and the history ring each add over the idle
// tracker, measured side by side in the second phase: the comparison observe mode's target is
// judged by (observe at most the ring without stacks). The observe log holds the events of the
// observe rounds only.
//
// Without a CUDA device it prints "skipped: no CUDA device (...)" and exits 0. Exit status 1 when
// an allocator setting failed, 2 for bad flags.
#include <torch/csrc/profiler/combined_traceback.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/format_size.h"
#include "bench/gpu_allocator.h"
#include "bench/gpu_bench_main.h"
#include "bench/gpu_workloads.h"
#include "estimator/json_document.h"
#include "hooks/torch_observer.h"

namespace fragscope::bench {
namespace {

constexpr char kUsage[] =
    R"(usage: gpu_history_overhead [--device N] [--min-time SECONDS] [--repetitions N]
    [--random-steps N] [--rounds N] [--log-dir DIR] [--json PATH]

  --device N           the CUDA device, default 0
  --min-time SECONDS   a timed warm-pair batch lasts at least this, default 0.1
  --repetitions N      in each round, the timed batches of each warm pair (default 5) and the
                       timed passes of the random workload after its untimed one (default 3):
                       N sets both
  --random-steps N     steps of the random workload, default 20000
  --rounds N           rounds of each phase's settings in turn, default 3; a cell is the
                       median of the rounds' medians
  --log-dir DIR        where fragscope observe writes its .fslog, default /tmp (kept: the
                       events of the observe rounds)
  --json PATH          also write every setting's and workload's medians (each round's too) as
                       JSON to PATH
)";

constexpr size_t kHistoryEntries = 100000;

struct Flags {
  int device = 0;
  TimingOptions timing;
  RandomWorkloadSpec random;
  int rounds = 3;
  std::string log_dir = "/tmp";
  std::string json_path;
};

bool ParseFlags(int argc, char** argv, Flags* flags, std::string* error) {
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      *error = absl::StrCat("unknown flag or missing value: ", arg);
      return false;
    }
    const std::string value = argv[i + 1];
    bool ok = true;
    if (arg == "--device") {
      ok = absl::SimpleAtoi(value, &flags->device) && flags->device >= 0;
    } else if (arg == "--min-time") {
      ok = absl::SimpleAtod(value, &flags->timing.min_seconds) && flags->timing.min_seconds > 0;
    } else if (arg == "--repetitions") {
      ok = absl::SimpleAtoi(value, &flags->timing.repetitions) && flags->timing.repetitions > 0;
      flags->timing.random_repetitions = flags->timing.repetitions;
    } else if (arg == "--random-steps") {
      ok = absl::SimpleAtoi(value, &flags->random.steps) && flags->random.steps >= 0;
    } else if (arg == "--rounds") {
      ok = absl::SimpleAtoi(value, &flags->rounds) && flags->rounds > 0;
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

std::shared_ptr<c10::GatheredContext> GatherCppStack() {
  return torch::CapturedTraceback::gather(/*python=*/false, /*script=*/false, /*cpp=*/true);
}

void RecordHistory(bool enabled, bool stacks) {
  using c10::cuda::CUDACachingAllocator::RecordContext;
  c10::cuda::CUDACachingAllocator::recordHistory(
      enabled, stacks ? &GatherCppStack : nullptr, kHistoryEntries,
      stacks ? RecordContext::ALL : RecordContext::NEVER, /*clearHistory=*/true, {});
}

struct Setting {
  std::string key;    // JSON name
  std::string title;  // column header
  int phase;          // 2: with the benchmark's tracker attached
};

// The first is the baseline.
const std::vector<Setting>& Settings() {
  static const std::vector<Setting> settings = {{"native", "native", 1},
                                                {"history", "history", 1},
                                                {"history_stacks", "history + C++ stacks", 1},
                                                {"tracker_idle", "idle tracker", 2},
                                                {"observe", "fragscope observe", 2},
                                                {"tracker_history", "idle tracker + history", 2}};
  return settings;
}

// The benchmark's trace tracker: forwards each entry to fragscope's observer while `forward` is
// set. Lives as long as the process, since PyTorch keeps the tracker.
struct ObserveSwitch {
  std::unique_ptr<torch_hooks::TraceObserver> observer;
  std::atomic<bool> forward{false};
};
ObserveSwitch* g_switch = nullptr;

// Turns `setting` on and the others off; the first setting of phase 2 attaches the tracker.
absl::Status Enter(const Setting& setting, const Flags& flags) {
  const std::string& key = setting.key;
  try {
    RecordHistory(key == "history" || key == "history_stacks" || key == "tracker_history",
                  key == "history_stacks");
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("recordHistory: ", e.what_without_backtrace()));
  }
  if (setting.phase == 2 && g_switch == nullptr) {
    absl::StatusOr<std::unique_ptr<torch_hooks::TraceObserver>> observer =
        torch_hooks::MakeNativeObserver(
            absl::StrCat(flags.log_dir, "/gpu_history_overhead.%p.fslog"));
    if (!observer.ok()) return observer.status();
    g_switch = new ObserveSwitch{std::move(*observer)};
    ObserveSwitch* sw = g_switch;
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
        [sw](const c10::cuda::CUDACachingAllocator::TraceEntry& entry) {
          if (sw->forward.load(std::memory_order_relaxed)) sw->observer->OnTrace(entry);
        });
  }
  if (g_switch != nullptr) g_switch->forward.store(key == "observe", std::memory_order_relaxed);
  return absl::OkStatus();
}

struct Workload {
  std::string label;
  uint64_t size = 0;         // warm pair; 0 = the random workload
  double events_per_op = 0;  // allocator events PyTorch records per timed operation
};

// 0 for none.
double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string Ns(double ns) {
  return ns < 1000 ? absl::StrFormat("%.1f", ns) : absl::StrFormat("%.0f", ns);
}

int Run(const Flags& flags, const std::string& command) {
  std::string why;
  if (const int count = CudaDeviceCount(&why); count <= flags.device) {
    std::cout << "skipped: "
              << (count == 0 ? absl::StrCat("no CUDA device (", why, ")")
                             : absl::StrFormat("no CUDA device %d", flags.device))
              << "\n";
    return 0;
  }
  absl::StatusOr<GpuContext> context = CreateGpuContext(flags.device);
  if (!context.ok()) {
    std::cerr << "gpu_history_overhead: " << context.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<GpuAllocator>> native =
      MakeTorchNativeAllocator(*context, /*allow_fragscope_observer=*/true);
  if (!native.ok()) {
    std::cerr << "gpu_history_overhead: " << native.status().message() << "\n";
    return 1;
  }
  const RandomWorkload random = MakeRandomWorkload(flags.random);
  std::vector<Workload> workloads;
  for (uint64_t size : {uint64_t{4096}, uint64_t{1} << 20, uint64_t{32} << 20}) {
    workloads.push_back({absl::StrCat("warm pair ", FormatSize(size), " (ns/pair)"), size, 3.0});
  }
  workloads.push_back({absl::StrFormat("random, %d ops (ns/op)", random.ops.size()), 0, 1.5});

  // rounds[setting][workload]: the median of each round.
  const std::vector<Setting>& all = Settings();
  const size_t settings = all.size();
  std::vector<std::vector<std::vector<double>>> rounds(
      settings, std::vector<std::vector<double>>(workloads.size()));
  std::vector<std::string> errors;
  auto measure = [&](size_t s) {
    const absl::Status entered = Enter(all[s], flags);
    for (size_t w = 0; w < workloads.size(); ++w) {
      Timing t;
      if (!entered.ok()) {
        t.error = std::string(entered.message());
      } else {
        t = workloads[w].size != 0 ? TimeWarmPair(**native, workloads[w].size, flags.timing)
                                   : TimeRandomWorkload(**native, random, flags.timing);
        (*native)->Release();
      }
      if (t.error.empty()) {
        rounds[s][w].push_back(t.median_ns);
      } else {
        errors.push_back(absl::StrCat(all[s].key, ", ", workloads[w].label, ": ", t.error));
      }
    }
  };
  for (int phase : {1, 2}) {
    for (int r = 0; r < flags.rounds; ++r) {
      for (size_t s = 0; s < settings; ++s) {
        if (all[s].phase == phase) measure(s);
      }
    }
  }
  if (g_switch != nullptr) {  // the tracker stays, forwarding nothing; the log is closed
    g_switch->forward.store(false, std::memory_order_relaxed);
    g_switch->observer.reset();
  }

  std::cout << "### What recording costs PyTorch's native allocator\n\n- device: "
            << DescribeDevice(flags.device) << "\n- LibTorch " << TorchVersion()
            << "; history ring " << kHistoryEntries << " entries\n- command: `" << command
            << "`\n- cells: median wall ns per pair / operation (of " << flags.rounds
            << " rounds); added: ns per recorded event against native (a warm pair is 3 events, a "
               "random operation 1.5)\n\n";
  std::vector<std::string> header = {"workload"};
  for (const Setting& s : all) header.push_back(s.title);
  for (size_t s = 1; s < settings; ++s)
    header.push_back(absl::StrCat(all[s].title, ": added per event"));
  std::cout << "| " << absl::StrJoin(header, " | ") << " |\n|---|";
  for (size_t i = 1; i < header.size(); ++i) std::cout << "---:|";
  std::cout << "\n";
  // medians[setting][workload]; 0 when the setting failed.
  std::vector<std::vector<double>> medians(settings, std::vector<double>(workloads.size()));
  for (size_t s = 0; s < settings; ++s) {
    for (size_t w = 0; w < workloads.size(); ++w) medians[s][w] = Median(rounds[s][w]);
  }
  for (size_t w = 0; w < workloads.size(); ++w) {
    std::vector<std::string> cells = {workloads[w].label};
    for (size_t s = 0; s < settings; ++s) {
      cells.push_back(medians[s][w] > 0 ? Ns(medians[s][w]) : "error");
    }
    const double base = medians[0][w];
    for (size_t s = 1; s < settings; ++s) {
      const double ns = medians[s][w];
      cells.push_back(ns > 0 && base > 0 ? absl::StrFormat("%+.1f ns (%+.0f %%)",
                                                           (ns - base) / workloads[w].events_per_op,
                                                           100 * (ns / base - 1))
                                         : "-");
    }
    std::cout << "| " << absl::StrJoin(cells, " | ") << " |\n";
  }
  // The target's comparison: observe and the ring, each over the idle tracker, side by side.
  auto index = [&](std::string_view key) {
    return static_cast<size_t>(
        std::find_if(all.begin(), all.end(), [&](const Setting& s) { return s.key == key; }) -
        all.begin());
  };
  const size_t idle = index("tracker_idle"), observe = index("observe"),
               ring = index("tracker_history");
  std::cout << "\nWith the tracker attached, added per event over the idle tracker:\n\n"
               "| workload | fragscope observe | history ring | observe <= ring |\n"
               "|---|---:|---:|---|\n";
  for (size_t w = 0; w < workloads.size(); ++w) {
    const double base = medians[idle][w], o = medians[observe][w], h = medians[ring][w];
    if (base <= 0 || o <= 0 || h <= 0) {
      std::cout << "| " << workloads[w].label << " | - | - | - |\n";
      continue;
    }
    const double per = workloads[w].events_per_op;
    std::cout << absl::StrFormat("| %s | %+.1f ns | %+.1f ns | %s |\n", workloads[w].label,
                                 (o - base) / per, (h - base) / per, o <= h ? "yes" : "no");
  }
  if (!errors.empty()) std::cout << "\n- " << absl::StrJoin(errors, "\n- ") << "\n";

  if (!flags.json_path.empty()) {
    std::ofstream out(flags.json_path, std::ios::trunc);
    estimator::OrderedJson json;
    json["schema"] = "fragscope.gpu_history_overhead/1";
    json["device"] = DescribeDevice(flags.device);
    json["torch"] = TorchVersion();
    json["command"] = command;
    estimator::OrderedJson rows = estimator::OrderedJson::array();
    for (size_t s = 0; s < settings; ++s) {
      for (size_t w = 0; w < workloads.size(); ++w) {
        estimator::OrderedJson round_medians = estimator::OrderedJson::array();
        for (double ns : rounds[s][w]) round_medians.push_back(estimator::JsonNumber(ns, 6));
        rows.push_back({{"setting", all[s].key},
                        {"workload", workloads[w].label},
                        {"events_per_op", estimator::JsonNumber(workloads[w].events_per_op, 6)},
                        {"median_ns", estimator::JsonNumber(medians[s][w], 6)},
                        {"round_medians_ns", std::move(round_medians)}});
      }
    }
    json["results"] = std::move(rows);
    out << estimator::DumpJson(json);
  }
  DestroyGpuContext(*context);
  return errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace fragscope::bench

int main(int argc, char** argv) {
  return fragscope::bench::GpuBenchMain(argc, argv, "gpu_history_overhead",
                                        fragscope::bench::kUsage, fragscope::bench::ParseFlags,
                                        fragscope::bench::Run);
}
