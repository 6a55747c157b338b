#include "core/xrc_qp.h"

#include <cstring>
#include <new>
#include <type_traits>

#include "base/log.h"
#include "base/strings.h"
#include "core/context.h"
#include "core/qp.h"
#include "core/qp_state_machine.h"
#include "transport/host/host_target.h"

namespace softverbs::core {

Status CheckXrcInit(QpInitAttributes& a) {
  if (a.type == QpType::kXrcSend) {
    // ib_uverbs_create_qp: an XRC initiator has no receive side; its recv_cq is its send_cq
    // and max_recv_wr / max_recv_sge are 0, whatever was asked.
    a.has_xrcd = false;  // (libibverbs looks at xrcd for XRC_RECV only)
    a.xrcd = nullptr;
    a.recv_cq = a.send_cq;
    a.srq = nullptr;
    a.cap.max_recv_wr = 0;
    a.cap.max_recv_sge = 0;
    return Status::Ok();
  }
  // XRC_RECV (ibv_create_qp_ex(3): "xrcd: XRC domain to be associated with the target QP").
  if (!a.has_xrcd || a.xrcd == nullptr)
    return Invalid("an IBV_QPT_XRC_RECV QP needs its XRC domain (IBV_QP_INIT_ATTR_XRCD and xrcd)");
  // The kernel takes the device from the XRCD and looks at nothing else: no PD, CQ, SRQ or queue.
  a.pd = nullptr;
  a.send_cq = nullptr;
  a.recv_cq = nullptr;
  a.srq = nullptr;
  a.cap = QpCaps{};
  return Status::Ok();
}

uint32_t XrcModifyMask(QpType type, uint32_t mask) {
  if (type == QpType::kXrcSend) return mask & ~(attr::kMaxDestRdAtomic | attr::kMinRnrTimer);
  if (type == QpType::kXrcRecv) return mask & ~(attr::kMaxQpRdAtomic | attr::kRetryCnt | attr::kRnrRetry);
  return mask;
}

Status Qp::CheckXrcPath(const QpAttributes& a, uint32_t mask) {
  // XRCETH on the wire is not written yet: an XRC initiator reaches targets of this host only.
  if (init_.type != QpType::kXrcSend || !(mask & attr::kAv) || !a.ah_attr.is_global) return Status::Ok();
  if (context_.gids().Find(a.ah_attr.dgid) >= 0) return Status::Ok();
  return NotSupported("XRC to another host (XRCETH on the wire) is not offered yet: the AV's dgid is not a GID of "
                      "this host");
}

namespace {

static_assert(sizeof(QpAttributes) <= sizeof(transport::QpEndpoint::xrc_attributes));
static_assert(std::is_trivially_copyable_v<QpAttributes>);

QpAttributes& SharedAttributes(transport::QpEndpoint& e) {
  return *reinterpret_cast<QpAttributes*>(e.xrc_attributes);
}

// What senders read of the attributes (Qp::PublishEndpoint's share for a receive-only QP); the
// state last, with release.
void Publish(Context& context, transport::QpEndpoint& e, const QpAttributes& a) {
  e.access = a.qp_access_flags;
  e.dest_qp_num = a.dest_qp_num;
  e.mtu = MtuBytes(a.path_mtu);
  e.max_dest_rd_atomic = a.max_dest_rd_atomic;
  e.min_rnr_timer = a.min_rnr_timer;
  if (a.ah_attr.is_global) memcpy(e.sgid, context.gids().at(a.ah_attr.sgid_index).gid.data(), 16);
  e.state.store(static_cast<uint32_t>(a.qp_state), std::memory_order_release);
}

}  // namespace

void InitXrcTarget(transport::QpEndpoint& e) {
  e.xrc_lock.Init();
  new (e.xrc_attributes) QpAttributes{};
}

Status ModifyXrcTarget(Context& context, transport::QpEndpoint& e, const QpAttributes& requested, uint32_t mask) {
  QpAttributes a = requested;
  const std::string cut = FitFieldWidths(a, mask);
  fabric::RobustLock lock(e.xrc_lock);
  QpAttributes& s = SharedAttributes(e);
  s.qp_state = static_cast<QpState>(e.state.load(std::memory_order_acquire));  // (ERR set by an initiator)
  ModifyContext ctx;
  ctx.type = QpType::kXrcRecv;
  ctx.current = s.qp_state;
  ctx.mig = s.path_mig_state;
  ctx.alt_loaded = HasAlternatePath(s);
  if (mask & (attr::kAv | attr::kAltPath)) ctx.valid_gids = context.gids().valid_mask();
  MigrationStep step = MigrationStep::kNone;
  auto next = CheckModify(ctx, a, mask, &step);
  if (!next.ok()) return next.status();
  if (!cut.empty()) SV_LOG(kWarn, "ibv_modify_qp(qp 0x%x): %s (as mlx5 does)", e.qp_num, cut.c_str());
  // IBA 10.3.1: RESET returns every attribute to its initial value; a receive-only QP has no
  // queue to clear.
  if (*next == QpState::kReset) s = QpAttributes{};
  else if (*next != QpState::kErr) ApplyModify(s, a, mask, step);  // (a target sends nothing: no path to move)
  s.qp_state = *next;
  Publish(context, e, s);
  return Status::Ok();
}

QpAttributes QueryXrcTarget(transport::QpEndpoint& e) {
  fabric::RobustLock lock(e.xrc_lock);
  QpAttributes a = SharedAttributes(e);
  a.qp_state = static_cast<QpState>(e.state.load(std::memory_order_acquire));
  a.cur_qp_state = a.qp_state;
  a.cap = QpCaps{};
  return a;
}

Result<std::unique_ptr<OpenedQp>> OpenedQp::Open(Context& context, Xrcd& xrcd, uint32_t qpn) {
  auto target = transport::HostTarget::Find(context.local(), qpn);
  if (!target.ok()) return Invalid("no QP numbered " + Hex(qpn) + " on this host");
  const transport::QpEndpoint& e = target->endpoint();
  if (e.type != static_cast<uint32_t>(QpType::kXrcRecv))
    return Invalid("QP " + Hex(qpn) + " is not an XRC_RECV QP (ibv_open_qp(3) opens XRC target QPs only)");
  if (e.xrcd_dev != xrcd.id().dev || e.xrcd_ino != xrcd.id().ino)
    return Invalid("QP " + Hex(qpn) + " belongs to another XRC domain");
  xrcd.users().Acquire();
  std::unique_ptr<OpenedQp> opened(new OpenedQp(context, xrcd.hold(), qpn));
  // A place among the handles the QP's errors are told to (the kernel tells every handle).
  transport::QpEndpoint& shared = target->endpoint();
  opened->seen_errors_ = shared.xrc_errors.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < transport::kXrcOpeners && opened->opener_ < 0; ++i) {
    transport::XrcOpener& o = shared.xrc_openers[i];
    uint32_t expected = 0;
    if (!o.process.compare_exchange_strong(expected, transport::kXrcOpenerClaimed)) continue;
    o.async_fd = context.async_fd();
    o.async_tag = context.async_tag();
    o.process.store(context.local().slot() + 1, std::memory_order_release);
    opened->opener_ = static_cast<int>(i);
  }
  if (opened->opener_ < 0)
    SV_LOG(kWarn, "ibv_open_qp(qp 0x%x): %u handles are open already: this one is not told of the QP's errors",
           qpn, transport::kXrcOpeners);
  context.Register(opened.get());
  return opened;
}

