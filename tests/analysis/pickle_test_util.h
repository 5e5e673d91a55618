// Helpers shared by the pickle, snapshot and RMM CSV tests: fixture files and value builders.
#pragma once

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

#include "analysis/sources/pickle/pickle_value.h"

#ifndef FRAGSCOPE_TEST_DATA_DIR
#error "FRAGSCOPE_TEST_DATA_DIR must point at tests/data"
#endif

namespace fragscope::testing {

inline std::string DataPath(const std::string& relative) {
  return std::string(FRAGSCOPE_TEST_DATA_DIR) + "/" + relative;
}

inline std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in) throw std::runtime_error("cannot read " + path);
  return out.str();
}

// Bytes from a list of byte values and strings: Bytes({0x80, 2, 'N', '.'}).
inline std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (const int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

// Value builders for readable expectations.
inline pickle::PickleValue S(std::string s) { return pickle::PickleValue::String(std::move(s)); }
inline pickle::PickleValue I(int64_t v) { return pickle::PickleValue::Int(v); }
inline pickle::PickleValue L(pickle::PickleValue::Items items) {
  return pickle::PickleValue::List(std::move(items));
}
inline pickle::PickleValue T(pickle::PickleValue::Items items) {
  return pickle::PickleValue::Tuple(std::move(items));
}
inline pickle::PickleValue D(
    std::initializer_list<std::pair<std::string, pickle::PickleValue>> entries) {
  pickle::PickleValue::Entries out;
  for (const auto& [k, v] : entries) out.emplace_back(S(k), v);
  return pickle::PickleValue::Dict(std::move(out));
}

}  // namespace fragscope::testing
