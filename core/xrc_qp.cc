#include "core/xrc_qp.h"

#include <mutex>
#include <unordered_map>

#include "base/log.h"
#include "base/strings.h"
#include "core/context.h"
#include "core/qp.h"
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

std::mutex& TargetsMu() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<uint32_t, Qp*>& Targets() {
  static auto* map = new std::unordered_map<uint32_t, Qp*>;  // (never destroyed: used at exit)
  return *map;
}

}  // namespace

void RegisterXrcTarget(Qp* qp) {
  std::lock_guard lock(TargetsMu());
  Targets()[qp->qp_num()] = qp;
}

void UnregisterXrcTarget(Qp* qp) {
  std::lock_guard lock(TargetsMu());
  Targets().erase(qp->qp_num());
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
  return std::unique_ptr<OpenedQp>(new OpenedQp(context, xrcd.hold(), qpn));
}

Status OpenedQp::Modify(const QpAttributes& attr, uint32_t mask) {
  std::lock_guard lock(TargetsMu());
  auto it = Targets().find(qpn_);
  if (it != Targets().end()) return it->second->Modify(attr, mask);
  if (!transport::HostTarget::Find(context_.local(), qpn_).ok())
    return Invalid("the XRC_RECV QP " + Hex(qpn_) + " no longer exists (its creator destroyed it)");
  return NotSupported("the XRC_RECV QP " + Hex(qpn_) + " belongs to another process: softverbs modifies it through "
                      "its creator's handle only");
}

Result<QpAttributes> OpenedQp::Query() const {
  {
    std::lock_guard lock(TargetsMu());
    auto it = Targets().find(qpn_);
    if (it != Targets().end()) return it->second->Query();
  }
  auto target = transport::HostTarget::Find(context_.local(), qpn_);
  if (!target.ok()) return Invalid("the XRC_RECV QP " + Hex(qpn_) + " no longer exists (its creator destroyed it)");
  const transport::QpEndpoint& e = target->endpoint();
  QpAttributes a;
  a.qp_state = static_cast<QpState>(e.state.load(std::memory_order_acquire));
  a.cur_qp_state = a.qp_state;
  a.qp_access_flags = e.access;
  a.dest_qp_num = e.dest_qp_num;
  for (Mtu m : {Mtu::k256, Mtu::k512, Mtu::k1024, Mtu::k2048, Mtu::k4096})
    if (MtuBytes(m) == e.mtu) a.path_mtu = m;
  a.max_dest_rd_atomic = static_cast<uint8_t>(e.max_dest_rd_atomic);
  a.min_rnr_timer = static_cast<uint8_t>(e.min_rnr_timer);
  return a;
}

}  // namespace softverbs::core
