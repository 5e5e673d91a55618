// `fragscope view LOG [--out DIR] [--port N]`: the interactive viewer (analysis/view/README.md).
#include <atomic>
#include <csignal>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "analysis/cli/analysis_commands.h"
#include "analysis/cli/cli_flags.h"
#include "analysis/cli/output_directory.h"
#include "analysis/open_trace.h"
#include "analysis/view/view_files.h"
#include "analysis/view/view_server.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "view",
      .synopsis = "LOG (--out DIR | --port N) [trace options] [sweep options]",
      .description =
          R"(An interactive memory viewer in the browser, offline: the job's allocated, reserved, active
and demand memory with the cap, its phases and OOMs, zooming from the whole job to single
operations; click a moment for the allocator's segment map then (segments, blocks, holes, each
block's request, phase and role); each OOM's explanation with its pinning blocks marked; the
sweep's settings over the timeline. LOG is an .fslog log, a PyTorch snapshot pickle or an RMM
CSV (--device N picks one device of a snapshot). The trace is replayed as `analyze` replays it.
--out DIR writes the page as files (open DIR/index.html; DIR must be new, empty, or an earlier
view). --port N serves it on 127.0.0.1:N only (0: a free port), where any moment clicked is
replayed exactly; elsewhere the page shows the nearest of the moments it carries (each OOM, the
peak, the end). Ctrl-C stops the server.)",
      .flags =
          Flags({{{"--out", "DIR", "write the viewer's files into DIR"},
                  {"--port", "N", "serve the viewer on http://127.0.0.1:N/ (0: any free port)"}},
                 kTraceFlags,
                 kSweepFlags}),
      .positional = {.min = 1, .max = 1, .error = "expected one trace"},
  };
  return spec;
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
  const std::string& path = flags->positional[0];
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(path, {options.analysis.device});
  if (!opener.ok()) {
    err << "fragscope view: " << opener.status().message() << "\n";
    return 1;
  }
  options.api = port_text != nullptr;
  absl::StatusOr<ViewBuild> build = BuildViewFiles(*opener, options);
  if (!build.ok()) {
    err << "fragscope view: " << build.status().message() << "\n";
    return 1;
  }
  if (out_dir != nullptr) {
    // The files written carry no API: they are opened without the server.
    std::map<std::string, std::string> files = build->files;
    estimator::OrderedJson meta = build->meta;
    meta["api"] = false;
    files["data/meta.js"] = ViewMetaScript(meta);
    if (absl::Status s = WriteOutputDirectory(*out_dir, files, "data/meta.js"); !s.ok()) {
      err << "fragscope view: " << s.message() << "\n";
      return 1;
    }
    out << "fragscope view: wrote " << files.size() << " files (" << build->events << " events, "
        << build->tiles << " tiles) to " << *out_dir << "; open " << *out_dir << "/index.html\n";
  }
  if (port_text == nullptr) return 0;

  ViewServer server(std::move(build->files), [&](uint64_t event) {
    return ViewLayoutAnswer(*opener, options.analysis, event);
  });
  if (absl::Status s = server.Bind(static_cast<uint16_t>(port)); !s.ok()) {
    err << "fragscope view: " << s.message() << "\n";
    return 1;
  }
  g_server = &server;
  std::signal(SIGINT, StopServer);
  std::signal(SIGTERM, StopServer);
  out << "fragscope view: serving " << path << " on http://127.0.0.1:" << server.port()
      << "/ (Ctrl-C stops)" << std::endl;
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
