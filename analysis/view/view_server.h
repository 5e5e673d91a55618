// ViewServer: serves the viewer's files on the loopback interface only, plus one API
// (/api/layout?event=N, or ?source=ID&event=N in a view of several traces), for
// `fragscope view --port`.
//
// Hand-written over POSIX sockets rather than Debian's cpp-httplib: that package is a shared
// library linking OpenSSL, zlib and Brotli (ldd: 12 libraries), which the command and the wheel
// would then need on every user's machine, for a server of in-memory files on 127.0.0.1. It
// answers GET and HEAD of exactly the paths it was given ("/" is "/index.html") and 404 to
// anything else, `..` and encoded forms included: there is no file system behind it. One request
// per connection (Connection: close), requests over 8 KiB refused, a 10 s read timeout.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragscope {

struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class ViewServer {
 public:
  // `files`: path relative to the root ("index.html", "data/meta.js") -> content.
  // `api`: answers /api/layout?event=N with (source, N): `source` is the query's source=ID
  // ("" without one; ID of letters and digits only). Called on the serving thread, one request at
  // a time.
  using LayoutApi = std::function<HttpAnswer(const std::string& source, uint64_t event)>;
  ViewServer(std::map<std::string, std::string> files, LayoutApi api);
  ~ViewServer();

  // Binds 127.0.0.1:port (0: a free port). Errors name the port and the reason.
  absl::Status Bind(uint16_t port);
  uint16_t port() const { return port_; }
  // Serves until Stop() (from another thread or a signal handler's flag).
  absl::Status Serve();
  void Stop() { stop_ = true; }

  // One request's answer, from its raw text (exposed for tests).
  HttpAnswer Answer(const std::string& request) const;

 private:
  void HandleConnection(int fd) const;

  std::map<std::string, std::string> files_;
  LayoutApi api_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
};

// The Content-Type of a served path, from its extension.
std::string ContentTypeOf(const std::string& path);

}  // namespace fragscope
