#include "abi/rdmacm/refuse.h"

#include <cerrno>

#include "abi/common/errno_convention.h"

namespace softverbs::abi::rdmacm {

// ENOSYS rather than EOPNOTSUPP: rsockets are not a missing feature of an object the caller
// holds but a whole API softverbs does not ship; a socket-style caller reads ENOSYS as that.
int RefuseRsocket(const char* verb) noexcept {
  try {
    return ReturnMinusOne(verb, {}, Status(ENOSYS, "rsockets are not provided by softverbs"));
  } catch (...) {
    errno = ENOSYS;
    return -1;
  }
}

}  // namespace softverbs::abi::rdmacm
