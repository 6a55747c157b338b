#include "transport/wire/wire_link.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/grh.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using qp_type::kRc, qp_type::kUd;

Gid16 ToGid(const uint8_t* g) {
  Gid16 out;
  memcpy(out.data(), g, 16);
  return out;
}

// 24-bit serial-number order (IBA 9.7.1; rxe's psn_compare): negative when a precedes b.
using fabric::packet::PsnDiff;

uint32_t Packets(const Request& r) {
  if (r.opcode == WrOpcode::kAtomicCmpSwp || r.opcode == WrOpcode::kAtomicFetchAdd) return 1;
  return r.length == 0 ? 1 : static_cast<uint32_t>((r.length + r.mtu - 1) / r.mtu);
}

ReplyCode NakCode(uint8_t syn) {
  switch (syn) {
    case syndrome::kPsnSequence: return ReplyCode::kSequenceError;
    case syndrome::kInvalidRequest: return ReplyCode::kInvalidRequest;
    case syndrome::kRemoteAccess: return ReplyCode::kRemoteAccess;
    default: return ReplyCode::kRemoteOp;
  }
}

}  // namespace

WireLink::~WireLink() { Attach(nullptr); }

void WireLink::Attach(ReplySink* sink) {
  // Unregistering waits for a response being handled (the fabric holds its table's lock around
  // OnResponse), so the sink is never called after this.
  if (sink == nullptr && qpn_ != 0) {
    fabric_.Unregister(qpn_, this);
    qpn_ = 0;
  }
  sink_ = sink;
}

Reply WireLink::Carry(const Request& r) {
  const Reply silence = Reply::Of(r.qp_type == kRc ? ReplyCode::kNoAnswer : ReplyCode::kDropped);
  if (r.addressing == nullptr || r.from_dci) {
    if (!explained_.exchange(true))
      SV_LOG(kError, "ibv_post_send(qp 0x%x): DC does not travel on the wire yet: the message to DCT 0x%x of "
             "another host is not sent", r.src_qp, r.dest_qp);
    return silence;
  }
  const Gid16 sgid = ToGid(r.addressing->sgid), dgid = ToGid(r.addressing->dgid);
  if (qpn_ == 0) {  // responses (RC) and `softverbs status` (all) find the link by its QP
    qpn_ = r.src_qp;
    fabric_.Register(qpn_, this);
  }
  if (src_port_ == 0 || sgid != src_port_gid_) {
    src_port_ = fabric_.SourcePortFor(sgid, r.src_qp);
    src_port_gid_ = sgid;
  }
  packet::IpUdpInfo flow = IsIpv4MappedGid(sgid.data())
                               ? packet::IpUdpInfo::V4(sgid.data() + 12, dgid.data() + 12, src_port_)
                               : packet::IpUdpInfo::V6(sgid.data(), dgid.data(), src_port_);
  flow.dst_port = WireFabric::RocePort();
  flow.traffic_class = r.addressing->traffic_class;
  Status s = Status::Ok();
  if (r.qp_type == kRc) {
    s = SendRc(r, flow);
    if (s.ok()) return Reply::Of(ReplyCode::kPending);
  } else if (r.qp_type == kUd) {
    uint8_t buffer[kPacketSlot];
    auto built = BuildDatagram(r, r.psn, flow, buffer);
    s = built.status();
    if (built.ok()) {
      const iovec piece{buffer, *built};
      counters_.packets.fetch_add(1, std::memory_order_relaxed);
      s = fabric_.Send(sgid, dgid, {&piece, 1}, src_port_);
    }
  } else {
    s = SendMessage(r, flow, sgid, dgid);  // UC: no acknowledgement follows (IBA 9.8)
  }
  if (!s.ok() && !explained_.exchange(true))
    SV_LOG(kError, "ibv_post_send(qp 0x%x): message to QP 0x%x not sent: %s", r.src_qp, r.dest_qp, s.rule().c_str());
  return silence;  // UD and UC: sent is all the requester knows (IBA 9.6.3, 9.8.3)
}

