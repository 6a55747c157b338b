#include "cm/agent.h"

#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "base/log.h"
#include "cm/address.h"
#include "cm/service.h"

namespace softverbs::cm {

Result<std::unique_ptr<MadInbox>> MadInbox::Create() {
  auto ready = EventFd::Create();
  if (!ready.ok()) return ready.status();
  return std::unique_ptr<MadInbox>(new MadInbox(std::move(ready.value())));
}

void MadInbox::Push(Received r) {
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(r));
  ready_.Signal();
}

bool MadInbox::Pop(Received* r) {
  std::lock_guard lock(mu_);
  if (queue_.empty()) {
    ready_.Clear();
    return false;
  }
  *r = std::move(queue_.front());
  queue_.pop_front();
  if (queue_.empty()) ready_.Clear();
  return true;
}

Agent::Agent() {
  // Comm IDs name a connection to the peer together with our CA GUID, which every process of
  // the host shares: a random high half until SetProcessSlot ties it to the registry slot
  // (attached to the wire, before any MAD), which keeps live processes' IDs apart.
  std::mt19937 rng(std::random_device{}() ^ static_cast<uint32_t>(getpid()));
  hi_tid_ = static_cast<uint32_t>(rng());
  comm_base_.store(1 + static_cast<uint32_t>(rng() % 0xffff), std::memory_order_relaxed);
}

Agent& Agent::Get() {
  static Agent* agent = new Agent();  // lives as long as the process (the wire may call it late)
  return *agent;
}

void Agent::SetSender(MadSender send) {
  std::lock_guard lock(send_mu_);
  send_ = std::move(send);
}

void Agent::SetForwarder(MadForwarder forward) {
  std::lock_guard lock(send_mu_);
  forward_ = std::move(forward);
}

