// How an mlx5dv entry point that softverbs does not implement refuses: one helper per C
// convention, each logging "verb: <rule>" (abi/common/errno_convention.h) and returning EOPNOTSUPP.
//
// The SV_MLX5_* macros define an exported entry point from its name, return type and unnamed
// parameter list. Because <infiniband/mlx5dv.h> is included first, a definition whose prototype
// differs from the header's is a compile error ("conflicting declaration of C function").
// tools/dev/gen_support_matrix.py reads these macro calls to write docs/support/mlx5dv.md.
#pragma once

#include <infiniband/mlx5dv.h>

#include "abi/common/export.h"

#include "abi/common/refuse.h"

// Constructors: "on error NULL will be returned and errno will be set".
#define SV_MLX5_NULL(name, type, ...)                                          \
  SV_EXPORT type* name(__VA_ARGS__) {                                          \
    return static_cast<type*>(::softverbs::abi::RefuseNull(#name));    \
  }

// int verbs: "0 on success, or the value of errno on failure".
#define SV_MLX5_ERRNO(name, ...) \
  SV_EXPORT int name(__VA_ARGS__) { return ::softverbs::abi::RefuseErrno(#name); }

// int verbs returning "-errno on error".
#define SV_MLX5_NEG_ERRNO(name, ...) \
  SV_EXPORT int name(__VA_ARGS__) { return ::softverbs::abi::RefuseNegErrno(#name); }

// Verbs returning a count or an fd: "-1 will be returned and errno was set".
#define SV_MLX5_MINUS_ONE(name, type, ...) \
  SV_EXPORT type name(__VA_ARGS__) { return ::softverbs::abi::RefuseMinusOne(#name); }

// Destructors and setters returning void: nothing to report to the caller, so only the log line.
// They can only receive objects softverbs never created, so they touch nothing.
#define SV_MLX5_VOID(name, ...) \
  SV_EXPORT void name(__VA_ARGS__) { ::softverbs::abi::Refuse(#name); }
