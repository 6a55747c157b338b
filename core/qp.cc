#include "core/qp.h"

#include <sched.h>

#include <chrono>
#include <cstring>

#include "base/log.h"
#include "base/strings.h"
#include "core/context.h"
#include "core/device_limits.h"
#include "core/qp_state_machine.h"
#include "core/xrc_qp.h"
#include "core/raw_qp.h"
#include "core/wq.h"
#include "fabric/host/hazard_lines.h"
#include "fabric/host/pin_line.h"
#include "fabric/host/process_token.h"
#include "fabric/raw/packet_socket.h"
#include "transport/host/host_link.h"
#include "transport/mcast_table.h"
#include "transport/raw/toeplitz.h"
#include "transport/wire/capture.h"
#include "transport/wire/capture_link.h"
#include "transport/wire/wire_link.h"
#include "transport/window_key.h"

namespace softverbs::core {
namespace {

using std::to_string;

Status CheckType(QpType type, DcRole dc) {
  switch (type) {
    case QpType::kRc:
    case QpType::kUc:
    case QpType::kUd:
    case QpType::kRawPacket:  // whole Ethernet frames (core/raw_qp.h)
      return Status::Ok();
    case QpType::kXrcSend:
    case QpType::kXrcRecv:
      return Status::Ok();  // IBA annex A14 (core/xrc_qp.h)
    case QpType::kDriver:
      if (dc != DcRole::kNone) return Status::Ok();  // a DC QP of mlx5dv_create_qp (core/dc.h)
      return NotSupported("IBV_QPT_DRIVER QPs are created through their provider (mlx5dv_create_qp)");
  }
  return Invalid("qp_type " + to_string(static_cast<int>(type)) + " is not a QP type");
}

Status CheckCap(const char* name, uint32_t value, uint32_t limit, const char* limit_name) {
  if (value > limit)
    return Invalid(std::string("cap.") + name + " " + to_string(value) + " exceeds the device limit " +
                   limit_name + " " + to_string(limit));
  return Status::Ok();
}

// ibv_qp_init_attr_ex.create_flags (ibv_create_qp_ex(3)).
Status CheckCreateFlags(const QpInitAttributes& a) {
  using namespace create_flag;
  constexpr uint32_t kKnown = kBlockSelfMcastLb | kScatterFcs | kCvlanStripping | kSourceQpn | kPciWriteEndPadding;
  if (a.create_flags & ~kKnown) return Invalid("create_flags has unknown bits");
  if ((a.create_flags & kBlockSelfMcastLb) && a.type != QpType::kUd)
    return Invalid("IBV_QP_CREATE_BLOCK_SELF_MCAST_LB applies to UD QPs (multicast is UD only)");
  // ibv_create_qp_ex(3): FCS scattering and VLAN stripping are features of raw packet QPs.
  if ((a.create_flags & (kScatterFcs | kCvlanStripping)) && a.type != QpType::kRawPacket)
    return Invalid("IBV_QP_CREATE_SCATTER_FCS / CVLAN_STRIPPING apply to IBV_QPT_RAW_PACKET QPs only");
  if (a.create_flags & kSourceQpn) {
    // "The attribute source_qpn is supported only on UD QP" (ibv_create_qp_ex(3)).
    if (a.type != QpType::kUd) return Invalid("IBV_QP_CREATE_SOURCE_QPN applies to UD QPs only");
    if (a.source_qpn == 0 || a.source_qpn > 0xffffff)
      return Invalid("source_qpn " + to_string(a.source_qpn) + " is not a 24-bit QP number");
    // The kernel requires CAP_NET_RAW for a QP that sends as another QP number (mlx5).
    if (!fabric::raw::HaveNetRaw())
      return Status(EPERM, "IBV_QP_CREATE_SOURCE_QPN needs CAP_NET_RAW in the QP's network namespace");
  }
  // PCI_WRITE_END_PADDING is a performance hint: accepted, no semantic change.
  return Status::Ok();
}

// ibv_qp_init_attr_ex.send_ops_flags: the ops ibv_qp_ex will offer.
Status CheckSendOps(const QpInitAttributes& a) {
  using namespace send_op;
  constexpr uint64_t kKnown = kRdmaWrite | kRdmaWriteWithImm | kSend | kSendWithImm | kRdmaRead |
                              kAtomicCmpSwp | kAtomicFetchAdd | kLocalInv | kBindMw | kSendWithInv |
                              kTso | kAtomicWrite;
  uint64_t ops = a.send_ops_flags;
  if (ops & ~kKnown) return Invalid("send_ops_flags has unknown bits");
  if ((ops & kTso) && a.type != QpType::kRawPacket)
    return Invalid("IBV_QP_EX_WITH_TSO applies to IBV_QPT_RAW_PACKET QPs only");
  uint64_t allowed = 0;
  switch (TransportTypeOf(a.type, a.dc.role)) {  // IBA table 38: the operations of each service type
    // ATOMIC WRITE (IBA 1.5 9.4.6) is an RC operation, as rxe offers it.
    case QpType::kRc: allowed = kRdmaWrite | kRdmaWriteWithImm | kSend | kSendWithImm | kRdmaRead |
                                kAtomicCmpSwp | kAtomicFetchAdd | kLocalInv | kBindMw | kSendWithInv |
                                kAtomicWrite; break;
    // ibv_bind_mw(3): binds on UC, RC (and XRC_SEND); SEND_WITH_INV is RC's (IBA 9.4).
    case QpType::kUc: allowed = kRdmaWrite | kRdmaWriteWithImm | kSend | kSendWithImm | kLocalInv | kBindMw; break;
    case QpType::kUd: allowed = kSend | kSendWithImm; break;
    case QpType::kRawPacket: allowed = kSend | kTso; break;  // a frame per SEND, segments per TSO
    default: break;
  }
  // A DCI's requests go to many DCTs: windows are bound and invalidated on RC and UC QPs only;
  // ATOMIC WRITE is offered on RC QPs, as rxe (which has no DC) does.
  if (a.dc.role != DcRole::kNone) allowed &= ~(kLocalInv | kBindMw | kSendWithInv | kAtomicWrite);
  if (ops & ~allowed)
    return Invalid(std::string(QpTypeName(a.type)) + " QPs do not offer send_ops_flags " + Hex(ops & ~allowed));
  return Status::Ok();
}

// An RSS QP (ibv_create_qp_ex(3): rwq_ind_tbl, rx_hash_conf): receives through the WQs of its
// table, by the Toeplitz hash of the selected fields; it has no queues of its own.
Status CheckRss(QpInitAttributes& a) {
  using namespace transport::raw::rx_hash;
  if (!a.has_rwq_ind_table || !a.has_rx_hash || a.ind_table == nullptr)
    return Invalid("an RSS QP needs both IBV_QP_INIT_ATTR_IND_TABLE (a table) and IBV_QP_INIT_ATTR_RX_HASH");
  if (a.srq != nullptr) return Invalid("an RSS QP receives through its table's WQs, not an SRQ");
  if (a.rx_hash_function != 1) return Invalid("rx_hash_function must be IBV_RX_HASH_FUNC_TOEPLITZ");
  // mlx5 takes exactly a 40-byte Toeplitz key (the TIR's rx_hash_toeplitz_key field).
  if (a.rx_hash_key.size() != 40)
    return Invalid("rx_hash_key_len " + to_string(a.rx_hash_key.size()) + " is not 40 (the Toeplitz key)");
  constexpr uint64_t kFields =
      kSrcIpv4 | kDstIpv4 | kSrcIpv6 | kDstIpv6 | kSrcPortTcp | kDstPortTcp | kSrcPortUdp | kDstPortUdp | kIpsecSpi;
  // The kernel's mlx5 create_rss_raw_qp_tir: "Tunnel offloads must be set for inner RSS".
  const bool tunnel = a.has_mlx5_create_flags && (a.mlx5_create_flags & mlx5_create_flag::kTunnelOffloads);
  if ((a.rx_hash_fields_mask & kInner) && !tunnel)
    return NotSupported("IBV_RX_HASH_INNER hashes tunnelled frames: it needs MLX5DV_QP_CREATE_TUNNEL_OFFLOADS "
                        "(mlx5dv_create_qp), as mlx5 requires");
  if (a.rx_hash_fields_mask & ~(kFields | kInner)) return Invalid("rx_hash_fields_mask has unknown bits");
  if ((a.rx_hash_fields_mask & (kSrcPortTcp | kDstPortTcp)) && (a.rx_hash_fields_mask & (kSrcPortUdp | kDstPortUdp)))
    return Invalid("rx_hash_fields_mask selects TCP and UDP ports together (mlx5 hashes one L4 type per TIR)");
  if (a.has_send_ops_flags && a.send_ops_flags != 0) return Invalid("an RSS QP has no send queue");
  a.cap = QpCaps{};
  return Status::Ok();
}

Status CheckInit(QpInitAttributes& a) {
  SV_RETURN_IF_ERROR(CheckType(a.type, a.dc.role));
  if (a.type == QpType::kXrcRecv || a.type == QpType::kXrcSend) SV_RETURN_IF_ERROR(CheckXrcInit(a));
  if (a.type == QpType::kXrcRecv) return a.has_send_ops_flags ? CheckSendOps(a) : Status::Ok();
  if (a.pd == nullptr) return Invalid("pd is NULL (IBV_QP_INIT_ATTR_PD is required)");
  if (a.has_xrcd) return Invalid("an XRC domain applies to IBV_QPT_XRC_RECV QPs only");
  const bool rss = a.type == QpType::kRawPacket && (a.has_rwq_ind_table || a.has_rx_hash);
  if (rss) SV_RETURN_IF_ERROR(CheckRss(a));
  if (a.send_cq == nullptr && !rss) return Invalid("send_cq is NULL");
  if (a.recv_cq == nullptr && !rss) return Invalid("recv_cq is NULL");
  if ((a.has_max_tso_header || a.has_rwq_ind_table || a.has_rx_hash) && a.type != QpType::kRawPacket)
    return Invalid("max_tso_header, rwq_ind_tbl and rx_hash_conf apply to IBV_QPT_RAW_PACKET QPs only");
  // The header of a TSO WR is copied whole into each segment; mlx5 bounds it too.
  if (a.has_max_tso_header && a.max_tso_header > DeviceLimits::kMaxTsoHeader)
    return Invalid("max_tso_header " + to_string(a.max_tso_header) + " exceeds the device's " +
                   to_string(DeviceLimits::kMaxTsoHeader) + " bytes");
  SV_RETURN_IF_ERROR(CheckCap("max_send_wr", a.cap.max_send_wr, DeviceLimits::kMaxQpWr, "max_qp_wr"));
  SV_RETURN_IF_ERROR(CheckCap("max_send_sge", a.cap.max_send_sge, DeviceLimits::kMaxSge, "max_sge"));
  SV_RETURN_IF_ERROR(CheckCap("max_inline_data", a.cap.max_inline_data, DeviceLimits::kMaxInlineData,
                              "max_inline_data"));
  if (a.srq != nullptr) {
    // ibv_create_qp(3) NOTES: "will fail if it is asked to create QP of a type other than
    // IBV_QPT_RC or IBV_QPT_UD associated with an SRQ".
    // A DCT receives through an SRQ only; a DCI receives nothing and ignores one (as mlx5 does:
    // perftest's latency tests give their DCI the SRQ). core/dc.h.
    if (a.type != QpType::kRc && a.type != QpType::kUd && a.dc.role == DcRole::kNone)
      return Invalid(std::string("only RC and UD QPs (and DC QPs) can receive through an SRQ, not ") +
                     QpTypeName(a.type));
    // "max_recv_wr and max_recv_sge are ignored ... if the QP is to be associated with an SRQ."
    a.cap.max_recv_wr = 0;
    a.cap.max_recv_sge = 0;
  } else {
    SV_RETURN_IF_ERROR(CheckCap("max_recv_wr", a.cap.max_recv_wr, DeviceLimits::kMaxQpWr, "max_qp_wr"));
    SV_RETURN_IF_ERROR(CheckCap("max_recv_sge", a.cap.max_recv_sge, DeviceLimits::kMaxSge, "max_sge"));
  }
  if (a.has_create_flags) SV_RETURN_IF_ERROR(CheckCreateFlags(a));
  if (a.has_send_ops_flags) SV_RETURN_IF_ERROR(CheckSendOps(a));
  return CheckProviderInit(a);
}

}  // namespace

Result<std::unique_ptr<Qp>> Qp::Create(Context& context, QpInitAttributes& attr) {
  SV_RETURN_IF_ERROR(CheckInit(attr));
  std::unique_ptr<Cq> own_cq;
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) {  // an RSS QP (CheckRss)
    auto cq = Cq::Create(context, 1, nullptr, 0);
    if (!cq.ok()) return cq.status();
    own_cq = std::move(cq.value());
    if (attr.send_cq == nullptr) attr.send_cq = own_cq.get();
    if (attr.recv_cq == nullptr) attr.recv_cq = own_cq.get();
  }
  std::unique_ptr<RawQp> raw;
  if (attr.type == QpType::kRawPacket) {
    auto opened = RawQp::Open(context, attr);  // EPERM without CAP_NET_RAW
    if (!opened.ok()) return opened.status();
    raw = std::move(opened.value());
  }
  fabric::LocalProcess& local = context.local();
  std::unique_ptr<RecvQueue> rq;
  if (attr.srq == nullptr && attr.type != QpType::kXrcRecv) {  // XRC_RECV: no receive queue
    auto q = RecvQueue::Create(local, attr.cap.max_recv_wr, attr.cap.max_recv_sge);
    if (!q.ok()) return q.status();
    rq = std::move(q.value());
  }
  auto endpoint = local.Allocate(sizeof(QpEndpoint));
  if (!endpoint.ok()) return endpoint.status();
  auto slot = context.registry().qps().Allocate(fabric::ProcessToken::Self());
  if (!slot.ok()) {
    local.Free(*endpoint, sizeof(QpEndpoint));
    return Status(ENOMEM, "the device limit max_qp " + to_string(DeviceLimits::kMaxQp) +
                              " is reached: no QP number left (" + slot.status().rule() + ")");
  }
  if (attr.pd != nullptr) attr.pd->users().Acquire();  // (XRC_RECV has no PD, no CQs)
  if (attr.send_cq != nullptr) attr.send_cq->users().Acquire();
  if (attr.recv_cq != nullptr) attr.recv_cq->users().Acquire();
  if (attr.srq != nullptr) attr.srq->users().Acquire();
  if (attr.xrcd != nullptr) attr.xrcd->users().Acquire();
  std::unique_ptr<Qp> qp(new Qp(context, attr, *slot, std::move(rq), *endpoint));
  if (raw) {
    raw->Attach(qp.get(), qp->qp_num());
    qp->raw_ = std::move(raw);
  }
  qp->own_cq_ = std::move(own_cq);
  return qp;
}

