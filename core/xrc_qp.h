// The creation rules of XRC QPs (IBA annex A14, ibv_create_qp_ex(3), the kernel's
// ib_uverbs_create_qp): an XRC_SEND QP is an RC requester without a receive queue; an XRC_RECV
// QP is a responder without a PD, CQs or queues of its own, in an XRC domain.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/types.h"
#include "core/xrcd.h"

namespace softverbs::core {

class Context;
class Qp;
struct QpInitAttributes;

inline bool IsXrc(QpType type) { return type == QpType::kXrcSend || type == QpType::kXrcRecv; }

// Checks and normalises `a` for XRC_SEND and XRC_RECV: what each type ignores is dropped, as
// the kernel drops it (recv_cq, srq and the receive caps of XRC_SEND; PD, CQs, SRQ and every cap
// of XRC_RECV).
Status CheckXrcInit(QpInitAttributes& a);

// The kernel's modify_qp_mask() (uverbs_cmd.c): before the state machine sees an XRC QP's
// mask, the attributes of the half it does not have are dropped -- MAX_DEST_RD_ATOMIC and
// MIN_RNR_TIMER of an XRC_SEND QP, MAX_QP_RD_ATOMIC, RETRY_CNT and RNR_RETRY of an XRC_RECV QP --
// so programs that pass RC's full sets (perftest -c XRC) work, as on hardware.
uint32_t XrcModifyMask(QpType type, uint32_t mask);

// XRC_RECV QPs of this process by number, for the ibv_open_qp handles that act on them
// (Qp registers itself while it lives).
void RegisterXrcTarget(Qp* qp);
void UnregisterXrcTarget(Qp* qp);

// ibv_open_qp(3): another handle of an XRC_RECV QP, from any process of the host, through a
// handle of the QP's XRC domain. It modifies and queries the QP; the QP itself ends with its
// creator's handle (the kernel keeps it until its last handle closes: docs/support-matrix.md).
class OpenedQp {
 public:
  // EINVAL when `qpn` is no XRC_RECV QP of `xrcd`'s domain (ib_open_qp finds the QP in the
  // domain's target QPs only).
  static Result<std::unique_ptr<OpenedQp>> Open(Context& context, Xrcd& xrcd, uint32_t qpn);
  ~OpenedQp() { hold_->users().Release(); }

  uint32_t qp_num() const { return qpn_; }
  // Through the creator's QP when it is in this process; another process's QP is modified by
  // its creator only (EOPNOTSUPP).
  Status Modify(const QpAttributes& attr, uint32_t mask);
  // The attributes the QP publishes to its senders (state, access, MTU, timers, destination).
  Result<QpAttributes> Query() const;

 private:
  OpenedQp(Context& context, std::shared_ptr<XrcdHold> hold, uint32_t qpn)
      : context_(context), hold_(std::move(hold)), qpn_(qpn) {}
  Context& context_;
  std::shared_ptr<XrcdHold> hold_;
  uint32_t qpn_;
};

}  // namespace softverbs::core
