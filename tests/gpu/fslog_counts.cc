// fslog_counts: reads an .fslog with the project's reader (CRCs checked) and prints a JSON summary
// for the Python GPU tests:
//   {"device":0,"device_name":"NVIDIA H100 ...","options":"...","warnings":0,
//    "kinds":{"alloc":12,"free_requested":12,...},"markers":["step 1"],
//    "alloc_requested_bytes":123456,"oom_bytes":[...]}
// Exit status 1 (and the error on stderr) when the file cannot be read completely.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fslog/fslog_reader.h"

namespace {

std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fslog_counts FILE.fslog\n");
    return 2;
  }
  absl::StatusOr<fragscope::FslogReader> reader = fragscope::FslogReader::Open(argv[1]);
  if (!reader.ok()) {
    std::fprintf(stderr, "%s\n", reader.status().ToString().c_str());
    return 1;
  }
  std::map<std::string, int64_t> kinds;
  std::vector<std::string> markers;
  std::vector<std::string> oom_bytes;
  uint64_t alloc_requested_bytes = 0;
  fragscope::LogEntry entry;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&entry);
    if (!more.ok()) {
      std::fprintf(stderr, "%s\n", more.status().ToString().c_str());
      return 1;
    }
    if (!*more) break;
    ++kinds[std::string(fragscope::EventKindName(entry.kind()))];
    if (entry.kind() == fragscope::EventKind::kMarker) markers.push_back(Quote(entry.text));
    if (entry.kind() == fragscope::EventKind::kAlloc) {
      alloc_requested_bytes += entry.event().requested_bytes;
    }
    if (entry.kind() == fragscope::EventKind::kOom) {
      oom_bytes.push_back(absl::StrCat(entry.event().bytes));
    }
  }
  std::vector<std::string> kind_items;
  for (const auto& [name, count] : kinds)
    kind_items.push_back(absl::StrCat(Quote(name), ":", count));
  const fragscope::FslogHeader& header = reader->header();
  std::printf(
      "{\"device\":%d,\"device_name\":%s,\"device_total_bytes\":%llu,\"options\":%s,"
      "\"warnings\":%zu,\"kinds\":{%s},\"markers\":[%s],\"alloc_requested_bytes\":%llu,"
      "\"oom_bytes\":[%s]}\n",
      header.device_index, Quote(header.device_name).c_str(),
      static_cast<unsigned long long>(header.device_total_bytes),
      Quote(header.allocator_options).c_str(), reader->warnings().size(),
      absl::StrJoin(kind_items, ",").c_str(), absl::StrJoin(markers, ",").c_str(),
      static_cast<unsigned long long>(alloc_requested_bytes),
      absl::StrJoin(oom_bytes, ",").c_str());
  return 0;
}
