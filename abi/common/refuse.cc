#include "abi/common/refuse.h"

#include <cerrno>

#include "abi/common/errno_convention.h"

namespace softverbs::abi {

void* RefuseNull(const char* verb) noexcept {
  try {
    return ReturnNull(verb, {}, Unsupported(verb));
  } catch (...) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
}

int RefuseErrno(const char* verb) noexcept {
  try {
    return ReturnErrno(verb, {}, Unsupported(verb));
  } catch (...) {
    return EOPNOTSUPP;
  }
}

int RefuseNegErrno(const char* verb) noexcept {
  try {
    return ReturnNegErrno(verb, {}, Unsupported(verb));
  } catch (...) {
    return -EOPNOTSUPP;
  }
}

int RefuseMinusOne(const char* verb) noexcept {
  try {
    return ReturnMinusOne(verb, {}, Unsupported(verb));
  } catch (...) {
    errno = EOPNOTSUPP;
    return -1;
  }
}

void Refuse(const char* verb) noexcept {
  try {
    LogRefusal(verb, {}, Unsupported(verb));
  } catch (...) {
  }
}

}  // namespace softverbs::abi