Qp::Qp(Context& context, const QpInitAttributes& init, uint32_t slot, std::unique_ptr<RecvQueue> rq,
       fabric::SharedRef endpoint)
    : context_(context), init_(init), slot_(slot), qpn_(QpnOfSlot(slot)), rq_(std::move(rq)),
      endpoint_ref_(endpoint), endpoint_(static_cast<QpEndpoint*>(context.local().At(endpoint))) {
  attr_.cap = init.cap;
  host_link_ = std::make_unique<transport::HostLink>(context.local());
  // SOFTVERBS_PCAP: the same host's messages are recorded as the packets the wire would carry
  // (transport/wire/capture_link.h); decided here, once, so a QP that does not capture pays nothing.
  if (fabric::packet::PcapWriter* pcap = transport::ProcessCapture(); pcap != nullptr)
    host_link_ = std::make_unique<transport::CaptureLink>(std::move(host_link_), *pcap);
  // Any QP may be reached from another host: this process receives RoCEv2 on the host's
  // addresses from its first QP on (transport/wire/wire_fabric.h).
  transport::WireFabric& wire = transport::WireFabric::Get(context.local());
  {
    const GidTable gids = context.gids();
    std::vector<transport::Gid16> listen;
    for (uint32_t i = 0; i < DeviceLimits::kGidTableLen; ++i)
      if (gids.at(i).valid) listen.push_back(gids.at(i).gid);
    wire.Listen(listen);
  }
  wire_link_ = std::make_unique<transport::WireLink>(wire);
  sq_ = std::make_unique<transport::Requester>(context.local(), static_cast<transport::RequesterHost&>(*this),
                                               transport::Links{host_link_.get(), wire_link_.get()});
  sq_->Configure(RequesterConfigOf());
  QpEndpoint& e = this->endpoint();
  e.qp_num = qpn_;
  // DC runs RC's roles; an XRC QP keeps its own type: no plain RC message is for it.
  e.type = static_cast<uint32_t>(IsXrc(init.type) ? init.type : TransportTypeOf(init.type, init.dc.role));
  e.dct = init.dc.role == DcRole::kDct;
  e.dc_access_key = init.dc.dct_access_key;
  if (init.pd != nullptr) e.pd = init.pd->host_id();
  if (init.recv_cq != nullptr) e.recv_cq = init.recv_cq->ring_ref();
  if (has_recv_queue()) e.recv_queue = recv_queue().ref();
  if (init.xrcd != nullptr) {
    xrcd_hold_ = init.xrcd->hold();
    e.xrcd_dev = init.xrcd->id().dev;
    e.xrcd_ino = init.xrcd->id().ino;
  }
  e.has_srq = init.srq != nullptr;
  e.block_self_mcast_lb = init.has_create_flags && (init.create_flags & create_flag::kBlockSelfMcastLb);
  e.async_fd = context.async_fd();
  e.async_tag = context.async_tag();
  e.wire.lock.Init();
  if (init.type == QpType::kXrcRecv) InitXrcTarget(e);  // its attributes, shared by its handles
  context.Register(this);
  if (IssuesRendezvous()) transport::RegisterRendezvousIssuer(qpn_, this);
  if (init.send_cq != nullptr) init.send_cq->AttachQp(this);
  if (init.recv_cq != nullptr && init.recv_cq != init.send_cq) init.recv_cq->AttachQp(this);
  PublishEndpoint();
  // Last: the QP number now leads senders to a complete endpoint.
  auto& entry = fabric::EntryOf<fabric::QpEntry>(context_.registry().qps().slot(slot_));
  entry.process_slot.store(context_.local().slot(), std::memory_order_relaxed);
  entry.block = endpoint_ref_;
  entry.qp_num.store(qpn_, std::memory_order_release);
}

