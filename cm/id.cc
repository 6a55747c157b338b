#include "cm/id.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "base/log.h"
#include "cm/agent.h"
#include "cm/mad_conduit.h"
#include "cm/service.h"

namespace softverbs::cm {

// A connection accepted on a listener whose REQ has not been read yet.
class Id::PendingRequest : public Source {
 public:
  PendingRequest(Id* listener, UniqueFd fd) : listener_(listener), fd_(std::move(fd)) {}
  void OnReadable() override {
    Message m;
    bool closed = false;
    Status s = ReceiveMessage(fd_.get(), &m, &closed);
    if (closed || !s.ok() || (m.type != MessageType::kReq && m.type != MessageType::kSidrReq)) {
      SV_LOG(kDebug, "rdma_cm: dropping a connection without a valid REQ");
      listener_->channel_->Unwatch(fd_.get());
      listener_->OnRequest(this, nullptr);  // removes this
      return;
    }
    listener_->OnRequest(this, &m);
  }
  UniqueFd& fd() { return fd_; }

 private:
  Id* listener_;
  UniqueFd fd_;
};

namespace {

uint32_t RandomPsn() {
  static thread_local std::minstd_rand rng(std::random_device{}());
  return rng() & 0xffffff;
}

// A connected peer whose socket closed before the exchange completed has timed out as far as
// the IBA CM is concerned (REQ/REP retries exhausted): the kernel's rdma_cm reports that as
// RDMA_CM_EVENT_UNREACHABLE with status -ETIMEDOUT (cma_ib_handler, IB_CM_REQ_ERROR/REP_ERROR).
constexpr int kTimedOut = -ETIMEDOUT;
constexpr int kBoundRetryMs = 500;
constexpr int kTimewaitMs = 100;  // a disconnected QP's timewait (see Id::Disconnected)

}  // namespace

Id::Id(Channel* channel, PortSpace ps, bool ud) : channel_(channel), ps_(ps), ud_(ud) {
  channel_->AddId();
  psn_ = RandomPsn();
  mad_retry_ms_ = kMadRetryMs;
  mad_max_retries_ = kMaxCmRetries;
}


Id::~Id() = default;

Status Id::Check(IdVerb verb) const {
  if (Allowed(verb, state_)) return Status::Ok();
  return Invalid(std::string(IdVerbName(verb)) + " is not valid in state \"" +
                 IdStateName(state_) + "\" (rdma_cm(7))");
}

Status Id::CheckPrivateData(MessageType type, size_t len) const {
  if (len <= MaxPrivateData(type)) return Status::Ok();
  return Invalid("private_data_len " + std::to_string(len) + " exceeds the " +
                 std::to_string(MaxPrivateData(type)) + " bytes a " + MessageName(type) +
                 " carries (rdma_connect(3)/rdma_accept(3))");
}

void Id::Emit(EventType type, int status) {
  Event e;
  e.type = type;
  e.status = status;
  e.id = this;
  channel_->Post(std::move(e));
}

void Id::EmitConnection(EventType type, int status, const Message& from) {
  Event e;
  e.type = type;
  e.status = status;
  e.id = this;
  e.listen_id = type == EventType::kConnectRequest ? listener_ : nullptr;
  e.ud = ud_;
  // The peer's parameters as this side sees them: its responder resources are our initiator
  // depth and the reverse (rdma_accept(3) takes CONNECT_REQUEST's values as they are).
  e.conn.private_data.assign(from.private_data.begin(),
                             from.private_data.begin() + from.private_data_len);
  // The IBA CM carries no private data length: the consumer receives the message's whole
  // private data area, zero-padded (the kernel's rdma_cm reports 56 bytes for a REQ, 196 for a
  // REP, 148 for a REJ...). Programs written for hardware read their own header from it.
  e.conn.private_data.resize(MaxPrivateData(from.type), 0);
  e.conn.responder_resources = from.initiator_depth;
  e.conn.initiator_depth = from.responder_resources;
  e.conn.flow_control = from.flow_control;
  e.conn.retry_count = from.retry_count;
  e.conn.rnr_retry_count = from.rnr_retry_count;
  e.conn.srq = from.srq;
  e.conn.qp_num = from.qpn;
  e.conn.ece = from.ece;
  if (ud_) {
    e.ud_param.private_data = e.conn.private_data;
    e.ud_param.dgid = from.gid;
    e.ud_param.sgid_index = sgid_index_;
    e.ud_param.port_num = device_.port_num;
    e.ud_param.qp_num = from.qpn;
    e.ud_param.qkey = from.qkey;
  }
  channel_->Post(std::move(e));
}

// --- addresses ----------------------------------------------------------------------------------

Status Id::BindAddr(const sockaddr* addr, const DeviceView& device) {
  SV_RETURN_IF_ERROR(Check(IdVerb::kBindAddr));
  if (!IsIpFamily(addr))
    return Status(EAFNOSUPPORT, "the address family is not AF_INET or AF_INET6 (rdma_bind_addr(3))");
  bool wildcard = IsWildcard(addr);
  int gid_index = -1;
  if (!wildcard) {
    // bind(2): "EADDRNOTAVAIL A nonexistent interface was requested or the requested address
    // was not local."
    if (!IsHostAddress(addr))
      return Status(EADDRNOTAVAIL, AddressText(addr) + " is not an address of this host");
    gid_index = device.GidIndex(GidOf(addr));
    if (gid_index < 0)
      return Status(ENODEV, AddressText(addr) + " has no GID on softverbs0 (GID table full)");
  }
  sockaddr_storage bound{};
  memcpy(&bound, addr, AddressLength(addr));
  Result<UniqueFd> fd = BindService(&bound, afonly_);
  if (!fd.ok()) return fd.status();
  device_ = device;  // a wildcard listener's requests arrive on this device too
  socket_ = std::move(fd.value());
  src_ = bound;
  if (!wildcard) {
    has_device_ = true;
    sgid_index_ = static_cast<uint8_t>(gid_index);
  }
  state_ = IdState::kBound;
  return Status::Ok();
}

Status Id::ResolveAddr(const sockaddr* src, const sockaddr* dst, const DeviceView& device) {
  SV_RETURN_IF_ERROR(Check(IdVerb::kResolveAddr));
  if (!IsIpFamily(dst))
    return Status(EAFNOSUPPORT, "dst_addr is not AF_INET or AF_INET6 (rdma_resolve_addr(3))");
  if (src != nullptr && !IsIpFamily(src))
    return Status(EAFNOSUPPORT, "src_addr is not AF_INET or AF_INET6 (rdma_resolve_addr(3))");
  // An identifier already bound keeps its address: src_addr only binds an idle one (the
  // kernel's rdma_resolve_addr binds in RDMA_CM_IDLE only).
  if (state_ == IdState::kBound) src = nullptr;
  sockaddr_storage target = ConcreteDestination(dst);
  const sockaddr* t = reinterpret_cast<const sockaddr*>(&target);
  // A multicast group resolves on the device of the source (rdma_join_multicast(3) needs the
  // identifier bound to a device).
  bool multicast = IsMulticast(t);
  const bool wire = !multicast && !IsHostAddress(t);
  sockaddr_storage routed{};
  if (wire) {
    // Another host: its CM is reached with MADs on QP1 from the address the routing picks,
    // which must be one of softverbs0's GIDs. Otherwise neighbour resolution fails, which
    // rdma_cm reports as ADDR_ERROR; the identifier stays as it was (the kernel's
    // addr_handler returns it to bound/idle).
    Status reached = WireSource(t, device, &routed);
    if (!reached.ok()) {
      SV_LOG(kInfo, "rdma_resolve_addr: %s", reached.rule().c_str());
      Emit(EventType::kAddrError, -reached.code());
      return Status::Ok();
    }
  }
  if (state_ == IdState::kIdle) {
    sockaddr_storage from{};
    if (src != nullptr && !IsWildcard(src))
      memcpy(&from, src, AddressLength(src));
    else
      from = multicast ? LoopbackOf(t->sa_family) : wire ? routed : SourceFor(t);
    if (src != nullptr) SetPort(&from, PortOf(src));
    SV_RETURN_IF_ERROR(BindAddr(reinterpret_cast<const sockaddr*>(&from), device));
  }
  dst_ = target;
  on_wire_ = wire;
  state_ = IdState::kAddrResolved;
  if (!has_device_) {
    // Bound to a wildcard: the source the routing picks decides the device and GID.
    sockaddr_storage source = multicast ? LoopbackOf(t->sa_family) : wire ? routed : SourceFor(t);
    int gid_index = device.GidIndex(GidOf(reinterpret_cast<const sockaddr*>(&source)));
    if (gid_index < 0) {
      Emit(EventType::kAddrError, -ENODEV);
      return Status::Ok();
    }
    uint16_t port = PortOf(reinterpret_cast<const sockaddr*>(&src_));
    src_ = source;
    SetPort(&src_, port);
    has_device_ = true;
    device_ = device;
    sgid_index_ = static_cast<uint8_t>(gid_index);
  }
  Emit(EventType::kAddrResolved, 0);
  return Status::Ok();
}

Status Id::ResolveRoute() {
  SV_RETURN_IF_ERROR(Check(IdVerb::kResolveRoute));
  state_ = IdState::kRouteResolved;
  Emit(EventType::kRouteResolved, 0);
  return Status::Ok();
}

// --- passive side -------------------------------------------------------------------------------

Status Id::Listen(int backlog, const DeviceView& device) {
  SV_RETURN_IF_ERROR(Check(IdVerb::kListen));
  if (state_ == IdState::kIdle) {
    // The kernel's rdma_listen binds an unbound identifier to the IPv4 wildcard and an
    // ephemeral port first (cma's rdma_listen: RDMA_CM_IDLE → rdma_bind_addr(any)).
    sockaddr_in any{};
    any.sin_family = AF_INET;
    SV_RETURN_IF_ERROR(BindAddr(reinterpret_cast<const sockaddr*>(&any), device));
  }
  if (listen(socket_.get(), backlog > 0 ? backlog : SOMAXCONN) != 0)
    return Status(errno, std::string("listen: ") + strerror(errno));
  SV_RETURN_IF_ERROR(channel_->Watch(socket_.get(), this));
  watched_ = true;
  state_ = IdState::kListening;
  Status wire = ListenOnWire();
  if (!wire.ok()) SV_LOG(kWarn, "rdma_listen: other hosts cannot reach this listener: %s", wire.rule().c_str());
  return Status::Ok();
}

void Id::OnListenerReadable() {
  int fd = accept4(socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  if (!SameUser(fd)) {
    SV_LOG(kWarn, "rdma_cm: refusing a connection from another user's process");
    close(fd);
    return;
  }
  auto pending = std::make_unique<PendingRequest>(this, UniqueFd(fd));
  if (!channel_->Watch(fd, pending.get()).ok()) return;
  pending_.push_back(std::move(pending));
}

void Id::OnRequest(PendingRequest* pending, const Message* request) {
  auto it = pending_.begin();
  while (it != pending_.end() && it->get() != pending) ++it;
  if (it == pending_.end()) return;
  std::unique_ptr<PendingRequest> owned = std::move(*it);
  pending_.erase(it);
  if (request == nullptr) return;  // the connection closed or carried no REQ: dropped
  AdoptRequest(*request, std::make_unique<SocketConduit>(std::move(owned->fd())), nullptr);
}

void Id::AdoptRequest(const Message& message, std::unique_ptr<Conduit> conduit, MadConduit* mad) {
  bool ud = message.type == MessageType::kSidrReq;
  // The new identifier: bound to the device, "similar to a new socket" (rdma_accept(3)). It
  // belongs to the application once CONNECT_REQUEST is delivered; abi/ wraps it then.
  Id* child = new Id(channel_, ps_, ud);
  child->listener_ = this;
  child->afonly_ = afonly_;
  child->tos_ = tos_;
  child->ack_timeout_ = ack_timeout_;
  child->peer_ = message;
  child->dst_ = message.src;
  child->src_ = message.dst;
  child->has_device_ = true;
  child->passive_ = true;
  child->device_ = device_;
  int gid_index = child->device_.GidIndex(GidOf(reinterpret_cast<const sockaddr*>(&child->src_)));
  child->sgid_index_ = static_cast<uint8_t>(gid_index < 0 ? 0 : gid_index);
  child->conduit_ = std::move(conduit);
  child->mad_ = mad;
  child->on_wire_ = mad != nullptr;
  child->mad_retry_ms_ = mad_retry_ms_;
  child->mad_max_retries_ = mad_max_retries_;
  child->mad_timewait_ms_ = mad_timewait_ms_;
  if (mad != nullptr) {
    // The REQ's path MTU, as the kernel's cm_init_qp_rtr_attr programs it (no larger than ours).
    child->path_mtu_ = std::min(mad->context().path_mtu, device_.active_mtu);
    (void)channel_->Watch(child->conduit_->fd(), child);
  } else {
    channel_->Retarget(child->conduit_->fd(), child);
  }
  child->watched_ = true;
  child->state_ = IdState::kRequestReceived;
  child->EmitConnection(EventType::kConnectRequest, 0, message);
}

// --- active side --------------------------------------------------------------------------------

Message Id::Compose(MessageType type) const {
  Message m;
  m.type = type;
  m.gid = GidOf(reinterpret_cast<const sockaddr*>(&src_));
  m.src = src_;
  m.dst = dst_;
  m.psn = psn_;
  m.qkey = qkey_;
  return m;
}

Status Id::Connect(const ConnParam& param) {
  SV_RETURN_IF_ERROR(Check(IdVerb::kConnect));
  MessageType type = ud_ ? MessageType::kSidrReq : MessageType::kReq;
  SV_RETURN_IF_ERROR(CheckPrivateData(type, param.private_data.size()));
  if (!ud_ && qp_ == nullptr && param.qp_num == 0)
    SV_LOG(kDebug, "rdma_connect: no QP on the identifier and conn_param->qp_num is 0");
  local_ = param;
  Message m = Compose(type);
  m.qpn = qp_ != nullptr ? qp_->qp_num() : param.qp_num;
  m.responder_resources = param.responder_resources;
  m.initiator_depth = param.initiator_depth;
  m.flow_control = param.flow_control;
  m.retry_count = param.retry_count;
  m.rnr_retry_count = param.rnr_retry_count;
  m.srq = param.srq;
  if (!ud_) m.ece = param.ece;  // a SIDR_REQ has no ECE (the kernel's cm_format_sidr_req)
  m.private_data_len = static_cast<uint8_t>(param.private_data.size());
  std::copy(param.private_data.begin(), param.private_data.end(), m.private_data.begin());

  if (on_wire_) return ConnectOnWire(m);
  const sockaddr* dst = reinterpret_cast<const sockaddr*>(&dst_);
  Status reached = ConnectService(socket_.get(), dst);
  // A port that is bound but not listening yet: on a fabric the REQ spends its flight time and
  // retransmissions (4.096 us * 2^timeout each) before the remote CM answers, and
  // programs rely on that window (qperf -cm1 sends its port to the client before it calls
  // rdma_listen). Give the owner of the port up to kBoundRetryMs to listen.
  for (int waited = 0; reached.code() == ECONNREFUSED && waited < kBoundRetryMs &&
                       ServiceBound(dst);
       ++waited) {
    usleep(1000);
    reached = ConnectService(socket_.get(), dst);
  }
  if (reached.code() == ECONNREFUSED || reached.code() == EPERM) {
    // Nothing (of this user) listens: the remote CM answers a REQ for an unknown service ID with REJ reason 8
    // (IB_CM_REJ_INVALID_SERVICE_ID), a SIDR_REQ with SIDR_REP status 2 (IB_SIDR_UNSUPPORTED);
    // rdma_cm reports them as REJECTED / UNREACHABLE with that status.
    SV_LOG(kInfo, "rdma_connect: %s", reached.rule().c_str());
    state_ = IdState::kDisconnected;
    if (ud_)
      Emit(EventType::kUnreachable, kSidrUnsupported);
    else
      Emit(EventType::kRejected, kRejInvalidServiceId);
    return Status::Ok();
  }
  if (!reached.ok()) {
    // A full backlog: the REQ would be dropped and time out.
    state_ = IdState::kDisconnected;
    Emit(EventType::kUnreachable, kTimedOut);
    return Status::Ok();
  }
  conduit_ = std::make_unique<SocketConduit>(std::move(socket_));
  SV_RETURN_IF_ERROR(conduit_->Send(m));
  SV_RETURN_IF_ERROR(channel_->Watch(conduit_->fd(), this));
  watched_ = true;
  state_ = IdState::kConnecting;
  ArmTimeout(exchange_timeout_ms_);
  return Status::Ok();
}

ConnectedPath Id::PathFrom(uint8_t max_rd_atomic, uint8_t max_dest_rd_atomic, uint8_t retry_cnt,
                           uint8_t rnr_retry) const {
  ConnectedPath p;
  p.dest_qpn = peer_.qpn;
  p.rq_psn = peer_.psn;
  p.sq_psn = psn_;
  if (on_wire_) {
    // On the wire each side announces the PSN its receive queue expects (rxe's capture; the
    // kernel's cm_rep_handler sets the active side's sq_psn from the REP's Starting PSN).
    p.rq_psn = psn_;
    p.sq_psn = peer_.psn;
  }
  p.dgid = peer_.gid;
  p.sgid_index = sgid_index_;
  p.port_num = device_.port_num;
  p.path_mtu = device_.active_mtu;
  p.traffic_class = tos_;
  p.max_rd_atomic = max_rd_atomic;
  p.max_dest_rd_atomic = max_dest_rd_atomic;
  p.retry_cnt = retry_cnt;
  p.rnr_retry = rnr_retry;
  p.timeout = ack_timeout_;
  if (on_wire_) {
    if (path_mtu_ != 0) p.path_mtu = path_mtu_;
    if (!ack_timeout_set_) p.timeout = kMadAckTimeout;  // as rxe's CM programs it
  }
  return p;
}

Result<ConnectedPath> Id::Path() const {
  switch (state_) {
    // Passive: the REQ is known; our values are those rdma_accept will send (or the REQ's
    // mirrored ones before accept). Each side uses the retry counts of the other's message
    // (the kernel CM: cm_req_handler / cm_rep_handler take the counts from the peer's message).
    case IdState::kRequestReceived:
    case IdState::kAccepting:
      if (passive_) {
        uint8_t init = state_ == IdState::kAccepting ? local_.initiator_depth : peer_.responder_resources;
        uint8_t resp = state_ == IdState::kAccepting ? local_.responder_resources : peer_.initiator_depth;
        return PathFrom(init, resp, peer_.retry_count, peer_.rnr_retry_count);
      }
      break;
    case IdState::kConnectResponse:
    case IdState::kConnected:
      if (!passive_)
        return PathFrom(peer_.responder_resources, peer_.initiator_depth, local_.retry_count,
                        peer_.rnr_retry_count);
      return PathFrom(local_.initiator_depth, local_.responder_resources, peer_.retry_count,
                      peer_.rnr_retry_count);
    default:
      break;
  }
  return Invalid(std::string("the remote QP is not known in state \"") + IdStateName(state_) +
                 "\" (rdma_init_qp_attr(3) needs a connection request or response)");
}

Status Id::Accept(const ConnParam& param) {
  SV_RETURN_IF_ERROR(Check(IdVerb::kAccept));
  MessageType type = ud_ ? MessageType::kSidrRep : MessageType::kRep;
  SV_RETURN_IF_ERROR(CheckPrivateData(type, param.private_data.size()));
  local_ = param;
  Message m = Compose(type);
  m.qpn = qp_ != nullptr ? qp_->qp_num() : param.qp_num;
  m.ece = param.ece;  // REP and SIDR_REP (cm_format_rep, cm_format_sidr_rep)
  m.private_data_len = static_cast<uint8_t>(param.private_data.size());
  std::copy(param.private_data.begin(), param.private_data.end(), m.private_data.begin());
  if (ud_) {
    // SIDR: the REP carries the QPN and Q_Key; no RTU follows, and the passive side gets no
    // ESTABLISHED (the kernel's cma_accept for UD sends SIDR_REP only).
    // A requester gone meanwhile has nobody to answer (its lookup ended when its socket did).
    Status sent = peer_gone_ ? Status::Ok() : SendToPeer(m);
    StopWatching();
    DropConduit();
    state_ = IdState::kConnected;
    return sent.code() == EPIPE || sent.code() == ECONNRESET ? Status::Ok() : sent;
  }
  m.responder_resources = param.responder_resources;
  m.initiator_depth = param.initiator_depth;
  m.flow_control = param.flow_control;
  m.rnr_retry_count = param.rnr_retry_count;
  m.srq = param.srq;
  state_ = IdState::kAccepting;
  if (qp_ != nullptr) {
    // rdma_accept moves the QP to RTR and RTS before the REP leaves, so the active side may
    // send as soon as it sees the REP.
    Result<ConnectedPath> path = Path();
    Status moved = path.ok() ? qp_->ToRtrRts(path.value()) : path.status();
    if (!moved.ok()) {
      state_ = IdState::kRequestReceived;
      return moved;
    }
  }
  if (peer_gone_) {
    Emit(EventType::kUnreachable, kTimedOut);
    state_ = IdState::kDisconnected;
    return Status::Ok();
  }
  Status sent = SendToPeer(m);
  if (!sent.ok()) {
    OnPeerGone();
    return Status::Ok();
  }
  retries_ = 0;
  ArmTimeout(mad_ != nullptr ? mad_retry_ms_ : exchange_timeout_ms_);  // for the RTU
  return Status::Ok();
}

Status Id::Reject(const std::vector<uint8_t>& private_data, int reason) {
  SV_RETURN_IF_ERROR(Check(IdVerb::kReject));
  MessageType type = ud_ ? MessageType::kSidrRep : MessageType::kRej;
  SV_RETURN_IF_ERROR(CheckPrivateData(type, private_data.size()));
  Message m = Compose(type);
  m.status = ud_ ? kSidrReject : static_cast<uint32_t>(reason);
  m.private_data_len = static_cast<uint8_t>(private_data.size());
  std::copy(private_data.begin(), private_data.end(), m.private_data.begin());
  if (!peer_gone_) (void)SendToPeer(m);  // a gone peer needs no answer
  StopWatching();
  DropConduit();
  state_ = IdState::kDisconnected;
  return Status::Ok();
}

Status Id::Establish() {
  SV_RETURN_IF_ERROR(Check(IdVerb::kEstablish));
  // rdma_establish(3): "should not be used on an rdma_cm_id on which a QP has been created".
  if (qp_ != nullptr) return Invalid("the identifier has a QP: the CM already sent RTU");
  Message m = Compose(MessageType::kRtu);
  state_ = IdState::kConnected;
  if (!SendToPeer(m).ok()) OnPeerGone();
  return Status::Ok();
}

Status Id::Disconnect() {
  SV_RETURN_IF_ERROR(Check(IdVerb::kDisconnect));
  if (state_ == IdState::kDisconnected) return Status::Ok();
  // rdma_disconnect(3): "transitions any associated QP to the error state".
  if (qp_ != nullptr) (void)qp_->ToError();
  timer_.Disarm(channel_);
  if (mad_ != nullptr) {
    // On the wire the DREQ is sent again until its DREP (cm.c: the DREQ's timer and retries);
    // DISCONNECTED is reported now as on this host, the timewait follows the DREP.
    (void)SendToPeer(Compose(MessageType::kDreq));
    state_ = IdState::kDisconnected;
    Emit(EventType::kDisconnected, 0);
    dreq_pending_ = true;
    retries_ = 0;
    ArmTimeout(mad_retry_ms_);
    return Status::Ok();
  }
  // The DREQ lands in the peer's socket for sure (a local, reliable transport), and the remote
  // CM answers a DREQ with a DREP without its application (the kernel does): the DREP carries
  // nothing, so the disconnect is complete now, as it is once the DREP arrives on a fabric. The
  // peer reports DISCONNECTED when it reads its channel; a DREP it sends back is ignored here.
  (void)SendToPeer(Compose(MessageType::kDreq));
  StopWatching();
  DropConduit();
  Disconnected();
  return Status::Ok();
}

Status Id::NotifyCommEstablished() {
  SV_RETURN_IF_ERROR(Check(IdVerb::kNotify));
  // rdma_notify(3): IBV_EVENT_COMM_EST "forces the connection into an established state".
  if (state_ == IdState::kAccepting) {
    timer_.Disarm(channel_);
    state_ = IdState::kConnected;
    Emit(EventType::kEstablished, 0);
  }
  return Status::Ok();
}

// --- multicast ----------------------------------------------------------------------------------

void Id::AttachQp(QpDriver* qp) {
  qp_ = qp;
  if (qp_ == nullptr) return;
  for (Membership& g : groups_) {
    if (g.send_only || g.attached) continue;
    g.attached = qp_->Attach(g.mgid).ok();
  }
}

void Id::DetachAll() {
  if (qp_ == nullptr) return;
  for (Membership& g : groups_)
    if (g.attached) {
      (void)qp_->Detach(g.mgid);
      g.attached = false;
    }
}

Status Id::JoinMulticast(const sockaddr* group, bool send_only, void* context) {
  // The kernel's rdma_join_multicast: the identifier must be bound to a device (ADDR_BOUND or
  // ADDR_RESOLVED) and be a UD one.
  if (!has_device_ || (state_ != IdState::kBound && state_ != IdState::kAddrResolved &&
                       state_ != IdState::kRouteResolved && state_ != IdState::kConnected))
    return Invalid(std::string("rdma_join_multicast needs an identifier bound to a device "
                               "(rdma_bind_addr / rdma_resolve_addr); this one is ") +
                   IdStateName(state_) + (has_device_ ? "" : " without a device"));
  if (!ud_) return Invalid("multicast needs a UD identifier (RDMA_PS_UDP or RDMA_PS_IPOIB)");
  if (!IsIpFamily(group) || !IsMulticast(group))
    return Invalid("the address is not an IPv4 or IPv6 multicast address");
  // RoCE: the group's MGID is the IPv4-mapped address (IPv4) or the IPv6 address itself, as the
  // kernel's cma_iboe_set_mgid makes it.
  Gid mgid = GidOf(group);
  for (const Membership& g : groups_)
    if (g.mgid == mgid) return Status(EADDRINUSE, AddressText(group) + " is already joined by this identifier");
  Membership m;
  m.mgid = mgid;
  m.send_only = send_only;
  if (qp_ != nullptr && !send_only) {
    SV_RETURN_IF_ERROR(qp_->Attach(mgid));
    m.attached = true;
  }
  groups_.push_back(m);
  // Nothing to ask a subnet manager on one host: the join completes at once.
  Event e;
  e.type = EventType::kMulticastJoin;
  e.id = this;
  e.ud = true;
  e.join_context = context;
  e.ud_param.dgid = mgid;
  e.ud_param.sgid_index = sgid_index_;
  e.ud_param.port_num = device_.port_num;
  e.ud_param.qp_num = kMulticastQpn;
  e.ud_param.qkey = qkey_;
  channel_->Post(std::move(e));
  return Status::Ok();
}

Status Id::LeaveMulticast(const sockaddr* group) {
  if (!IsIpFamily(group)) return Invalid("the address is not AF_INET or AF_INET6");
  Gid mgid = GidOf(group);
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (it->mgid != mgid) continue;
    if (it->attached && qp_ != nullptr) (void)qp_->Detach(mgid);
    groups_.erase(it);
    return Status::Ok();
  }
  // rdma-core's rdma_leave_multicast: a group this identifier did not join → EADDRNOTAVAIL.
  return Status(EADDRNOTAVAIL, AddressText(group) + " was not joined by this identifier");
}

// --- the protocol -------------------------------------------------------------------------------

void Id::OnReadable() {
  if (state_ == IdState::kListening) {
    OnListenerReadable();
    return;
  }
  Message m;
  bool closed = false;
  if (conduit_ == nullptr) return;
  Status s = conduit_->Receive(&m, &closed);
  if (s.code() == EAGAIN) return;  // the MAD inbox was emptied meanwhile
  if (closed) {
    OnPeerGone();
    return;
  }
  if (!s.ok()) {
    SV_LOG(kWarn, "rdma_cm: %s", s.rule().c_str());
    return;
  }
  OnMessage(m);
}

void Id::OnMessage(const Message& m) {
  // Each handled message answers what this identifier waited for: its timeout stops.
  auto answered = [this] { timer_.Disarm(channel_); };
  SV_LOG(kDebug, "rdma_cm: %s received in state %s", MessageName(m.type), IdStateName(state_));
  switch (m.type) {
    case MessageType::kRep:
      if (state_ != IdState::kConnecting) break;
      answered();
      peer_ = m;
      if (qp_ == nullptr) {
        state_ = IdState::kConnectResponse;
        EmitConnection(EventType::kConnectResponse, 0, m);
        return;
      }
      {
        state_ = IdState::kConnected;
        Result<ConnectedPath> path = Path();
        Status moved = path.ok() ? qp_->TakeResponseEce(m.ece) : path.status();
        if (moved.ok()) moved = qp_->ToRtrRts(path.value());
        if (!moved.ok()) {
          SV_LOG(kError, "rdma_cm: REP refused (ECE or the QP's move to RTS): %s", moved.rule().c_str());
          Message rej = Compose(MessageType::kRej);
          rej.status = kRejConsumerDefined;
          (void)SendToPeer(rej);
          StopWatching();
          state_ = IdState::kDisconnected;
          Emit(EventType::kConnectError, -moved.code());
          return;
        }
      }
      (void)SendToPeer(Compose(MessageType::kRtu));
      EmitConnection(EventType::kEstablished, 0, m);
      return;
    case MessageType::kRej:
      if (state_ != IdState::kConnecting && state_ != IdState::kConnectResponse) break;
      answered();
      StopWatching();
      state_ = IdState::kDisconnected;
      EmitConnection(EventType::kRejected, static_cast<int>(m.status), m);
      return;
    case MessageType::kSidrRep:
      if (state_ != IdState::kConnecting) break;
      answered();
      StopWatching();
      if (m.status != 0) {
        state_ = IdState::kDisconnected;
        EmitConnection(EventType::kUnreachable, static_cast<int>(m.status), m);
        return;
      }
      peer_ = m;
      state_ = IdState::kConnected;
      EmitConnection(EventType::kEstablished, 0, m);
      return;
    case MessageType::kRtu:
      if (state_ != IdState::kAccepting) break;
      answered();
      state_ = IdState::kConnected;
      Emit(EventType::kEstablished, 0);
      return;
    case MessageType::kDrep:
      if (state_ != IdState::kDisconnected || !dreq_pending_) break;
      answered();
      dreq_pending_ = false;
      StartTimewait();
      return;
    case MessageType::kDreq:
      if (state_ == IdState::kDisconnected && mad_ != nullptr) {
        // Both sides disconnected at once, or our DREP was lost: the kernel answers a DREQ in
        // any state after its own DREQ with a DREP (cm_dreq_handler).
        (void)SendToPeer(Compose(MessageType::kDrep));
        return;
      }
      if (state_ != IdState::kConnected && state_ != IdState::kAccepting &&
          state_ != IdState::kConnectResponse)
        break;
      answered();
      if (qp_ != nullptr) (void)qp_->ToError();
      (void)SendToPeer(Compose(MessageType::kDrep));
      Disconnected();
      return;
    default:
      break;
  }
  SV_LOG(kDebug, "rdma_cm: %s ignored in state %s", MessageName(m.type), IdStateName(state_));
}

void Id::OnPeerGone() {
  if (!in_timewait_) timer_.Disarm(channel_);  // a timewait runs on after the peer left
  StopWatching();
  DropConduit();
  switch (state_) {
    case IdState::kConnecting:
    case IdState::kAccepting:
      state_ = IdState::kDisconnected;
      Emit(EventType::kUnreachable, kTimedOut);
      return;
    case IdState::kRequestReceived:
      peer_gone_ = true;  // reported when the application answers the request
      return;
    case IdState::kConnectResponse:
    case IdState::kConnected:
      // A dead or vanished peer: the QP can no longer reach it (IBA: the CM's keepalive/DREQ
      // timeout ends in DISCONNECTED).
      if (qp_ != nullptr) (void)qp_->ToError();
      if (ud_) return;
      Disconnected();
      return;
    default:
      return;
  }
}

void Id::Disconnected() {
  state_ = IdState::kDisconnected;
  Emit(EventType::kDisconnected, 0);
  // rdma_get_cm_event(3): after a disconnect the QP stays in timewait "to allow any in flight
  // packets to exit the network", then RDMA_CM_EVENT_TIMEWAIT_EXIT says it may be reused. On
  // one host nothing is in flight once the DREQ is delivered: a short timewait.
  StartTimewait();
}

void Id::StartTimewait() {
  if (qp_ == nullptr) return;
  in_timewait_ = true;
  if (mad_ == nullptr) {
    ArmTimeout(kTimewaitMs);
    return;
  }
  // cm.c: the timewait lasts cm_convert_to_ms(av.timeout) (about 2 s at timeout 19).
  ArmTimeout(mad_timewait_ms_ >= 0 ? mad_timewait_ms_ : CmConvertToMs(PathFrom(0, 0, 0, 0).timeout));
}

void Id::ArmTimeout(int milliseconds) {
  Status armed = timer_.Arm(channel_, milliseconds);
  if (!armed.ok()) SV_LOG(kWarn, "rdma_cm: no timeout for this exchange: %s", armed.rule().c_str());
}

// The answer never came while the peer's socket stayed open (a live process that does not read
// its channel): what the kernel's CM reports once its retries are exhausted. Or a disconnected
// QP's timewait is over.
void Id::OnTimeout() {
  switch (state_) {
    case IdState::kConnecting:
    case IdState::kAccepting:
      if (mad_ != nullptr && RetransmitOrWait()) return;
      // IB_CM_REQ_ERROR / IB_CM_REP_ERROR → RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT.
      SV_LOG(kInfo, "rdma_cm: %s unanswered: the peer's CM is unreachable",
             state_ == IdState::kConnecting ? (ud_ ? "SIDR_REQ" : "REQ") : "REP");
      StopWatching();
      DropConduit();
      if (qp_ != nullptr) (void)qp_->ToError();
      state_ = IdState::kDisconnected;
      Emit(EventType::kUnreachable, kTimedOut);
      return;
    case IdState::kDisconnected:
      if (dreq_pending_) {
        if (RetransmitOrWait()) return;
        // cm.c: a DREQ whose retries ran out ends in timewait all the same.
        dreq_pending_ = false;
        StartTimewait();
        return;
      }
      if (in_timewait_) {
        in_timewait_ = false;
        if (mad_ != nullptr) {
          StopWatching();
          DropConduit();  // the comm ID is free again
        }
        Emit(EventType::kTimewaitExit, 0);
      }
      return;
    default:
      return;
  }
}

void Id::StopWatching() {
  if (watched_ && WatchedFd() >= 0) channel_->Unwatch(WatchedFd());
  watched_ = false;
}

void Id::MoveTo(Channel* channel) {
  std::deque<Event> queued = channel_->TakeEventsOf(this);
  bool was_watched = watched_;
  StopWatching();
  for (auto& p : pending_) channel_->Unwatch(p->fd().get());
  if (wire_requests_ != nullptr) channel_->Unwatch(wire_requests_->fd());
  timer_.MoveTo(channel_, channel);
  channel_->RemoveId();
  channel_ = channel;
  channel_->AddId();
  if (was_watched && WatchedFd() >= 0) watched_ = channel_->Watch(WatchedFd(), this).ok();
  for (auto& p : pending_) (void)channel_->Watch(p->fd().get(), p.get());
  if (wire_requests_ != nullptr) (void)channel_->Watch(wire_requests_->fd(), inbox_watch_.get());
  for (Event& e : queued) channel_->Post(std::move(e));
}

void Id::Close() {
  // rdma_leave_multicast(3): "Destroying an rdma_cm_id will automatically leave all multicast
  // groups."
  DetachAll();
  groups_.clear();
  (void)channel_->TakeEventsOf(this);
  // Requests this listener received that the application never saw die with it.
  for (Event& e : channel_->TakeRequestsTo(this)) {
    e.id->Close();
    delete e.id;
  }
  StopWatching();
  timer_.Disarm(channel_);
  for (auto& p : pending_) channel_->Unwatch(p->fd().get());
  pending_.clear();
  if (wire_requests_ != nullptr) {
    channel_->Unwatch(wire_requests_->fd());
    Agent::Get().RemoveListener(wire_requests_.get());
    MadInbox::Received r;
    while (wire_requests_->Pop(&r)) Agent::Get().RemoveConnection(r.comm_id);  // never adopted
    wire_requests_.reset();
  }
  DropConduit();
  socket_.reset();
  channel_->RemoveId();
}

}  // namespace softverbs::cm
