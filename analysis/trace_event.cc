#include "analysis/trace_event.h"

namespace fragscope {

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kFslog:
      return "fslog";
    case TraceFormat::kPyTorchSnapshot:
      return "pytorch-snapshot";
    case TraceFormat::kRmmCsv:
      return "rmm-csv";
  }
  return "unknown";
}

}  // namespace fragscope
