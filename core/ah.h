// Address handles (ibv_create_ah(3)) and the RoCE address-vector rules shared with ibv_modify_qp.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/object_quota.h"
#include "core/pd.h"
#include "core/types.h"

namespace softverbs::core {

// RoCE address vector rules: a GRH is mandatory (there is no LID routing on Ethernet), the
// source GID index must name a populated entry, the port is port 1 (or 0, "the QP's port" in
// ibv_modify_qp), the destination GID is not zero, the static rate is an enum ibv_rate value.
Status CheckRoceAddressVector(const AddressVector& av, uint64_t valid_gids, bool allow_port0);

class Ah {
 public:
  // ibv_create_ah(3); counted against max_ah (ENOMEM beyond it: core/object_quota.h).
  static Result<std::unique_ptr<Ah>> Create(Pd& pd, const AddressVector& av);
  ~Ah() { pd_.users().Release(); }

  const AddressVector& av() const { return av_; }
  uint32_t handle() const { return handle_; }
  // The destination GID is one of this host's (its namespace's addresses): the same-host fabric
  // reaches it, any other GID the wire (DESIGN.md section 6). Decided once, as a NIC resolves an
  // address handle when it is created.
  bool on_host() const { return on_host_; }

 private:
  Ah(Pd& pd, const AddressVector& av, uint32_t handle, bool on_host, QuotaHold quota)
      : pd_(pd), av_(av), handle_(handle), on_host_(on_host), quota_(std::move(quota)) {}
  Pd& pd_;
  AddressVector av_;
  uint32_t handle_;
  bool on_host_;
  QuotaHold quota_;
};

}  // namespace softverbs::core
