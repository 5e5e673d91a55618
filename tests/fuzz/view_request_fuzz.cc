// libFuzzer target for the viewer's loopback server (analysis/view/view_server.h): any bytes as
// an HTTP request. Properties checked on every input: nothing crashes or trips a sanitizer; the
// answer is one of the statuses the server gives; a file is served only under its exact name,
// and the layout API only for a decimal event number and a source of letters and digits.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>

#include "allocator/check.h"
#include "analysis/view/view_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fragscope::ViewServer* const server =
      new fragscope::ViewServer({{"index.html", "page"}, {"data/meta.js", "meta"}},
                                [](const std::string& source, uint64_t event) {
                                  // The source reaches the API only as letters and digits.
                                  for (const char c : source)
                                    FRAGSCOPE_CHECK(std::isalnum(static_cast<unsigned char>(c)));
                                  return fragscope::HttpAnswer{.body = std::to_string(event)};
                                });
  const std::string request(reinterpret_cast<const char*>(data), size);
  const fragscope::HttpAnswer answer = server->Answer(request);
  FRAGSCOPE_CHECK(answer.status == 200 || answer.status == 400 || answer.status == 404 ||
                  answer.status == 405);
  if (answer.status == 200) {
    FRAGSCOPE_CHECK(answer.body == "page" || answer.body == "meta" ||
                    request.find("/api/layout?") != std::string::npos);
  }
  return 0;
}