Status WireLink::SendRc(const Request& r, const packet::IpUdpInfo& flow) {
  {
    std::lock_guard lock(mu_);
    // The part of the message carried now (a SEND or WRITE may come in parts: Request::packets).
    const uint32_t first = (r.psn + r.first_packet) & packet::kPsnMask;
    const uint32_t count = r.packets != 0 ? r.packets : Packets(r) - r.first_packet;
    const uint32_t after = (first + count) & packet::kPsnMask;
    if (!outstanding_.empty() && outstanding_.back().ticket == r.ticket && outstanding_.back().next_send == first &&
        r.first_packet > 0) {
      outstanding_.back().next_send = after;  // the next part of the message in flight
    } else {
      // Go-back-N: a message carried again takes back its place, and whatever followed it will
      // be carried again after it (the requester rewinds them all).
      while (!outstanding_.empty() && outstanding_.back().ticket >= r.ticket) outstanding_.pop_back();
      Outstanding o;
      o.ticket = r.ticket;
      o.first_psn = r.psn;
      o.last_psn = (r.psn + Packets(r) - 1) & packet::kPsnMask;
      o.opcode = r.opcode;
      o.mtu = r.mtu;
      o.next_response = r.psn;
      o.next_send = after;
      outstanding_.push_back(o);
    }
    // Go-back-N carries PSNs already sent (IBA 9.7.4.1.2): count them as retransmissions.
    if (sent_any_ && PsnDiff(first, next_psn_) < 0) {
      const int32_t again = std::min<int32_t>(-PsnDiff(first, next_psn_), PsnDiff(after, first));
      counters_.retransmitted.fetch_add(static_cast<uint64_t>(again), std::memory_order_relaxed);
    }
    if (!sent_any_ || PsnDiff(after, next_psn_) > 0) next_psn_ = after;
    sent_any_ = true;
  }
  const Gid16 sgid = ToGid(r.addressing->sgid), dgid = ToGid(r.addressing->dgid);
  uint8_t buffer[kPacketSlot];
  auto send = [&](std::span<const uint8_t> p) {
    const iovec piece{const_cast<uint8_t*>(p.data()), p.size()};
    counters_.packets.fetch_add(1, std::memory_order_relaxed);
    return fabric_.Send(sgid, dgid, {&piece, 1}, src_port_);
  };
  Result<size_t> one = 0;
  switch (r.opcode) {
    case WrOpcode::kRdmaRead:
      one = BuildReadRequest(r, flow, buffer);
      break;
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      one = BuildAtomic(r, flow, buffer);
      break;
    default:
      return SendMessage(r, flow, sgid, dgid);
  }
  if (!one.ok()) return one.status();
  return send({buffer, *one});
}

Status WireLink::SendMessage(const Request& r, const packet::IpUdpInfo& flow, const Gid16& sgid, const Gid16& dgid) {
  // Built in batches around the payload (headers and ICRCs in this thread's arena, the bytes
  // where the application keeps them), each batch sent in as few system calls as the kernel
  // allows (GSO): a 1 MiB WRITE at a 4096-byte MTU is 256 packets, and the kernel's copy is
  // the only one (it read the payload for the ICRC first).
  constexpr size_t kBatch = 64;
  thread_local std::vector<uint8_t> wrap(kBatch * kWrapSlot);
  thread_local std::vector<iovec> pieces;
  thread_local std::vector<uint16_t> counts;
  const uint64_t end = r.packets != 0 ? std::min<uint64_t>(r.first_packet + r.packets, MessagePackets(r))
                                       : MessagePackets(r);
  for (uint64_t first = r.first_packet; first < end; first += kBatch) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBatch, end - first));
    pieces.clear();
    counts.clear();
    SV_RETURN_IF_ERROR(GatherMessagePackets(r, flow, first, n, wrap, pieces, counts));
    counters_.packets.fetch_add(n, std::memory_order_relaxed);
    SV_RETURN_IF_ERROR(fabric_.SendGathered(sgid, dgid, pieces, counts, src_port_));
  }
  return Status::Ok();
}

bool WireLink::AcknowledgeBefore(uint32_t psn, std::vector<Event>* events) {
  // IBA 9.7.5.1.1: a response acknowledges every request before it (implicitly); a READ or an
  // atomic is complete only with its own response.
  while (!outstanding_.empty() && PsnDiff(outstanding_.front().last_psn, psn) < 0) {
    const Outstanding& o = outstanding_.front();
    if (o.opcode == WrOpcode::kRdmaRead || o.opcode == WrOpcode::kAtomicCmpSwp ||
        o.opcode == WrOpcode::kAtomicFetchAdd)
      return false;
    events->push_back({o.ticket, Reply::Of(ReplyCode::kAck)});
    outstanding_.pop_front();
  }
  return true;
}

uint32_t WireLink::FrontPacketsBefore(uint32_t psn) const {
  if (outstanding_.empty()) return 0;
  const Outstanding& o = outstanding_.front();
  if (o.opcode == WrOpcode::kRdmaRead || o.opcode == WrOpcode::kAtomicCmpSwp || o.opcode == WrOpcode::kAtomicFetchAdd)
    return 0;
  const int32_t before = PsnDiff(psn, o.first_psn);
  return before > 0 && PsnDiff(psn, o.last_psn) <= 0 ? static_cast<uint32_t>(before) : 0;
}

