// The creation rules of XRC QPs (IBA annex A14, ibv_create_qp_ex(3), the kernel's
// ib_uverbs_create_qp): an XRC_SEND QP is an RC requester without a receive queue; an XRC_RECV
// QP is a responder without a PD, CQs or queues of its own, in an XRC domain.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "core/types.h"
#include "core/xrcd.h"
#include "transport/qp_endpoint.h"

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

// An XRC_RECV QP has no queue and no requester: all of it is its attributes, kept in its shared
// endpoint (QpEndpoint::xrc_attributes, its state in `state`) so that every handle -- its
// creator's and ibv_open_qp's, in any process -- modifies and queries the same QP, under the
// endpoint's xrc_lock, and an initiator moves it to ERR there (transport/host/xrc_target.cc).
void InitXrcTarget(transport::QpEndpoint& e);
// ibv_modify_qp through any handle: the XRC_RECV column of the table, all checked, then applied
// and published to senders.
Status ModifyXrcTarget(Context& context, transport::QpEndpoint& e, const QpAttributes& requested, uint32_t mask);
QpAttributes QueryXrcTarget(transport::QpEndpoint& e);

// ibv_open_qp(3): another handle of an XRC_RECV QP, from any process of the host, through a
// handle of the QP's XRC domain. It queries and modifies the QP, and reports the QP's errors to
// its context as IBV_EVENT_QP_ACCESS_ERR; the QP itself ends with its creator's handle (the
// kernel keeps it until its last handle closes: docs/support-matrix.md).
class OpenedQp {
 public:
  // EINVAL when `qpn` is no XRC_RECV QP of `xrcd`'s domain (ib_open_qp finds the QP in the
  // domain's target QPs only).
  static Result<std::unique_ptr<OpenedQp>> Open(Context& context, Xrcd& xrcd, uint32_t qpn);
  ~OpenedQp();
  // The ABI object wrapping this one (events name it to the application).
  void* user_handle() const { return user_handle_; }
  void set_user_handle(void* handle) { user_handle_ = handle; }
  // Whether the QP failed since the last call (Context::CollectRemoteEvents reports it).
  bool TakeNewErrors();

  uint32_t qp_num() const { return qpn_; }
  // EINVAL once the creator destroyed the QP.
  Status Modify(const QpAttributes& attr, uint32_t mask);
  // The attributes the QP publishes to its senders (state, access, MTU, timers, destination).
  Result<QpAttributes> Query() const;

 private:
  OpenedQp(Context& context, std::shared_ptr<XrcdHold> hold, uint32_t qpn)
      : context_(context), hold_(std::move(hold)), qpn_(qpn) {}
  Context& context_;
  std::shared_ptr<XrcdHold> hold_;
  uint32_t qpn_;
  int opener_ = -1;          // this handle's entry in the QP's endpoint (xrc_openers), if any
  uint32_t seen_errors_ = 0;  // the endpoint's xrc_errors last reported
  void* user_handle_ = nullptr;
};

}  // namespace softverbs::core
