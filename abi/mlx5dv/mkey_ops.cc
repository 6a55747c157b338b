// mlx5dv_create_mkey / mlx5dv_destroy_mkey (mlx5dv_create_mkey(3)) and mlx5dv_mkey_check behind
// SvMlx5Provider (provider.h): indirect mkeys whose layout the mlx5dv_wr_mr_* builders and
// mlx5dv_wr_mkey_configure (dv_qp_ex.cc) configure.
// Compiled into libibverbs.so.1.
#include <mutex>
#include <unordered_set>

#include "abi/common/errno_convention.h"
#include "abi/mlx5dv/mkey_ops.h"
#include "abi/mlx5dv/provider.h"
#include "abi/verbs/objects.h"
#include "base/strings.h"

namespace softverbs::abi {
namespace {

// The live mkeys of this process: the builders and destroy accept nothing else.
std::mutex& LiveMu() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::unordered_set<SvMkey*>& Live() {
  static auto* live = new std::unordered_set<SvMkey*>;
  return *live;
}

std::string Name(const mlx5dv_mkey* mkey) { return "mkey " + Hex(mkey->lkey); }

}  // namespace

SvMkey* FindMkey(mlx5dv_mkey* mkey) {
  std::lock_guard lock(LiveMu());
  auto* sv = reinterpret_cast<SvMkey*>(mkey);
  return Live().count(sv) ? sv : nullptr;
}

// mlx5dv_create_mkey(3): "Upon success mlx5dv_create_mkey will return a new struct mlx5dv_mkey
// on error NULL will be returned and errno will be set".
mlx5dv_mkey* CreateMkey(mlx5dv_mkey_init_attr* attr) {
  constexpr const char* kVerb = "mlx5dv_create_mkey";
  if (attr == nullptr || attr->pd == nullptr)
    return ReturnNull<mlx5dv_mkey>(kVerb, "attr", Invalid("mkey_init_attr or its pd is NULL"));
  const std::string object = Name(attr->pd);
  // Indirect mkeys, with a block signature context if asked (core/mkey_signature.h); crypto,
  // update-tag and remote-invalidate offloads are not modelled.
  if (!(attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT))
    return ReturnNull<mlx5dv_mkey>(kVerb, object,
                                   Invalid("create_flags lacks MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT: only "
                                           "indirect mkeys are created (mlx5dv_create_mkey(3))"));
  constexpr uint32_t kOffered = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE;
  if (attr->create_flags & ~kOffered)
    return ReturnNull<mlx5dv_mkey>(kVerb, object,
                                   NotSupported("create_flags " + Hex(attr->create_flags & ~kOffered) +
                                                ": crypto, update tag and remote invalidate mkeys are not "
                                                "offered (crypto_caps is 0)"));
  const bool signature = (attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE) != 0;
  auto core = core::Mkey::Create(*ToSv(attr->pd)->core, attr->max_entries, signature);
  if (!core.ok()) return ReturnNull<mlx5dv_mkey>(kVerb, object, core.status());
  auto* sv = new SvMkey;
  sv->core = std::move(core.value());
  sv->mkey.lkey = sv->mkey.rkey = sv->core->key();
  // "The function will update the mkey_init_attr->max_entries with the actual mkey value that
  // was created; it will be greater than or equal to the value requested."
  attr->max_entries = static_cast<uint16_t>(sv->core->max_entries());
  std::lock_guard lock(LiveMu());
  Live().insert(sv);
  return &sv->mkey;
}

// "Upon success destroy 0 is returned or the value of errno on a failure".
int DestroyMkey(mlx5dv_mkey* mkey) {
  if (mkey == nullptr) return ReturnErrno("mlx5dv_destroy_mkey", "mkey NULL", Invalid("mkey is NULL"));
  SvMkey* sv;
  {
    std::lock_guard lock(LiveMu());
    sv = reinterpret_cast<SvMkey*>(mkey);
    if (!Live().erase(sv))
      return ReturnErrno("mlx5dv_destroy_mkey", Name(mkey),
                         Invalid("not an mkey of mlx5dv_create_mkey (or destroyed already)"));
  }
  delete sv;  // withdraws the key: accesses in flight finish first
  return 0;
}

// mlx5dv_mkey_check(3): "0 on success or the value of errno on failure". mlx5
// (_mlx5dv_mkey_check) returns EINVAL for an mkey without a signature context; otherwise the
// first error since the last check ("kept there until application software queries it"), cleared.
int MkeyCheck(mlx5dv_mkey* mkey, mlx5dv_mkey_err* err_info, size_t) {
  constexpr const char* kVerb = "mlx5dv_mkey_check";
  if (mkey == nullptr || err_info == nullptr)
    return ReturnErrno(kVerb, "mkey NULL", Invalid("mkey or err_info is NULL"));
  SvMkey* sv = FindMkey(mkey);
  if (sv == nullptr)
    return ReturnErrno(kVerb, Name(mkey), Invalid("not an mkey of mlx5dv_create_mkey (or destroyed already)"));
  if (!sv->core->signature())
    return ReturnErrno(kVerb, Name(mkey),
                       Invalid("the mkey was created without MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE: it has no "
                               "signature errors to report (mlx5dv_mkey_check(3))"));
  const transport::SigError e = sv->core->TakeSigError();
  switch (e.kind) {
    case transport::SigErrorKind::kNone: err_info->err_type = MLX5DV_MKEY_NO_ERR; return 0;
    case transport::SigErrorKind::kGuard: err_info->err_type = MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD; break;
    case transport::SigErrorKind::kRefTag: err_info->err_type = MLX5DV_MKEY_SIG_BLOCK_BAD_REFTAG; break;
    case transport::SigErrorKind::kAppTag: err_info->err_type = MLX5DV_MKEY_SIG_BLOCK_BAD_APPTAG; break;
  }
  err_info->err.sig.actual_value = e.actual;
  err_info->err.sig.expected_value = e.expected;
  err_info->err.sig.offset = e.offset;
  return 0;
}

}  // namespace softverbs::abi