bool Agent::Forward(uint32_t slot, std::span<const uint8_t> bytes, const Gid& sgid, const Gid& dgid) {
  MadForwarder forward;
  {
    std::lock_guard lock(send_mu_);
    forward = forward_;
  }
  if (!forward || !forward(slot, sgid, dgid, bytes).ok()) return false;
  counters_.forwarded.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Agent::SetLastWords(LastWordsHooks hooks) {
  std::lock_guard lock(send_mu_);
  last_words_ = std::move(hooks);
}

LastWordsHooks Agent::LastWords() {
  std::lock_guard lock(send_mu_);
  return last_words_;
}

bool Agent::has_sender() const {
  std::lock_guard lock(send_mu_);
  return static_cast<bool>(send_);
}

namespace {

// The CM attribute ID (MAD header bytes 16..17) and TID (bytes 8..15) of an encoded MAD.
uint16_t AgentAttrOf(std::span<const uint8_t> mad) {
  return mad.size() >= 18 ? static_cast<uint16_t>(mad[16] << 8 | mad[17]) : 0;
}
uint64_t AgentTidOf(std::span<const uint8_t> mad) {
  uint64_t tid = 0;
  for (size_t i = 8; i < 16 && i < mad.size(); ++i) tid = tid << 8 | mad[i];
  return tid;
}
constexpr size_t kAgentRecentSends = 1024;  // (attribute, TID) pairs remembered to tell a resend

}  // namespace

void Agent::CountByType(ByType& counters, std::span<const uint8_t> mad) {
  const uint16_t attr = AgentAttrOf(mad);
  if (attr >= kFirstAttr && attr < kFirstAttr + kAttrCount)
    counters[attr - kFirstAttr].fetch_add(1, std::memory_order_relaxed);
}

std::string Agent::Report() const {
  static constexpr const char* kNames[kAttrCount] = {"REQ", "MRA", "REJ", "REP", "RTU", "DREQ",
                                                     "DREP", "SIDR_REQ", "SIDR_REP", "LAP", "APR"};
  std::string out;
  auto line = [&](const char* what, const ByType& c) {
    out += std::string("  cm ") + what;
    for (uint16_t i = 0; i < kAttrCount; ++i)
      out += std::string(" ") + kNames[i] + "=" + std::to_string(c[i].load(std::memory_order_relaxed));
    out += "\n";
  };
  line("received", counters_.received_by_type);
  line("sent", counters_.sent_by_type);
  line("resent", counters_.resent_by_type);
  line("dropped", counters_.dropped_by_type);
  return out;
}

Status Agent::Send(const Gid& sgid, const Gid& dgid, std::span<const uint8_t> mad) {
  MadSender send;
  bool resend = false;
  {
    std::lock_guard lock(send_mu_);
    send = send_;
    // A resend carries the TID of the MAD it repeats (IBA 12.6.1; cm.c resends the same MAD).
    const std::pair<uint16_t, uint64_t> key{AgentAttrOf(mad), AgentTidOf(mad)};
    resend = std::find(recent_.begin(), recent_.end(), key) != recent_.end();
    if (send && !resend) {
      recent_.push_back(key);
      if (recent_.size() > kAgentRecentSends) recent_.pop_front();
    }
  }
  if (!send) return Status(ENETUNREACH, "no MAD path: softverbs0 has no wire sender in this process");
  Status sent = send(sgid, dgid, mad);
  if (sent.ok()) {  // counted once it left
    CountByType(counters_.sent_by_type, mad);
    if (resend) CountByType(counters_.resent_by_type, mad);
  }
  return sent;
}

MadSender Agent::Sender() {
  return [this](const Gid& sgid, const Gid& dgid, std::span<const uint8_t> mad) { return Send(sgid, dgid, mad); };
}

uint32_t Agent::NewCommId() {
  uint32_t low;
  do low = next_.fetch_add(1, std::memory_order_relaxed) & 0xffff;
  while (low == 0);
  return (comm_base_.load(std::memory_order_relaxed) << 16) | low;
}

void Agent::SetProcessSlot(uint32_t slot) {
  // 12 bits of slot: the registry's 4096 process slots (fabric/host/host_registry.h).
  const uint32_t random = comm_base_.load(std::memory_order_relaxed) & 0xf;
  comm_base_.store(((slot & 0xfff) << 4) | random, std::memory_order_relaxed);
  slot_.store(slot & 0xfff, std::memory_order_relaxed);
}

void Agent::AddListener(uint16_t port_space, uint16_t port, const Gid& addr, MadInbox* inbox) {
  std::lock_guard lock(mu_);
  listeners_.push_back(Listener{port_space, port, addr, inbox});
}

void Agent::RemoveListener(MadInbox* inbox) {
  std::lock_guard lock(mu_);
  std::erase_if(listeners_, [inbox](const Listener& l) { return l.inbox == inbox; });
}

void Agent::AddConnection(uint32_t local_comm_id, MadConduit* conduit, uint32_t remote_comm_id, uint64_t remote_guid) {
  std::lock_guard lock(mu_);
  connections_[local_comm_id] = Connection{conduit, remote_comm_id, remote_guid};
}

void Agent::RemoveConnection(uint32_t local_comm_id) {
  std::lock_guard lock(mu_);
  connections_.erase(local_comm_id);
}

namespace {

// The comm ID a MAD names as the receiver's own (IBA 12.6: the Remote Comm ID; SIDR: the
// Request ID). 0 for a REQ / SIDR_REQ, which name none yet.
uint32_t AgentOurCommId(const mad::Body& body) {
  return std::visit(
      [](const auto& b) -> uint32_t {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, mad::Req> || std::is_same_v<T, mad::SidrReq>) return 0;
        else if constexpr (std::is_same_v<T, mad::SidrRep>) return b.request_id;
        else return b.remote_comm_id;
      },
      body);
}

// The host registry slot of the process that made comm ID `id` (Agent::SetProcessSlot).
uint32_t AgentSlotOfCommId(uint32_t id) { return (id >> 20) & 0xfff; }

}  // namespace

