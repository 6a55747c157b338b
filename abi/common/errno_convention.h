// The one place each C error convention is produced from a core Status (DESIGN.md section 2).
//
// rdma-core verbs report failure in one of three ways, and each verb's man page says which:
//   - NULL (or -1) with errno set          -> ReturnNull / ReturnMinusOne
//   - a positive errno value returned      -> ReturnErrno
//   - a negative errno value returned      -> ReturnNegErrno (ibv_poll_cq and friends)
// Each logs the refusal as one line "verb(object): rule" when SOFTVERBS_LOG is set.
#pragma once

#include <cerrno>
#include <string>

#include "base/status.h"

namespace softverbs::abi {

// Logs "verb(object): rule" at error level. `object` may be empty ("verb: rule").
void LogRefusal(const char* verb, const std::string& object, const Status& status);

inline int ReturnErrno(const char* verb, const std::string& object, const Status& status) {
  LogRefusal(verb, object, status);
  return status.code();
}

inline int ReturnNegErrno(const char* verb, const std::string& object, const Status& status) {
  LogRefusal(verb, object, status);
  return -status.code();
}

template <typename T = void>
T* ReturnNull(const char* verb, const std::string& object, const Status& status) {
  LogRefusal(verb, object, status);
  errno = status.code();
  return nullptr;
}

inline int ReturnMinusOne(const char* verb, const std::string& object, const Status& status) {
  LogRefusal(verb, object, status);
  errno = status.code();
  return -1;
}

// The Status of an entry point softverbs exports but does not implement (docs/support-matrix.md).
Status Unsupported(const char* what);

// Formats "qp 0x11", "pd 0x3", ... for log lines.
std::string ObjectName(const char* kind, uint64_t id);

}  // namespace softverbs::abi