Qp::~Qp() {
  raw_.reset();  // its flows are gone (CheckDestroy): no frame reaches it after this
  context_.Unregister(this);
  if (init_.send_cq != nullptr) init_.send_cq->DetachQp(this);
  if (init_.recv_cq != nullptr && init_.recv_cq != init_.send_cq) init_.recv_cq->DetachQp(this);
  wire_link_->Attach(nullptr);  // no response from the wire reaches the requester after this
  if (IssuesRendezvous()) transport::UnregisterRendezvousIssuer(qpn_, this);  // (before its requester goes)
  sq_.reset();  // no retry of this QP runs after this
  // Type 2 windows bound to this QP answer no other: they end with it, before its number can
  // be reused by a QP that would pass their check.
  transport::InvalidateWindowsBoundTo(context_.registry(), qpn_);
  auto& entry = fabric::EntryOf<fabric::QpEntry>(context_.registry().qps().slot(slot_));
  entry.qp_num.store(0, std::memory_order_release);  // senders stop finding this QP
  QpEndpoint& e = endpoint();
  e.state.store(static_cast<uint32_t>(QpState::kReset), std::memory_order_release);
  // Senders pin, then check qp_num (transport/host/host_target.cc); a sequentially consistent
  // read-modify-write (a full barrier, and one ThreadSanitizer understands, unlike a fence)
  // orders this store before the reads of their pins below, so each either sees 0 or is waited
  // for.
  (void)std::atomic_ref<uint32_t>(e.qp_num).exchange(0, std::memory_order_seq_cst);
  context_.registry().BumpRouteEpoch();  // (kept routes to it check it again: before the waits)
  // Deliveries in flight finish before the QP's memory and buffers are given back. Those of
  // senders that died are dropped at once; a live one (a stopped process too) is waited for,
  // logged with its pid: it could still write when it resumes (issue 17 items 1 and 5).
  const std::string what = "ibv_destroy_qp(qp " + Hex(qpn_) + ")";
  fabric::PinWait w = fabric::WaitUnpinned(context_.registry(), e.users, what);
  // Senders with a hazard line announce the QP there instead of pinning it (transport/host/
  // host_target.cc, HostTarget::Pin).
  w.dead_cleared += fabric::WaitUnannounced(context_.registry(), fabric::QpHazardValue(qpn_), what).dead_cleared;
  if (w.dead_cleared != 0)
    SV_LOG(kInfo, "ibv_destroy_qp(qp 0x%x): dropped %u delivery(ies) of dead sender(s)", qpn_, w.dead_cleared);
  // Now that no delivery can add one, the QP's unpolled completions leave its CQs, as mlx5 does
  // (libmlx5 mlx5_destroy_qp -> __mlx5_cq_clean on both CQs), so that none names a QP that no
  // longer exists (a consumer acting on one -- libfabric 1.17's verbs/rxm reposts the buffer --
  // would use the destroyed QP). Destroying completes nothing (neither mlx5 nor rxe flushes
  // here): a consumer that wants every WR back moves the QP to ERR and drains its flushes first
  // (IBA 10.3.1).
  uint32_t removed = 0;
  if (init_.send_cq != nullptr) removed += init_.send_cq->RemoveEntriesOf(qpn_);
  if (init_.recv_cq != nullptr && init_.recv_cq != init_.send_cq) removed += init_.recv_cq->RemoveEntriesOf(qpn_);
  if (removed != 0) SV_LOG(kInfo, "ibv_destroy_qp(qp 0x%x): %u unpolled completion(s) left its CQs", qpn_, removed);
  if (init_.srq != nullptr) init_.srq->users().Release();
  if (init_.recv_cq != nullptr) init_.recv_cq->users().Release();
  if (init_.send_cq != nullptr) init_.send_cq->users().Release();
  if (init_.pd != nullptr) init_.pd->users().Release();
  if (xrcd_hold_ != nullptr) xrcd_hold_->users().Release();  // (the handle may be closed by now)
  context_.registry().qps().Free(slot_, fabric::ProcessToken::Self());
  context_.local().Free(endpoint_ref_, sizeof(QpEndpoint));
}

