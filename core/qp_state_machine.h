// The QP state machine of ibv_modify_qp(3) and IBA chapter 10.3 / 11.2.4.2 (Modify QP):
// which transitions exist, which attributes each transition requires and which it accepts, per
// QP type, and the range of every value. Checking is pure: nothing here changes a QP.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "core/dc.h"
#include "core/path_migration.h"
#include "core/types.h"

namespace softverbs::core {

// What a modify request is checked against besides the attributes themselves.
struct ModifyContext {
  QpType type = QpType::kRc;
  QpState current = QpState::kReset;  // the QP's real state
  bool has_srq = false;               // the QP receives through an SRQ
  uint64_t valid_gids = 0;            // bit i set: GID index i of port 1 holds a GID
  DcRole dc = DcRole::kNone;          // IBV_QPT_DRIVER: the DC role (DCI / DCT columns)
  MigState mig = MigState::kMigrated; // the QP's path migration state (core/path_migration.h)
  bool alt_loaded = false;            // the QP holds an alternate path (IBV_QP_ALT_PATH)
};

// Whether `from -> to` is a transition of the IBA state machine for QPs of `type`.
bool IsValidTransition(QpType type, QpState from, QpState to);

// The attribute mask bits (core::attr) a transition requires / additionally accepts.
// IBV_QP_STATE is part of Required() for every real transition; an invalid transition yields 0.
uint32_t RequiredAttrs(QpType type, QpState from, QpState to);
uint32_t OptionalAttrs(QpType type, QpState from, QpState to);

// Checks a whole ibv_modify_qp request (ibv_modify_qp(3), "If any of the modify attributes or the
// modify mask are invalid, none of the attributes will be modified"). On success returns the state
// the QP will be in afterwards (the current one when IBV_QP_STATE is absent). On failure the
// Status is EINVAL (or EOPNOTSUPP for a feature softverbs0 does not offer) and its rule names the
// transition and the offending attribute, e.g. "RC INIT->RTR is missing IBV_QP_MIN_RNR_TIMER".
// `step`, when given, receives what the request does to the path migration state.
Result<QpState> CheckModify(const ModifyContext& ctx, const QpAttributes& attr, uint32_t mask,
                            MigrationStep* step = nullptr);

// Cuts the attributes of `mask` that have a wire width (rq_psn, sq_psn, dest_qp_num: 24 bits;
// timeout, alt_timeout, min_rnr_timer: 5; retry_cnt, rnr_retry: 3) to that width, as mlx5 does, instead of
// refusing them. Returns what was cut ("rq_psn 0x1000005 masked to its 24 bits: 0x5, ..."), ""
// when nothing was. ibv_modify_qp calls it before CheckModify, which then sees the cut values.
std::string FitFieldWidths(QpAttributes& attr, uint32_t mask);

// "IBV_QP_STATE | IBV_QP_PKEY_INDEX" for a mask (the names of rdma-core's enum ibv_qp_attr_mask).
std::string AttrMaskNames(uint32_t mask);

}  // namespace softverbs::core
