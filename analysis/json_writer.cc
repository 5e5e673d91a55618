#include "analysis/json_writer.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "estimator/report.h"

namespace fragscope {

void JsonWriter::Newline() {
  out_ << '\n';
  for (size_t i = 0; i < has_element_.size(); ++i) out_ << "  ";
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_ << ',';
    has_element_.back() = true;
    Newline();
  }
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_ << '{';
  has_element_.push_back(false);
}

void JsonWriter::EndObject() {
  const bool any = has_element_.back();
  has_element_.pop_back();
  if (any) Newline();
  out_ << '}';
  if (has_element_.empty()) out_ << '\n';
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_ << '[';
  has_element_.push_back(false);
}

void JsonWriter::EndArray() {
  const bool any = has_element_.back();
  has_element_.pop_back();
  if (any) Newline();
  out_ << ']';
}

void JsonWriter::Key(std::string_view key) {
  BeforeValue();
  out_ << estimator::JsonQuote(key) << ": ";
  after_key_ = true;
}

void JsonWriter::String(std::string_view value) {
  BeforeValue();
  out_ << estimator::JsonQuote(value);
}

void JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  out_ << value;
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  out_ << value;
}

void JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ << "null";
    return;
  }
  out_ << absl::StrFormat("%.6g", value);
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ << (value ? "true" : "false");
}

void JsonWriter::Null() {
  BeforeValue();
  out_ << "null";
}

}  // namespace fragscope