OpenedQp::~OpenedQp() {
  context_.Unregister(this);
  if (opener_ >= 0)
    if (auto target = transport::HostTarget::Find(context_.local(), qpn_); target.ok())
      target->endpoint().xrc_openers[opener_].process.store(0, std::memory_order_release);
  hold_->users().Release();
}

bool OpenedQp::TakeNewErrors() {
  auto target = transport::HostTarget::Find(context_.local(), qpn_);
  if (!target.ok()) return false;
  const uint32_t n = target->endpoint().xrc_errors.load(std::memory_order_acquire);
  if (n == seen_errors_) return false;
  seen_errors_ = n;
  return true;
}

Status OpenedQp::Modify(const QpAttributes& attr, uint32_t mask) {
  auto target = transport::HostTarget::Find(context_.local(), qpn_);
  if (!target.ok()) return Invalid("the XRC_RECV QP " + Hex(qpn_) + " no longer exists (its creator destroyed it)");
  return ModifyXrcTarget(context_, target->endpoint(), attr, XrcModifyMask(QpType::kXrcRecv, mask));
}

Result<QpAttributes> OpenedQp::Query() const {
  auto target = transport::HostTarget::Find(context_.local(), qpn_);
  if (!target.ok()) return Invalid("the XRC_RECV QP " + Hex(qpn_) + " no longer exists (its creator destroyed it)");
  return QueryXrcTarget(target->endpoint());
}

}  // namespace softverbs::core
