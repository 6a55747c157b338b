// cm::Id's MAD path (docs/cm.md, "Across hosts"): the source address of another host's
// destination, the REQ on a MadConduit, a listener's entry in the process's CM agent and the
// requests it receives there, and the retransmission of what awaits an answer.
#include <variant>

#include "base/log.h"
#include "cm/agent.h"
#include "cm/id.h"
#include "cm/mad_conduit.h"

namespace softverbs::cm {

// --- the MAD path (docs/cm.md, "Across hosts") -------------------------------------------------

Status Id::SendToPeer(const Message& m) {
  if (conduit_ == nullptr) return Status(EPIPE, "the connection's transport is closed");
  return conduit_->Send(m);
}

void Id::DropConduit() {
  if (mad_ != nullptr) Agent::Get().RemoveConnection(mad_->local_comm_id());
  mad_ = nullptr;
  conduit_.reset();
}

int Id::WatchedFd() const {
  if (state_ == IdState::kListening) return socket_.get();
  return conduit_ != nullptr ? conduit_->fd() : -1;
}

Status Id::WireSource(const sockaddr* dst, const DeviceView& device, sockaddr_storage* source) const {
  if (!Agent::Get().has_sender())
    return Status(EHOSTUNREACH, AddressText(dst) + " is not an address of this host and softverbs0 has no wire "
                                "to reach it");
  Result<sockaddr_storage> routed = RouteSourceFor(dst);
  if (!routed.ok()) return routed.status();
  const sockaddr* from = reinterpret_cast<const sockaddr*>(&routed.value());
  if (device.GidIndex(GidOf(from)) < 0)
    return Status(EHOSTUNREACH, "the route to " + AddressText(dst) + " leaves from " + AddressText(from) +
                                    ", which is not a GID of softverbs0");
  *source = routed.value();
  return Status::Ok();
}

Status Id::ConnectOnWire(const Message& m) {
  Agent& agent = Agent::Get();
  mad::MadContext ctx;
  ctx.local_comm_id = agent.NewCommId();
  ctx.tid = (static_cast<uint64_t>(agent.hi_tid()) << 32) | ctx.local_comm_id;  // cm.c cm_form_tid
  ctx.service_id = mad::ServiceId(static_cast<mad::PortSpace>(ps_), PortOf(reinterpret_cast<const sockaddr*>(&dst_)));
  ctx.local_ca_guid = device_.node_guid;
  ctx.path_mtu = device_.active_mtu;  // enum ibv_mtu is the IBA's MTU code
  auto conduit = MadConduit::Create(agent.Sender(), GidOf(reinterpret_cast<const sockaddr*>(&src_)),
                                    GidOf(reinterpret_cast<const sockaddr*>(&dst_)), ctx, agent.LastWords());
  if (!conduit.ok()) return conduit.status();
  mad_ = conduit->get();
  agent.AddConnection(ctx.local_comm_id, mad_);
  conduit_ = std::move(conduit.value());
  if (Status sent = conduit_->Send(m); !sent.ok()) {
    // Refused before it left (a field the MAD cannot carry) or no port to send from.
    SV_LOG(kError, "rdma_connect(id %p): the %s cannot be sent: %s", static_cast<void*>(this), MessageName(m.type),
           sent.rule().c_str());
    DropConduit();
    return sent;
  }
  SV_RETURN_IF_ERROR(channel_->Watch(conduit_->fd(), this));
  watched_ = true;
  state_ = IdState::kConnecting;
  retries_ = 0;
  ArmTimeout(mad_retry_ms_);
  return Status::Ok();
}

Status Id::ListenOnWire() {
  if (!Agent::Get().has_sender()) return Status::Ok();  // no wire in this process: this host only
  auto inbox = MadInbox::Create();
  if (!inbox.ok()) return inbox.status();
  wire_requests_ = std::move(inbox.value());
  inbox_watch_ = std::make_unique<InboxWatch>(this);
  SV_RETURN_IF_ERROR(channel_->Watch(wire_requests_->fd(), inbox_watch_.get()));
  const sockaddr* bound = reinterpret_cast<const sockaddr*>(&src_);
  Agent::Get().AddListener(static_cast<uint16_t>(ps_), PortOf(bound), IsWildcard(bound) ? Gid{} : GidOf(bound),
                           wire_requests_.get());
  return Status::Ok();
}

// One REQ / SIDR_REQ the agent found for this listener: a new identifier on a MAD conduit
// holding the comm ID the agent reserved for it.
void Id::OnWireRequests() {
  MadInbox::Received r;
  if (wire_requests_ == nullptr || !wire_requests_->Pop(&r)) return;
  Agent& agent = Agent::Get();
  mad::MadContext ctx;
  ctx.local_comm_id = r.comm_id;
  ctx.local_ca_guid = device_.node_guid;
  auto conduit = MadConduit::Create(agent.Sender(), r.dgid, r.sgid, ctx, agent.LastWords());
  Message m;
  bool closed = false;
  Status s = conduit.ok() ? (*conduit)->Deliver(r.mad, r.sgid) : conduit.status();
  if (s.ok()) s = (*conduit)->Receive(&m, &closed);
  if (!s.ok()) {
    SV_LOG(kInfo, "rdma_cm: a connection request from another host refused: %s", s.rule().c_str());
    agent.RemoveConnection(r.comm_id);
    return;
  }
  const auto* req = std::get_if<mad::Req>(&r.mad.body);
  MadConduit* mad = conduit->get();
  agent.AddConnection(r.comm_id, mad, mad->context().remote_comm_id, req != nullptr ? req->local_ca_guid : 0);
  AdoptRequest(m, std::move(conduit.value()), mad);
}

bool Id::RetransmitOrWait() {
  // IBA 12.6.6: an MRA says the peer needs its service timeout (plus the packet's flight) to
  // answer: wait that long instead of sending again (cm.c cm_mra_handler).
  if (int mra = mad_->TakeMraServiceTimeout(); mra >= 0) {
    ArmTimeout(CmConvertToMs(mra) + CmConvertToMs(kPacketLifeTime));
    return true;
  }
  if (retries_ >= mad_max_retries_) return false;
  ++retries_;
  if (Status sent = mad_->Retransmit(); !sent.ok())
    SV_LOG(kInfo, "rdma_cm: retransmission %d failed: %s", retries_, sent.rule().c_str());
  ArmTimeout(mad_retry_ms_);
  return true;
}

}  // namespace softverbs::cm