void Agent::OnMad(std::span<const uint8_t> bytes, const Gid& sgid, const Gid& dgid, bool forwarded) {
  counters_.received.fetch_add(1, std::memory_order_relaxed);
  CountByType(counters_.received_by_type, bytes);
  auto decoded = mad::DecodeMad(bytes);
  if (!decoded.ok()) {
    counters_.refused.fetch_add(1, std::memory_order_relaxed);
    CountByType(counters_.dropped_by_type, bytes);
    SV_LOG(kInfo, "rdma_cm: dropped a MAD on QP1: %s", decoded.status().rule().c_str());
    return;
  }
  const mad::Mad& m = *decoded;
  std::lock_guard lock(mu_);
  if (std::holds_alternative<mad::Req>(m.body) || std::holds_alternative<mad::SidrReq>(m.body))
    return OnRequest(m, bytes, sgid, dgid, forwarded);
  const uint32_t ours = AgentOurCommId(m.body);
  auto it = connections_.find(ours);
  if (it != connections_.end() && it->second.conduit != nullptr) {
    if (std::holds_alternative<mad::Dreq>(m.body))  // (rare, and what a "why no DISCONNECTED" asks first)
      SV_LOG(kInfo, "rdma_cm: DREQ for comm ID 0x%08x%s", ours, forwarded ? " (handed over by this host)" : "");
    Status s = it->second.conduit->Deliver(m, sgid);
    if (!s.ok()) CountByType(counters_.dropped_by_type, bytes);
    if (!s.ok()) SV_LOG(kInfo, "rdma_cm: %s for comm ID 0x%08x refused: %s", mad::AttrName(m.hdr.attr_id), ours, s.rule().c_str());
    counters_.dispatched.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Another live process's comm ID (its slot is in the ID): the address's UDP group gave the
  // MAD to this member, and the peer's QP1 sends every MAD from one source port, so the kernel
  // would give it the next copy too. Handed over through the host (docs/cm.md, Dispatch).
  const uint32_t owner = AgentSlotOfCommId(ours), self = slot_.load(std::memory_order_relaxed);
  if (!forwarded && self != kEveryOtherProcess && owner != self && Forward(owner, bytes, sgid, dgid)) {
    SV_LOG(kDebug, "rdma_cm: %s for comm ID 0x%08x handed to process slot %u of this host",
           mad::AttrName(m.hdr.attr_id), ours, owner);
    return;
  }
  if (const auto* dreq = std::get_if<mad::Dreq>(&m.body); dreq != nullptr && (!forwarded || owner == self)) {
    // (A DREQ handed to every process of the host, by one without a CM agent, is answered by
    // the process its comm ID names only.)
    // cm.c cm_dreq_handler: a DREQ for a connection we do not know (any more) still gets its
    // DREP, so the peer's disconnect completes (wire notes §1.9).
    mad::Mad drep;
    drep.hdr.tid = m.hdr.tid;
    drep.body = mad::Drep{dreq->remote_comm_id, dreq->local_comm_id, {}};
    return Answer(drep, sgid, dgid);
  }
  // Nobody's: a connection gone (its process too, or a reused slot).
  counters_.unowned.fetch_add(1, std::memory_order_relaxed);
  CountByType(counters_.dropped_by_type, bytes);
  SV_LOG(kInfo, "rdma_cm: %s for comm ID 0x%08x: no connection of this process (dropped)",
         mad::AttrName(m.hdr.attr_id), ours);
}

void Agent::OnRequest(const mad::Mad& m, std::span<const uint8_t> bytes, const Gid& sgid, const Gid& dgid,
                      bool forwarded) {
  const auto* req = std::get_if<mad::Req>(&m.body);
  const auto* sidr = std::get_if<mad::SidrReq>(&m.body);
  const uint32_t remote_id = req ? req->local_comm_id : sidr->request_id;
  const uint64_t remote_guid = req ? req->local_ca_guid : 0;
  for (auto& [local, c] : connections_) {
    if (c.remote_comm_id != remote_id || c.remote_guid != remote_guid) continue;
    // A REQ sent again (its sender's timer ran out before our REP arrived): the connection it
    // started answers (cm.c cm_req_handler → cm_dup_req_handler). Still in the listener's queue
    // (the application has not taken it): an MRA, as rdma_cm's delayed MRA for a REQ whose
    // userspace consumer has not answered (SIDR has none: cm.c drops a repeated SIDR_REQ).
    counters_.dispatched.fetch_add(1, std::memory_order_relaxed);
    if (c.conduit != nullptr) {
      (void)c.conduit->Deliver(m, sgid);
    } else if (req != nullptr) {
      counters_.mra_sent.fetch_add(1, std::memory_order_relaxed);
      Answer(MraMad(m.hdr.tid, local, remote_id, 0), sgid, dgid);
    }
    return;
  }
  mad::PortSpace ps{};
  uint16_t port = 0;
  const uint64_t service_id = req ? req->service_id : sidr->service_id;
  auto hdr = mad::DecodeCmaHdr(req ? std::span<const uint8_t>(req->private_data) : std::span<const uint8_t>(sidr->private_data));
  MadInbox* inbox = nullptr;
  if (mad::PortOfServiceId(service_id, &ps, &port).ok() && hdr.ok()) {
    // cma.c cma_find_listener: a listener bound to the REQ's destination address first, then a
    // wildcard one of the port.
    for (const Listener& l : listeners_) {
      if (l.port_space != static_cast<uint16_t>(ps) || l.port != port) continue;
      if (l.addr == hdr->dst) inbox = l.inbox;
      if (l.addr == Gid{} && inbox == nullptr) inbox = l.inbox;
    }
  }
  if (inbox != nullptr) {
    const uint32_t local = NewCommId();
    connections_[local] = Connection{nullptr, remote_id, remote_guid};  // until its identifier exists
    inbox->Push(MadInbox::Received{m, sgid, dgid, local});
    counters_.dispatched.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Handed over by the process that received it, which answers for the host: a process with no
  // listener of the port says nothing (the one holding it answers).
  if (forwarded) return;
  if (hdr.ok() && port != 0 && BoundOnThisHost(hdr->dst, port)) {
    // Another process of this host holds the port (a port's UDP group has several members and
    // the kernel chose this one): answering REJ 8 for it would refuse a connection its listener
    // would take. Handed to the host's other processes -- the port's holder takes it, the others
    // say nothing (one port has one holder: binding it is exclusive, cm/service.h). Without a
    // way to hand it over, dropped; the sender's REQ timer sends it again.
    if (Forward(kEveryOtherProcess, bytes, sgid, dgid)) {
      SV_LOG(kDebug, "rdma_cm: %s for port %u handed to the other processes of this host",
             req ? "REQ" : "SIDR_REQ", port);
      return;
    }
    counters_.unowned.fetch_add(1, std::memory_order_relaxed);
    SV_LOG(kInfo, "rdma_cm: %s for port %u: another process of this host holds the port, none took it "
           "(dropped; the sender sends it again)", req ? "REQ" : "SIDR_REQ", port);
    return;
  }
  SV_LOG(kInfo, "rdma_cm: %s for service ID 0x%016llx: nobody listens (answered as the kernel does)",
         req ? "REQ" : "SIDR_REQ", static_cast<unsigned long long>(service_id));
  mad::Mad answer;
  answer.hdr.tid = m.hdr.tid;
  if (req) {
    // IBA 12.6.7 / cm.c: REJ reason 8, "invalid service ID", MessageRejected = REQ.
    mad::Rej rej;
    rej.remote_comm_id = remote_id;
    rej.message_rejected = 0;
    rej.reason = 8;
    answer.body = rej;
  } else {
    mad::SidrRep rep;
    rep.request_id = remote_id;
    rep.status = 2;  // IB_SIDR_UNSUPPORTED
    rep.service_id = service_id;
    answer.body = rep;
  }
  Answer(answer, sgid, dgid);
}

bool Agent::BoundOnThisHost(const Gid& address, uint16_t port) {
  sockaddr_storage dst{};
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(address.data(), kV4Mapped, sizeof kV4Mapped) == 0) {
    auto* in = reinterpret_cast<sockaddr_in*>(&dst);
    in->sin_family = AF_INET;
    memcpy(&in->sin_addr, address.data() + 12, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&dst);
    in6->sin6_family = AF_INET6;
    memcpy(&in6->sin6_addr, address.data(), 16);
  }
  SetPort(&dst, port);
  return ServiceBound(reinterpret_cast<const sockaddr*>(&dst));
}

void Agent::Answer(const mad::Mad& m, const Gid& sgid, const Gid& dgid) {
  auto bytes = mad::EncodeMad(m);
  Status sent = bytes.ok() ? Send(dgid, sgid, *bytes) : bytes.status();
  if (!sent.ok()) {
    SV_LOG(kWarn, "rdma_cm: cannot answer a MAD: %s", sent.rule().c_str());
    return;
  }
  counters_.answered.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace softverbs::cm