QpEndpoint& Qp::endpoint() const { return *endpoint_; }

void Qp::PublishEndpoint() {
  QpEndpoint& e = endpoint();
  e.qkey = attr_.qkey;
  e.access = attr_.qp_access_flags;
  e.dest_qp_num = attr_.dest_qp_num;
  e.mtu = MtuBytes(attr_.path_mtu);
  // A DCT has no MAX_DEST_RD_ATOMIC attribute: it serves READs and atomics of any DCI with the
  // device's responder resources (its IBV_ACCESS_REMOTE_* flags decide what it allows).
  e.max_dest_rd_atomic = init_.dc.role == DcRole::kDct ? DeviceLimits::kMaxQpRdAtom : attr_.max_dest_rd_atomic;
  e.min_rnr_timer = attr_.min_rnr_timer;
  if (attr_.ah_attr.is_global) memcpy(e.sgid, context_.gids().at(attr_.ah_attr.sgid_index).gid.data(), 16);
  // The state last, with release: a sender that sees RTR sees the attributes that came with it.
  e.state.store(static_cast<uint32_t>(attr_.qp_state), std::memory_order_release);
  state_.store(static_cast<uint32_t>(attr_.qp_state), std::memory_order_release);
  context_.registry().BumpRouteEpoch();  // kept routes to this QP read its state again
}

