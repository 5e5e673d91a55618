#include "analysis/view/view_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fragscope {
namespace {

ViewServer Server() {
  return ViewServer({{"index.html", "<html>page</html>"}, {"data/meta.js", "meta();"}},
                    [](const std::string& source, uint64_t event) {
                      return HttpAnswer{.body = absl::StrCat(source, ":", event)};
                    });
}

HttpAnswer Get(const ViewServer& server, const std::string& target) {
  return server.Answer(absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: x\r\n\r\n"));
}

TEST(ViewServerTest, ServesOnlyTheFilesItWasGiven) {
  const ViewServer server = Server();
  EXPECT_EQ(Get(server, "/").body, "<html>page</html>");
  EXPECT_EQ(Get(server, "/").content_type, "text/html; charset=utf-8");
  EXPECT_EQ(Get(server, "/data/meta.js").body, "meta();");
  EXPECT_EQ(Get(server, "/data/meta.js?x=1").body, "meta();");
  for (const char* hostile :
       {"/../index.html", "/data/../index.html", "/%2e%2e/etc/passwd", "/..%2findex.html",
        "/etc/passwd", "/data", "/data/", "//index.html", "index.html", "/index.html/",
        "/./index.html", "/DATA/meta.js", "/data/meta.js%00"}) {
    EXPECT_EQ(Get(server, hostile).status, 404) << hostile;
  }
  EXPECT_EQ(server.Answer("POST / HTTP/1.1\r\n\r\n").status, 405);
  EXPECT_EQ(server.Answer("garbage\r\n\r\n").status, 400);
  EXPECT_EQ(server.Answer("GET / SMTP\r\n\r\n").status, 400);
}

TEST(ViewServerTest, TheLayoutApiTakesOneEventNumberAndASource) {
  const ViewServer server = Server();
  EXPECT_EQ(Get(server, "/api/layout?event=42").body, ":42");
  EXPECT_EQ(Get(server, "/api/layout?source=s3&event=42").body, "s3:42");
  EXPECT_EQ(Get(server, "/api/layout?event=7&source=b").body, "b:7");
  for (const char* bad :
       {"/api/layout", "/api/layout?event=", "/api/layout?event=-1", "/api/layout?event=1x",
        "/api/layout?event=+1", "/api/layout?event= 1", "/api/layout?event=1&event=2",
        "/api/layout?event=99999999999999999999999", "/api/layout?other=1",
        "/api/layout?event=1&other=1", "/api/layout?source=s1", "/api/layout?source=&event=1",
        "/api/layout?source=../a&event=1", "/api/layout?source=a%2fb&event=1",
        "/api/layout?source=a&source=b&event=1", "/api/layout?event=1&"}) {
    EXPECT_EQ(Get(server, bad).status, 400) << bad;
  }
}

// Over a real socket: bound to the loopback interface, one answer per connection.
TEST(ViewServerTest, AnswersOnTheLoopbackInterface) {
  ViewServer server = Server();
  ASSERT_TRUE(server.Bind(0).ok());
  ASSERT_NE(server.port(), 0);
  std::thread serving([&server] { ASSERT_TRUE(server.Serve().ok()); });
  auto fetch = [&](const std::string& request) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(server.port());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    std::string answer;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
      answer.append(buffer, static_cast<size_t>(n));
    ::close(fd);
    return answer;
  };
  const std::string page = fetch("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(page, "HTTP/1.1 200 OK\r\n")) << page;
  EXPECT_TRUE(absl::EndsWith(page, "\r\n\r\n<html>page</html>")) << page;
  EXPECT_TRUE(absl::StartsWith(fetch("GET /../x HTTP/1.1\r\n\r\n"), "HTTP/1.1 404")) << "404";
  const std::string head = fetch("HEAD /data/meta.js HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::EndsWith(head, "\r\n\r\n")) << head;
  EXPECT_TRUE(absl::StrContains(head, "Content-Length: 7")) << head;
  server.Stop();
  serving.join();
}

}  // namespace
}  // namespace fragscope
