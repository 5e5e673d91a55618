// `fragscope view TRACE|DIR... [--diff] (--out DIR | --port N)`: the interactive viewer
// (analysis/view/README.md).
#include <atomic>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "analysis/ranks/rank_inputs.h"
#include "analysis/sources/open_trace.h"
#include "analysis/view/view_files.h"
#include "analysis/view/view_server.h"
#include "analysis/view/view_set.h"
#include "cli/analysis_commands.h"
#include "cli/cli_flags.h"
#include "cli/output_directory.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "view",
      .synopsis = "TRACE|DIR... [--diff] (--out DIR | --port N) [trace options] [sweep options]",
      .description =
          R"(An interactive memory viewer in the browser, offline: the job's allocated, reserved, active
and demand memory with the cap, its phases and OOMs, zooming from the whole job to single
operations; click a moment for the allocator's segment map then (segments, blocks, holes, each
block's request, phase and role); each OOM's explanation with its pinning blocks marked; the
sweep's settings over the timeline. A trace is an .fslog log, a PyTorch snapshot pickle or an RMM
CSV (--device N picks one device of a snapshot), replayed as `analyze` replays it.
Several traces, a directory or a pattern (as `analyze` takes them) are the ranks of one job: a
rank selector and the cross-rank summary (outliers, groups), each rank's own view (the sweep on
the worst rank only). --diff with two traces sets them side by side as `fragscope diff` does:
both timelines zoom together, aligned by their phase markers, a moment clicked shows both
layouts, and the table gives the peaks and each phase of both.
--out DIR writes the page as files (open DIR/index.html; DIR must be new, empty, or an earlier
view). --port N serves it on 127.0.0.1:N only (0: a free port), where any moment clicked is
replayed exactly; elsewhere the page shows the nearest of the moments it carries (each OOM, the
peak, the end). Ctrl-C stops the server.)",
      .flags =
          Flags({{{"--out", "DIR", "write the viewer's files into DIR"},
                  {"--port", "N", "serve the viewer on http://127.0.0.1:N/ (0: any free port)"},
                  {"--diff", "", "two traces side by side (A B)"}},
                 kTraceFlags,
                 kSweepFlags}),
      .positional = {.min = 1, .error = "expected a trace"},
  };
  return spec;
}

// One trace, the ranks of a job (several traces, a directory, a pattern), or two traces (--diff).
absl::StatusOr<ViewSet> BuildSet(const ParsedFlags& flags, const ViewBuildOptions& options) {
  const std::vector<std::string>& args = flags.positional;
  if (flags.Has("--diff")) {
    absl::StatusOr<TraceOpener> a = TraceOpener::Create(args[0], {options.analysis.device});
    if (!a.ok()) return a.status();
    absl::StatusOr<TraceOpener> b = TraceOpener::Create(args[1], {options.analysis.device});
    if (!b.ok()) return b.status();
    return BuildDiffViewSet(*a, *b, options);
  }
  absl::StatusOr<std::vector<std::string>> paths = ExpandTraceInputs(args);
  if (!paths.ok()) return paths.status();
  if (paths->size() == 1 && args.size() == 1 && !std::filesystem::is_directory(args[0])) {
    absl::StatusOr<TraceOpener> opener =
        TraceOpener::Create(paths->front(), {options.analysis.device});
    if (!opener.ok()) return opener.status();
    return BuildTraceViewSet(*opener, options);
  }
  return BuildRankViewSet(*paths, options);
}

std::atomic<ViewServer*> g_server{nullptr};

void StopServer(int) {
  if (ViewServer* server = g_server.load()) server->Stop();
}

}  // namespace

int RunViewCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  ViewBuildOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options.analysis); !s.ok()) {
    return UsageError(err, "view", s.message());
  }
  const std::string* out_dir = flags->Get("--out");
  const std::string* port_text = flags->Get("--port");
  if (out_dir == nullptr && port_text == nullptr) {
    return UsageError(err, "view", "give --out DIR (files) or --port N (a local server)");
  }
  uint64_t port = 0;
  if (port_text != nullptr) {
    absl::StatusOr<uint64_t> parsed = ParseCount(*port_text, "--port");
    if (!parsed.ok() || *parsed > 65535) {
      return UsageError(err, "view", absl::StrCat("--port ", *port_text, ": expected 0 to 65535"));
    }
    port = *parsed;
  }
  if (flags->Has("--diff") && flags->positional.size() != 2) {
    return UsageError(err, "view", "--diff takes two traces, A B");
  }
  options.api = port_text != nullptr;
  absl::StatusOr<ViewSet> set = BuildSet(*flags, options);
  if (!set.ok()) {
    err << "fragscope view: " << set.status().message() << "\n";
    return 1;
  }
  if (out_dir != nullptr) {
    // The files written carry no API: they are opened without the server.
    std::map<std::string, std::string> files = set->files;
    estimator::OrderedJson meta = set->meta;
    meta["api"] = false;
    files["data/meta.js"] = ViewMetaScript(meta);
    if (absl::Status s = WriteOutputDirectory(*out_dir, files, "data/meta.js"); !s.ok()) {
      err << "fragscope view: " << s.message() << "\n";
      return 1;
    }
    out << "fragscope view: wrote " << files.size() << " files (" << set->events << " events, "
        << set->tiles << " tiles) to " << *out_dir << "; open " << *out_dir << "/index.html\n";
  }
  if (port_text == nullptr) return 0;

  ViewServer server(set->files, [&](const std::string& source, uint64_t event) {
    return ViewSetLayoutAnswer(*set, options.analysis, source, event);
  });
  if (absl::Status s = server.Bind(static_cast<uint16_t>(port)); !s.ok()) {
    err << "fragscope view: " << s.message() << "\n";
    return 1;
  }
  g_server = &server;
  std::signal(SIGINT, StopServer);
  std::signal(SIGTERM, StopServer);
  out << "fragscope view: serving " << set->meta["title"].get<std::string>()
      << " on http://127.0.0.1:" << server.port() << "/ (Ctrl-C stops)" << std::endl;
  absl::Status served = server.Serve();
  g_server = nullptr;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!served.ok()) {
    err << "fragscope view: " << served.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace fragscope::cli