void Qp::RestartWireReceive(uint32_t psn) {
  // A WQE held for a message in progress goes back to nobody: RESET drops the RQ's WQEs, and a
  // new rq_psn starts a new packet sequence (the caller flushes or keeps the rest).
  transport::WireReceive& w = endpoint().wire;
  fabric::RobustLock lock(w.lock);
  w.epsn = psn & 0xffffff;
  w.message = 0;
  w.offset = 0;
  w.wqe_held = 0;
  w.msn = 0;
  w.nak_sent = 0;
  for (auto& r : w.resource) r.kind = 0;
}

QpState Qp::state() const {
  const_cast<Qp*>(this)->ApplyPendingError();
  if (init_.type == QpType::kXrcRecv)  // (its state is its endpoint's: core/xrc_qp.h)
    return static_cast<QpState>(endpoint().state.load(std::memory_order_acquire));
  return static_cast<QpState>(state_.load(std::memory_order_acquire));
}

Status Qp::CheckDestroy() const {
  // ibv_destroy_qp(3): "fails if the QP is attached to a multicast group".
  if (int n = mcast_groups_.count(); n > 0)
    return Busy("the QP is still attached to " + std::to_string(n) + " multicast group(s)");
  // The kernel's uverbs counts a flow as a user of its QP: destroy fails while one remains.
  if (raw_ && raw_->flow_count() > 0)
    return Busy("the QP still has " + std::to_string(raw_->flow_count()) + " flow rule(s) (ibv_destroy_flow first)");
  return Status::Ok();
}

