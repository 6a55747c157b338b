#include "cm/mad_conduit.h"

#include <cerrno>

namespace softverbs::cm {

mad::Mad MraMad(uint64_t tid, uint32_t local_comm_id, uint32_t remote_comm_id, uint8_t mraed) {
  mad::Mad m;
  m.hdr.tid = tid;
  mad::Mra mra;
  mra.local_comm_id = local_comm_id;
  mra.remote_comm_id = remote_comm_id;
  mra.message_mraed = mraed;
  mra.service_timeout = kMraServiceTimeout;
  m.body = mra;
  return m;
}

Result<std::unique_ptr<MadConduit>> MadConduit::Create(MadSender send, const Gid& local_gid, const Gid& remote_gid,
                                                       const mad::MadContext& context, LastWordsHooks last_words) {
  auto ready = EventFd::Create();
  if (!ready.ok()) return ready.status();
  return std::unique_ptr<MadConduit>(new MadConduit(std::move(send), local_gid, remote_gid, context,
                                                    std::move(ready.value()), std::move(last_words)));
}

MadConduit::MadConduit(MadSender send, const Gid& local_gid, const Gid& remote_gid, const mad::MadContext& context,
                       EventFd ready, LastWordsHooks last_words)
    : send_(std::move(send)), local_gid_(local_gid), remote_gid_(remote_gid), context_(context),
      ready_(std::move(ready)), last_words_(std::move(last_words)) {
  context_.remote_gid = remote_gid;
}

MadConduit::~MadConduit() {
  std::array<uint8_t, mad::kMadBytes> dreq;
  {
    std::lock_guard lock(mu_);
    if (!armed_) return;
    dreq = dreq_;
    DisarmLocked();
  }
  (void)SendBytes(dreq);
}

void MadConduit::ArmLocked() {
  if (armed_) return;
  Message m;
  m.type = MessageType::kDreq;
  auto mad = mad::MadOfMessage(m, context_);
  if (!mad.ok()) return;
  auto encoded = mad::EncodeMad(*mad);
  if (!encoded.ok()) return;
  dreq_ = *encoded;
  armed_ = true;
  if (last_words_.arm) last_words_.arm(context_.local_comm_id, local_gid_, remote_gid_, dreq_);
}

void MadConduit::DisarmLocked() {
  if (!armed_) return;
  armed_ = false;
  if (last_words_.disarm) last_words_.disarm(context_.local_comm_id);
}

namespace {
// A message that ends a connection (or its attempt): nothing is left to say for it.
bool EndsConnection(MessageType t) {
  return t == MessageType::kDreq || t == MessageType::kDrep || t == MessageType::kRej;
}
}  // namespace

Status MadConduit::Send(const Message& message) {
  std::array<uint8_t, mad::kMadBytes> bytes;
  {
    std::lock_guard lock(mu_);
    auto mad = mad::MadOfMessage(message, context_);
    if (!mad.ok()) return mad.status();
    auto encoded = mad::EncodeMad(*mad);
    if (!encoded.ok()) return encoded.status();
    bytes = *encoded;
    // What the CM retransmits until answered (REQ until REP/REJ, REP until RTU, DREQ until DREP).
    const bool awaits_answer = message.type == MessageType::kReq || message.type == MessageType::kRep ||
                               message.type == MessageType::kDreq || message.type == MessageType::kSidrReq;
    if (awaits_answer) {
      last_ = bytes;
      has_last_ = true;
      last_type_ = message.type;
    }
    if (req_seen_ || rep_seen_) answered_ = true;  // no MRA for a REQ / REP answered already
    if (message.type == MessageType::kRtu) {
      rtu_ = bytes;
      has_rtu_ = true;
      ArmLocked();  // the active side is established
    }
    if (EndsConnection(message.type)) DisarmLocked();
  }
  return SendBytes(bytes);
}

Status MadConduit::SendBytes(std::span<const uint8_t> mad) { return send_(local_gid_, remote_gid_, mad); }

Status MadConduit::Retransmit() {
  std::array<uint8_t, mad::kMadBytes> bytes;
  {
    std::lock_guard lock(mu_);
    if (!has_last_) return Invalid("nothing to retransmit: no REQ, REP or DREQ was sent");
    bytes = last_;
  }
  return SendBytes(bytes);
}

Status MadConduit::Deliver(const mad::Mad& mad, const Gid& sgid) {
  std::unique_lock lock(mu_);
  // A REQ or REP that comes again: its sender did not hear our answer. The REP (if the
  // application accepted already) or the RTU goes again; before the application has answered,
  // an MRA (cm.c: rdma_cm's delayed MRA, sent for the duplicate). Nothing reaches the identifier.
  const bool dup_req = std::holds_alternative<mad::Req>(mad.body) && req_seen_;
  const bool dup_rep = std::holds_alternative<mad::Rep>(mad.body) && rep_seen_;
  if (dup_req || dup_rep) {
    std::array<uint8_t, mad::kMadBytes> again;
    if (dup_req && has_last_ && last_type_ == MessageType::kRep) {
      again = last_;
    } else if (dup_rep && has_rtu_) {
      again = rtu_;
    } else if (answered_) {
      return Status::Ok();  // answered already (REP then RTU, or REJ): a stale copy
    } else {
      auto mra = mad::EncodeMad(MraMad(context_.tid, context_.local_comm_id, context_.remote_comm_id, dup_req ? 0 : 1));
      if (!mra.ok()) return mra.status();
      again = *mra;
    }
    lock.unlock();
    return SendBytes(again);
  }
  if (const auto* mra = std::get_if<mad::Mra>(&mad.body)) {
    mra_timeout_ = mra->service_timeout;  // the sender's timer waits that much longer
    return Status::Ok();
  }
  mad::MadContext learnt;
  auto message = mad::MessageOfMad(mad, &learnt);
  if (!message.ok()) return message.status();
  if (message->type != MessageType::kReq && message->type != MessageType::kSidrReq) message->gid = sgid;
  switch (message->type) {
    case MessageType::kReq:
    case MessageType::kSidrReq:
      context_.remote_comm_id = learnt.remote_comm_id;
      context_.tid = learnt.tid;  // cm.c: the REP reuses the REQ's TID
      context_.path_mtu = learnt.path_mtu;
      context_.service_id = learnt.service_id;  // a SIDR_REP names it again
      context_.remote_qpn = message->qpn;  // a DREQ from this side names it
      req_seen_ = true;
      break;
    case MessageType::kRep:
      context_.remote_comm_id = learnt.remote_comm_id;
      context_.remote_qpn = message->qpn;
      rep_seen_ = true;
      break;
    case MessageType::kRtu:
      ArmLocked();  // the passive side is established
      break;
    default:
      if (EndsConnection(message->type)) DisarmLocked();
      break;
  }
  // An answer ends the retransmission of what it answers.
  if (message->type != MessageType::kReq && message->type != MessageType::kDreq) has_last_ = false;
  inbox_.push_back(*message);
  ready_.Signal();
  return Status::Ok();
}

Status MadConduit::Receive(Message* message, bool* closed) {
  *closed = false;  // the MAD path has no EOF: a dead peer shows as its host's DREQ or as timeouts
  std::lock_guard lock(mu_);
  if (inbox_.empty()) {
    ready_.Clear();
    return Status(EAGAIN, "no CM message pending");
  }
  *message = inbox_.front();
  inbox_.pop_front();
  if (inbox_.empty()) ready_.Clear();
  return Status::Ok();
}

mad::MadContext MadConduit::context() const {
  std::lock_guard lock(mu_);
  return context_;
}

uint32_t MadConduit::local_comm_id() const {
  std::lock_guard lock(mu_);
  return context_.local_comm_id;
}

int MadConduit::TakeMraServiceTimeout() {
  std::lock_guard lock(mu_);
  int t = mra_timeout_;
  mra_timeout_ = -1;
  return t;
}

int MadConduit::mra_service_timeout() const {
  std::lock_guard lock(mu_);
  return mra_timeout_;
}

}  // namespace softverbs::cm