void WireLink::Count(uint8_t op, uint8_t syn) {
  WireRequesterCounters& c = counters_;
  auto& n = op == packet::op::kAtomicAcknowledge ? c.atomic_acks
            : op != packet::op::kAcknowledge     ? c.read_responses
            : (syn >> 5) == 0                    ? c.acks
            : (syn >> 5) == 1                    ? c.naks_rnr
            : syn == syndrome::kPsnSequence      ? c.naks_sequence
                                                 : c.naks_error;
  n.fetch_add(1, std::memory_order_relaxed);
}

void WireLink::OnResponse(const packet::ParsedPacket& p) {
  std::vector<Event> events;
  std::vector<std::pair<uint64_t, std::pair<uint64_t, std::span<const uint8_t>>>> data;
  const uint32_t psn = p.hdr.bth.psn;
  const uint8_t op = p.hdr.bth.opcode & 0x1f;
  {
    std::lock_guard lock(mu_);
    Count(op, p.hdr.aeth.syndrome);
    if (op == packet::op::kAcknowledge) {
      const uint8_t syn = p.hdr.aeth.syndrome;
      if ((syn >> 5) == 0) {  // ACK: everything through psn
        const uint32_t next = (psn + 1) & packet::kPsnMask;
        // An ACK inside a SEND or WRITE (its AckReq every few packets) acknowledges its packets
        // through psn: the requester's window moves on.
        if (AcknowledgeBefore(next, &events))
          if (const uint32_t part = FrontPacketsBefore(next); part > 0) {
            Reply reply = Reply::Of(ReplyCode::kPartial);
            reply.acked = part;
            events.push_back({outstanding_.front().ticket, reply});
          }
      } else if (AcknowledgeBefore(psn, &events) && !outstanding_.empty() &&
                 PsnDiff(outstanding_.front().first_psn, psn) <= 0) {
        // An RNR NAK or a NAK names the message holding its PSN (IBA 9.7.5.2).
        const Outstanding& o = outstanding_.front();
        Reply reply = (syn >> 5) == 1 ? Reply::Rnr(syn & 0x1f) : Reply::Of(NakCode(syn));
        reply.acked = FrontPacketsBefore(psn);  // a NAK acknowledges the packets before it
        bool stale = false;
        if (syn == syndrome::kPsnSequence) {
          stale = o.ticket == nak_ticket_ && PsnDiff(psn, nak_psn_) <= 0;
          reply.progress = o.ticket == nak_ticket_ || PsnDiff(psn, o.first_psn) > 0;
          if (!stale) nak_ticket_ = o.ticket, nak_psn_ = psn;
        }
        if (!stale) {
          events.push_back({o.ticket, reply});
          outstanding_.clear();  // the requester carries everything again, or fails
        }
      }
    } else if (AcknowledgeBefore(psn, &events) && !outstanding_.empty()) {
      Outstanding& o = outstanding_.front();
      if (op == packet::op::kAtomicAcknowledge && o.first_psn == psn &&
          (o.opcode == WrOpcode::kAtomicCmpSwp || o.opcode == WrOpcode::kAtomicFetchAdd)) {
        Reply reply = Reply::Of(ReplyCode::kAck);
        reply.original = p.hdr.atomic_ack.original;
        events.push_back({o.ticket, reply});
        outstanding_.pop_front();
      } else if (o.opcode == WrOpcode::kRdmaRead && psn == o.next_response) {
        // READ response packets in order (IBA 9.7.6.1.4); a gap is handled below.
        data.push_back({o.ticket, {static_cast<uint64_t>(PsnDiff(psn, o.first_psn)) * o.mtu, p.payload}});
        o.next_response = (psn + 1) & packet::kPsnMask;
        read_retry_ticket_ = 0;
        const uint8_t kind = op;
        if (kind == packet::op::kRdmaReadResponseLast || kind == packet::op::kRdmaReadResponseOnly) {
          events.push_back({o.ticket, Reply::Of(ReplyCode::kAck)});
          outstanding_.pop_front();
        }
      } else if (o.opcode == WrOpcode::kRdmaRead && PsnDiff(psn, o.next_response) > 0 &&
                 PsnDiff(psn, o.last_psn) <= 0 && o.ticket != read_retry_ticket_) {
        // A response packet of the READ is missing (lost or overtaken): the READ is requested
        // again at once, not after the ACK timeout (rxe check_psn: COMPST_ERROR_RETRY).
        events.push_back({o.ticket, Reply::Of(ReplyCode::kSequenceError)});
        read_retry_ticket_ = o.ticket;
        outstanding_.clear();
      }
    }
  }
  if (sink_ == nullptr) return;
  for (auto& [ticket, piece] : data) sink_->OnResponseData(ticket, piece.first, piece.second);
  for (const Event& e : events) sink_->OnReply(e.ticket, e.reply);
}

}  // namespace softverbs::transport