Status Qp::AttachMcast(const Gid& mgid, uint16_t mlid) {
  // ibv_attach_mcast(3): "only QPs of Transport Service Type IBV_QPT_UD may be attached".
  if (init_.type != QpType::kUd)
    return Invalid(std::string("only UD QPs can be attached to a multicast group (this is ") + QpTypeName(init_.type) + ")");
  if (!transport::IsMulticastGid(mgid.data()))
    return Invalid("gid is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/4 for IPv4)");
  auto added = transport::McastAttach(context_.local(), qpn_, mgid.data(), mlid);
  if (!added.ok()) return added.status();
  if (*added) mcast_groups_.Acquire();
  return Status::Ok();
}

Status Qp::DetachMcast(const Gid& mgid) {
  SV_RETURN_IF_ERROR(transport::McastDetach(context_.local(), qpn_, mgid.data()));
  mcast_groups_.Release();
  return Status::Ok();
}

// ibv_modify_qp's attributes named by `mask`, copied from `a` into `s` (checked before).
void ApplyModify(QpAttributes& s, const QpAttributes& a, uint32_t mask, MigrationStep step) {
  if (mask & attr::kEnSqdAsyncNotify) s.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & attr::kAccessFlags) s.qp_access_flags = a.qp_access_flags;
  if (mask & attr::kPkeyIndex) s.pkey_index = a.pkey_index;
  if (mask & attr::kPort) s.port_num = a.port_num;
  if (mask & attr::kQkey) s.qkey = a.qkey;
  if (mask & attr::kAv) {
    s.ah_attr = a.ah_attr;
    if (s.ah_attr.port_num == 0) s.ah_attr.port_num = s.port_num ? s.port_num : 1;
  }
  if (mask & attr::kPathMtu) s.path_mtu = a.path_mtu;
  if (mask & attr::kTimeout) s.timeout = a.timeout;
  if (mask & attr::kRetryCnt) s.retry_cnt = a.retry_cnt;
  if (mask & attr::kRnrRetry) s.rnr_retry = a.rnr_retry;
  if (mask & attr::kRqPsn) s.rq_psn = a.rq_psn;
  if (mask & attr::kMaxQpRdAtomic) s.max_rd_atomic = a.max_rd_atomic;
  if (mask & attr::kMinRnrTimer) s.min_rnr_timer = a.min_rnr_timer;
  if (mask & attr::kSqPsn) s.sq_psn = a.sq_psn;
  if (mask & attr::kMaxDestRdAtomic) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & attr::kAltPath) {
    s.alt_ah_attr = a.alt_ah_attr;
    if (s.alt_ah_attr.port_num == 0) s.alt_ah_attr.port_num = a.alt_port_num;
    s.alt_pkey_index = a.alt_pkey_index;
    s.alt_port_num = a.alt_port_num;
    s.alt_timeout = a.alt_timeout;
  }
  // IBA 17.2.8 (core/path_migration.h): REARM arms at once; MIGRATED on an armed QP migrates,
  // after a new alternate path of the same request was loaded.
  if (step == MigrationStep::kArm) s.path_mig_state = MigState::kArmed;
  if (step == MigrationStep::kMigrate) Migrate(s);
  if (mask & attr::kDestQpn) s.dest_qp_num = a.dest_qp_num;
  if (mask & attr::kRateLimit) {
    s.rate_limit = a.rate_limit;
    s.max_burst_sz = a.max_burst_sz;
    s.typical_pkt_sz = a.typical_pkt_sz;
  }
}

