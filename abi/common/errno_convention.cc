#include "abi/common/errno_convention.h"

#include <cinttypes>
#include <cstdio>

#include "base/log.h"

namespace softverbs::abi {

void LogRefusal(const char* verb, const std::string& object, const Status& status) {
  if (object.empty())
    SV_LOG(kError, "%s: %s", verb, status.rule().c_str());
  else
    SV_LOG(kError, "%s(%s): %s", verb, object.c_str(), status.rule().c_str());
}

Status Unsupported(const char* what) {
  return NotSupported(std::string(what) +
                      " is not supported by softverbs (see docs/support-matrix.md)");
}

std::string ObjectName(const char* kind, uint64_t id) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%s 0x%" PRIx64, kind, id);
  return buf;
}

}  // namespace softverbs::abi
