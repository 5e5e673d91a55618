#include "analysis/view/view_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace fragscope {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kReadTimeoutMs = 10000;

HttpAnswer Plain(int status, std::string body) {
  return {.status = status, .content_type = "text/plain; charset=utf-8", .body = std::move(body)};
}

absl::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    default:
      return "Error";
  }
}

void WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the browser went away
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

std::string ContentTypeOf(const std::string& path) {
  if (absl::EndsWith(path, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(path, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(path, ".css")) return "text/css; charset=utf-8";
  if (absl::EndsWith(path, ".json")) return "application/json";
  return "application/octet-stream";
}

ViewServer::ViewServer(std::map<std::string, std::string> files, LayoutApi api)
    : files_(std::move(files)), api_(std::move(api)) {}

ViewServer::~ViewServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

absl::Status ViewServer::Bind(uint16_t port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int on = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never another interface
  address.sin_port = htons(port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on 127.0.0.1:", port, ": ", std::strerror(errno)));
  }
  socklen_t length = sizeof address;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  return absl::OkStatus();
}

absl::Status ViewServer::Serve() {
  while (!stop_) {
    pollfd p{.fd = listen_fd_, .events = POLLIN, .revents = 0};
    const int ready = ::poll(&p, 1, 200);  // wakes to see Stop()
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (ready <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    HandleConnection(fd);
    ::close(fd);
  }
  return absl::OkStatus();
}

void ViewServer::HandleConnection(int fd) const {
  std::string request;
  char buffer[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() <= kMaxRequestBytes) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, kReadTimeoutMs) <= 0) return;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  const bool head = absl::StartsWith(request, "HEAD ");
  const HttpAnswer answer =
      request.size() > kMaxRequestBytes ? Plain(413, "request too large\n") : Answer(request);
  WriteAll(fd, absl::StrCat("HTTP/1.1 ", answer.status, " ", Reason(answer.status),
                            "\r\nContent-Type: ", answer.content_type,
                            "\r\nContent-Length: ", answer.body.size(),
                            "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff"
                            "\r\nConnection: close\r\n\r\n"));
  if (!head) WriteAll(fd, answer.body);
}

HttpAnswer ViewServer::Answer(const std::string& request) const {
  const absl::string_view line = absl::string_view(request).substr(0, request.find("\r\n"));
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Plain(400, "not an HTTP request\n");
  }
  if (parts[0] != "GET" && parts[0] != "HEAD") return Plain(405, "only GET and HEAD\n");
  const absl::string_view target = parts[1];
  const size_t question = target.find('?');
  const absl::string_view path = target.substr(0, question);
  const absl::string_view query =
      question == absl::string_view::npos ? absl::string_view() : target.substr(question + 1);
  if (path == "/api/layout") {
    // event=N, and optionally source=ID, in either order; anything else is refused.
    std::optional<uint64_t> event;
    std::optional<std::string> source;
    for (absl::string_view pair : absl::StrSplit(query, '&')) {
      uint64_t n = 0;
      if (absl::StartsWith(pair, "event=") && !event && absl::SimpleAtoi(pair.substr(6), &n) &&
          absl::ascii_isdigit(static_cast<unsigned char>(pair[6]))) {
        event = n;
      } else if (absl::StartsWith(pair, "source=") && !source && pair.size() > 7 &&
                 std::all_of(pair.begin() + 7, pair.end(), [](char c) {
                   return absl::ascii_isalnum(static_cast<unsigned char>(c));
                 })) {
        source = std::string(pair.substr(7));
      } else {
        event.reset();
        break;
      }
    }
    if (!event) {
      return {.status = 400, .body = R"({"error": "expected /api/layout?event=N[&source=ID]"})"};
    }
    return api_(source.value_or(""), *event);
  }
  if (!absl::StartsWith(path, "/")) return Plain(404, "not found\n");
  const std::string key = path == "/" ? "index.html" : std::string(path.substr(1));
  auto it = files_.find(key);
  if (it == files_.end()) return Plain(404, "not found\n");
  return {.status = 200, .content_type = ContentTypeOf(key), .body = it->second};
}

}  // namespace fragscope