Status Qp::Modify(const QpAttributes& requested, uint32_t mask_in) {
  ApplyPendingError();
  const uint32_t mask = XrcModifyMask(init_.type, mask_in);
  // An XRC_RECV QP's attributes are shared by all its handles (core/xrc_qp.h).
  if (init_.type == QpType::kXrcRecv) return ModifyXrcTarget(context_, endpoint(), requested, mask);
  std::lock_guard lock(mu_);
  FoldPathMigrationsLocked();
  FoldSendQueueDrainLocked();
  QpAttributes a = requested;
  const std::string cut = FitFieldWidths(a, mask);
  ModifyContext ctx;
  ctx.type = init_.type;
  ctx.current = attr_.qp_state;
  ctx.has_srq = init_.srq != nullptr;
  ctx.dc = init_.dc.role;
  ctx.mig = attr_.path_mig_state;
  ctx.alt_loaded = HasAlternatePath(attr_);
  if (mask & (attr::kAv | attr::kAltPath)) ctx.valid_gids = context_.gids().valid_mask();
  MigrationStep step = MigrationStep::kNone;
  auto next = CheckModify(ctx, a, mask, &step);
  if (!next.ok()) return next.status();
  SV_RETURN_IF_ERROR(CheckXrcPath(a, mask));
  if (!cut.empty()) SV_LOG(kWarn, "ibv_modify_qp(qp 0x%x): %s (as mlx5 does)", qpn_, cut.c_str());

  // Everything was checked: apply.
  if (*next == QpState::kReset && attr_.qp_state != QpState::kReset) {
    EnterReset();
    PublishEndpoint();
    sq_->Configure(RequesterConfigOf());
    return Status::Ok();
  }
  if (*next == QpState::kErr && attr_.qp_state != QpState::kErr) {
    EnterErrorLocked();
    return Status::Ok();
  }
  const QpState previous = attr_.qp_state;
  ApplyModify(attr_, a, mask, step);
  QpAttributes& s = attr_;
  if (mask & attr::kRqPsn) RestartWireReceive(s.rq_psn);
  if (mask & attr::kSqPsn) sq_->SetPsn(s.sq_psn);
  s.qp_state = *next;
  PublishEndpoint();
  sq_->Configure(RequesterConfigOf());
  if (raw_ && (mask & attr::kRateLimit)) raw_->SetRate(s.rate_limit, s.max_burst_sz);
  if (previous == QpState::kSqe && *next == QpState::kRts) sq_->Resume();
  if (previous == QpState::kSqd && *next == QpState::kRts) sq_->LeaveDrained();  // signature pipelining
  if (*next == QpState::kRts && previous != QpState::kRts) sq_->Progress();  // resume after SQD/SQE
  // A new rate applies at once: what waited for the old one's bucket is looked at again now.
  else if (*next == QpState::kRts && (mask & attr::kRateLimit)) sq_->Progress();
  // IBA 11.6.3: with en_sqd_async_notify, the SQ-drained event follows once the send queue has
  // no outstanding work. There is none to wait for here: it is posted at once.
  if (*next == QpState::kSqd && previous == QpState::kRts && s.en_sqd_async_notify)
    context_.PostAsyncEvent({kEventSqDrained, AsyncEvent::Subject::kQp, user_handle_, 0});
  // A migration the consumer forced is announced as one the device made (IBA 17.2.8): the QP
  // is on its new path from the next message on.
  if (step == MigrationStep::kMigrate) {
    SV_LOG(kInfo, "ibv_modify_qp(qp 0x%x): path_mig_state MIGRATED: moved to the alternate path", qpn_);
    context_.PostAsyncEvent({kEventPathMig, AsyncEvent::Subject::kQp, user_handle_, 0});
  }
  return Status::Ok();
}

