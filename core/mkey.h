// Indirect mkeys (mlx5dv_create_mkey(3)) and the UMR work requests that configure them
// (mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved, mlx5dv_wr_post(3); mlx5dv_wr_mkey_configure(3)
// and its setters). The data path is transport/indirect_key.h; here are the objects' rules.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "core/mkey_signature.h"
#include "core/pd.h"
#include "transport/indirect_key.h"

namespace softverbs::core {

// What one UMR sets (mlx5dv_wr_mkey_configure(3): each setter is optional and what it does not
// set stays as the mkey had it).
struct UmrSpec {
  bool set_access = false;
  uint32_t access = 0;
  bool set_layout = false;
  bool interleaved = false;  // mlx5dv_mr_interleaved entries (else SGEs, repeat_count 1)
  uint32_t repeat_count = 1;
  std::vector<transport::LayoutEntry> entries;
  // mlx5dv_wr_set_mkey_sig_block (set_sig) and MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR (reset_sig).
  bool set_sig = false;
  SigBlockSpec sig;
  bool reset_sig = false;
};

class Mkey {
 public:
  // The most layout entries one mkey holds (mlx5dv_create_mkey may round max_entries up).
  static constexpr uint32_t kMaxEntries = 4096;

  // An indirect mkey of `pd` for up to `max_entries` entries (rounded up to a multiple of 4,
  // as mlx5 does: "it will be greater than or equal to the value requested"); `signature`:
  // MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE, it may take a block signature.
  static Result<std::unique_ptr<Mkey>> Create(Pd& pd, uint32_t max_entries, bool signature = false);
  ~Mkey();

  // Checks a UMR for QP PD `qp_pd` and returns its payload (transport::UmrRequest + entries).
  Result<std::vector<uint8_t>> BuildUmr(const Pd& qp_pd, const UmrSpec& spec) const;

  uint32_t key() const { return key_->key(); }
  uint32_t max_entries() const { return key_->max_entries(); }
  bool signature() const { return signature_; }
  // mlx5dv_mkey_check(3): the first signature error since the last check, cleared.
  transport::SigError TakeSigError() const { return key_->TakeSigError(); }
  Pd& pd() const { return *pd_; }

 private:
  Status CheckAccess(uint32_t access) const;
  Status CheckLayout(const UmrSpec& spec) const;
  Mkey(Pd& pd, std::shared_ptr<transport::IndirectKey> key, bool signature)
      : pd_(&pd), key_(std::move(key)), signature_(signature) {}
  Pd* pd_;
  std::shared_ptr<transport::IndirectKey> key_;
  bool signature_;
};

}  // namespace softverbs::core
