// The mlx5dv_mkey handed to applications (mlx5dv_create_mkey(3)), wrapping the core object; the
// libibverbs side of the mkey verbs (mkey_ops.cc; libmlx5 exports them from mkey.cc). Only files compiled into libibverbs include it.
#pragma once

#include <infiniband/mlx5dv.h>

#include <memory>

#include "core/mkey.h"

namespace softverbs::abi {

struct SvMkey {
  mlx5dv_mkey mkey;  // first: applications hold &mkey
  std::unique_ptr<core::Mkey> core;
};

// `mkey` if mlx5dv_create_mkey of this process returned it and it is not destroyed, else nullptr:
// an mkey the builders may configure.
SvMkey* FindMkey(mlx5dv_mkey* mkey);

}  // namespace softverbs::abi
