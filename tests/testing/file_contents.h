// Whole-file reads and writes for tests: ReadFile gives "" for a file that cannot be read (tests
// that check a file was not written rely on that).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace fragscope::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace fragscope::testing
