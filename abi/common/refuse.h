// The refusal of an entry point a drop-in library exports but softverbs does not implement: one
// helper per C convention, each logging "verb: <rule>" (errno_convention.h) and failing with
// EOPNOTSUPP. They never throw: they are bodies of C entry points, and a failed allocation of the
// rule text only loses the log line.
#pragma once

namespace softverbs::abi {

void* RefuseNull(const char* verb) noexcept;    // NULL, errno = EOPNOTSUPP
int RefuseErrno(const char* verb) noexcept;     // returns EOPNOTSUPP
int RefuseNegErrno(const char* verb) noexcept;  // returns -EOPNOTSUPP
int RefuseMinusOne(const char* verb) noexcept;  // returns -1, errno = EOPNOTSUPP
void Refuse(const char* verb) noexcept;         // void functions: log only

}  // namespace softverbs::abi