void Qp::EnterReset() {
  // IBA 10.3.1: in RESET the QP holds no work and its attributes return to their initial values;
  // ibv_modify_qp moves it here from any state. Its completions leave the CQs too.
  QpAttributes fresh;
  fresh.cap = init_.cap;
  attr_ = fresh;
  if (init_.send_cq != nullptr) init_.send_cq->RemoveEntriesOf(qpn_);
  if (init_.recv_cq != nullptr && init_.recv_cq != init_.send_cq) init_.recv_cq->RemoveEntriesOf(qpn_);
  if (rq_) rq_->Clear();  // an SRQ is shared: its WQEs stay
  sq_->Reset();
  if (raw_) {  // what waited for the rate limiter is gone with the rate
    raw_->DropPaced();
    raw_->SetRate(0, 0);
  }
  requester_error_.store(false);
  send_queue_error_.store(false);
  endpoint().remote_error.store(0);
  RestartWireReceive(0);
}

QpAttributes Qp::Query() const {
  const_cast<Qp*>(this)->ApplyPendingError();
  if (init_.type == QpType::kXrcRecv) return QueryXrcTarget(endpoint());
  std::lock_guard lock(mu_);
  const_cast<Qp*>(this)->FoldPathMigrationsLocked();
  QpAttributes a = attr_;
  a.cur_qp_state = a.qp_state;
  a.cap = init_.cap;
  a.sq_draining = 0;
  return a;
}

}  // namespace softverbs::core
