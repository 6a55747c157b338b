// How a librdmacm entry point that softverbs does not implement refuses: one helper per C
// convention, each logging "verb: <rule>" (abi/common/errno_convention.h).
//
// The SV_CM_* / SV_RSOCKET macros define an exported entry point from its name, return type and
// unnamed parameter list. Because <rdma/rdma_cma.h>, <rdma/rdma_verbs.h> and <rdma/rsocket.h>
// are included first, a definition whose prototype differs from the header's is a compile error
// ("conflicting declaration of C function"). tools/dev/gen_support_matrix.py reads these macro
// calls to write docs/support/rdmacm.md.
#pragma once

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include "abi/common/export.h"
#include "abi/common/refuse.h"

namespace softverbs::abi::rdmacm {

// None of these throws: they are bodies of C entry points. A failed allocation of the rule text
// only loses the log line.
int RefuseRsocket(const char* verb) noexcept;   // -1, errno = ENOSYS

}  // namespace softverbs::abi::rdmacm

// Most rdma_* verbs: "Returns 0 on success, or -1 on error. If an error occurs, errno will be
// set to indicate the failure reason."
#define SV_CM_MINUS_ONE(name, ...) \
  SV_EXPORT int name(__VA_ARGS__) { return ::softverbs::abi::RefuseMinusOne(#name); }

// Constructors returning a pointer: "NULL if the request fails. On failure, errno will be set".
#define SV_CM_NULL(name, type, ...)                                         \
  SV_EXPORT type* name(__VA_ARGS__) {                                       \
    return static_cast<type*>(::softverbs::abi::RefuseNull(#name)); \
  }

// Destructors returning void ("RETURN VALUE None"): only the log line. They can only receive
// objects softverbs never created, so they touch nothing.
#define SV_CM_VOID(name, ...) \
  SV_EXPORT void name(__VA_ARGS__) { ::softverbs::abi::Refuse(#name); }

// rsockets "match the name and function signature of socket calls" (rsocket(7)): -1 and errno,
// converted to the function's return type (off_t for riomap, size_t for riowrite).
#define SV_RSOCKET(name, type, ...)                                                     \
  SV_EXPORT type name(__VA_ARGS__) {                                                    \
    return static_cast<type>(::softverbs::abi::rdmacm::RefuseRsocket(#name));           \
  }
