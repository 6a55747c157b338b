#include "transport/wire/wire_packets.h"

#include <endian.h>

#include <algorithm>
#include <vector>

#include "transport/codes.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using qp_type::kRc, qp_type::kUd;

// The opcode of packet `index` of `count` of message `r` (IBA 9.2 table 38).
uint8_t MessageOpcode(const Request& r, uint64_t index, uint64_t count) {
  namespace op = packet::op;
  const bool first = index == 0, last = index + 1 == count, imm = r.with_imm();
  const bool inv = r.opcode == WrOpcode::kSendWithInv;
  const bool send = r.opcode == WrOpcode::kSend || r.opcode == WrOpcode::kSendWithImm || inv;
  uint8_t code;
  if (first && last)
    code = send ? (inv ? op::kSendOnlyWithInvalidate : imm ? op::kSendOnlyWithImmediate : op::kSendOnly)
                : (imm ? op::kRdmaWriteOnlyWithImmediate : op::kRdmaWriteOnly);
  else if (first)
    code = send ? op::kSendFirst : op::kRdmaWriteFirst;
  else if (last)
    code = send ? (inv ? op::kSendLastWithInvalidate : imm ? op::kSendLastWithImmediate : op::kSendLast)
                : (imm ? op::kRdmaWriteLastWithImmediate : op::kRdmaWriteLast);
  else
    code = send ? op::kSendMiddle : op::kRdmaWriteMiddle;
  return static_cast<uint8_t>((r.qp_type == kRc ? op::kRc : op::kUc) | code);
}

// The pieces of [offset, +length) of the message's local bytes.
std::vector<packet::ConstBuffer> Slice(const Request& r, uint64_t offset, uint64_t length) {
  std::vector<packet::ConstBuffer> out;
  for (size_t i = 0; i < r.local_count && length > 0; ++i) {
    const iovec& v = r.local[i];
    if (offset >= v.iov_len) {
      offset -= v.iov_len;
      continue;
    }
    const size_t n = std::min<uint64_t>(v.iov_len - offset, length);
    out.push_back({static_cast<const uint8_t*>(v.iov_base) + offset, n});
    length -= n;
    offset = 0;
  }
  return out;
}

// The headers of packet `i` of the `count` packets of message `r`.
packet::PacketHeaders PacketOf(const Request& r, uint64_t i, uint64_t count) {
  packet::PacketHeaders h;
  h.bth.opcode = MessageOpcode(r, i, count);
  h.bth.dest_qp = r.dest_qp & packet::kQpnMask;
  h.bth.psn = static_cast<uint32_t>((r.psn + i) & packet::kPsnMask);
  const bool last = i + 1 == count;
  h.bth.se = last && r.solicited;  // the solicited bit rides on the last packet (IBA 9.2.3)
  // IBA 9.7.6.1.1: the requester asks for an ACK where it wants one: at the end of the message,
  // and of a part carried in a window, and every ack_every packets in between.
  const bool part_end = r.packets != 0 && i + 1 == uint64_t{r.first_packet} + r.packets;
  h.bth.ack_req = last || part_end || (r.ack_every != 0 && (i + 1) % r.ack_every == 0);
  h.reth = {r.remote_addr, r.rkey, static_cast<uint32_t>(r.length)};
  h.immdt.imm = be32toh(r.imm_data);
  h.ieth.rkey = r.invalidate_rkey;
  return h;
}

}  // namespace

uint64_t MessagePackets(const Request& r) {
  const uint64_t mtu = r.mtu ? r.mtu : 4096;
  return r.length == 0 ? 1 : (r.length + mtu - 1) / mtu;
}

Status BuildMessagePackets(const Request& r, const packet::IpUdpInfo& flow, uint64_t first, std::span<uint8_t> arena,
                           std::span<size_t> lengths) {
  const uint64_t mtu = r.mtu ? r.mtu : 4096;
  const uint64_t count = MessagePackets(r);
  // One packet may be built into a buffer of any size (Build checks it fits); a batch takes slots.
  const size_t slot = lengths.size() == 1 ? arena.size() : kPacketSlot;
  if (first + lengths.size() > count || arena.size() < lengths.size() * slot)
    return Invalid("BuildMessagePackets: packets beyond the message or the arena");
  for (size_t k = 0; k < lengths.size(); ++k) {
    const uint64_t i = first + k;
    const uint64_t offset = i * mtu;
    const auto payload = Slice(r, offset, std::min(mtu, r.length - std::min(r.length, offset)));
    auto n = packet::Build(PacketOf(r, i, count), payload, flow, arena.subspan(k * slot, slot));
    if (!n.ok()) return n.status();
    lengths[k] = *n;
  }
  return Status::Ok();
}

Status GatherMessagePackets(const Request& r, const packet::IpUdpInfo& flow, uint64_t first, size_t n,
                            std::span<uint8_t> wrap, std::vector<iovec>& pieces, std::vector<uint16_t>& counts) {
  const uint64_t mtu = r.mtu ? r.mtu : 4096;
  const uint64_t count = MessagePackets(r);
  if (first + n > count || wrap.size() < n * kWrapSlot)
    return Invalid("GatherMessagePackets: packets beyond the message or the arena");
  for (size_t k = 0; k < n; ++k) {
    const uint64_t i = first + k;
    const uint64_t offset = i * mtu;
    const auto payload = Slice(r, offset, std::min(mtu, r.length - std::min(r.length, offset)));
    uint8_t* slot = wrap.data() + k * kWrapSlot;
    std::span<uint8_t, packet::kMaxTrailerBytes> trailer(slot + 64, packet::kMaxTrailerBytes);
    auto built = packet::BuildGathered(PacketOf(r, i, count), payload, flow, {slot, 64}, trailer);
    if (!built.ok()) return built.status();
    pieces.push_back({slot, built->header_bytes});
    for (const packet::ConstBuffer& b : payload) pieces.push_back({const_cast<void*>(b.data), b.size});
    pieces.push_back({trailer.data(), built->trailer_bytes});
    counts.push_back(static_cast<uint16_t>(payload.size() + 2));
  }
  return Status::Ok();
}

Status BuildMessage(const Request& r, const packet::IpUdpInfo& flow, std::span<uint8_t> buffer,
                    const std::function<Status(std::span<const uint8_t>)>& emit) {
  const uint64_t count = MessagePackets(r);
  for (uint64_t i = 0; i < count; ++i) {
    size_t length = 0;
    SV_RETURN_IF_ERROR(BuildMessagePackets(r, flow, i, buffer, {&length, 1}));
    SV_RETURN_IF_ERROR(emit({buffer.data(), length}));
  }
  return Status::Ok();
}

namespace {

packet::PacketHeaders Headers(uint8_t opcode, uint32_t dest_qp, uint32_t psn) {
  packet::PacketHeaders h;
  h.bth.opcode = opcode;
  h.bth.dest_qp = dest_qp & packet::kQpnMask;
  h.bth.psn = psn & packet::kPsnMask;
  return h;
}

}  // namespace

Result<size_t> BuildReadRequest(const Request& r, const packet::IpUdpInfo& flow, std::span<uint8_t> out) {
  packet::PacketHeaders h = Headers(packet::op::kRc | packet::op::kRdmaReadRequest, r.dest_qp, r.psn);
  h.bth.ack_req = true;
  h.reth = {r.remote_addr, r.rkey, static_cast<uint32_t>(r.length)};
  return packet::Build(h, {}, flow, out);
}

Result<size_t> BuildAtomic(const Request& r, const packet::IpUdpInfo& flow, std::span<uint8_t> out) {
  const bool cas = r.opcode == WrOpcode::kAtomicCmpSwp;
  packet::PacketHeaders h =
      Headers(packet::op::kRc | (cas ? packet::op::kCompareSwap : packet::op::kFetchAdd), r.dest_qp, r.psn);
  h.bth.ack_req = true;
  // IBA 9.3.4: CmpSwap carries the swap and compare data; FetchAdd its addend as "swap/add".
  h.atomic = {r.remote_addr, r.rkey, cas ? r.swap : r.compare_add, cas ? r.compare_add : 0};
  return packet::Build(h, {}, flow, out);
}

Result<size_t> BuildAck(uint32_t dest_qp, uint32_t psn, uint8_t syn, uint32_t msn, const packet::IpUdpInfo& flow,
                        std::span<uint8_t> out) {
  packet::PacketHeaders h = Headers(packet::op::kRc | packet::op::kAcknowledge, dest_qp, psn);
  h.aeth = {syn, msn & packet::kQpnMask};
  return packet::Build(h, {}, flow, out);
}

Result<size_t> BuildAtomicAck(uint32_t dest_qp, uint32_t psn, uint32_t msn, uint64_t original,
                              const packet::IpUdpInfo& flow, std::span<uint8_t> out) {
  packet::PacketHeaders h = Headers(packet::op::kRc | packet::op::kAtomicAcknowledge, dest_qp, psn);
  h.aeth = {syndrome::kAck, msn & packet::kQpnMask};
  h.atomic_ack.original = original;
  return packet::Build(h, {}, flow, out);
}

namespace {

packet::PacketHeaders ReadResponseHeaders(uint32_t dest_qp, uint32_t psn, uint32_t msn, bool first, bool last) {
  namespace op = packet::op;
  const uint8_t code = first && last ? op::kRdmaReadResponseOnly
                       : first       ? op::kRdmaReadResponseFirst
                       : last        ? op::kRdmaReadResponseLast
                                     : op::kRdmaReadResponseMiddle;
  packet::PacketHeaders h = Headers(op::kRc | code, dest_qp, psn);
  h.aeth = {syndrome::kAck, msn & packet::kQpnMask};
  return h;
}

}  // namespace

Result<size_t> BuildReadResponsePacket(uint32_t dest_qp, uint32_t psn, uint32_t msn, bool first, bool last,
                                       std::span<const uint8_t> piece, const packet::IpUdpInfo& flow,
                                       std::span<uint8_t> out) {
  const packet::ConstBuffer buffer{piece.data(), piece.size()};
  return packet::Build(ReadResponseHeaders(dest_qp, psn, msn, first, last), {&buffer, piece.empty() ? 0u : 1u}, flow,
                       out);
}

Status GatherReadResponsePacket(uint32_t dest_qp, uint32_t psn, uint32_t msn, bool first, bool last,
                                std::span<const uint8_t> piece, const packet::IpUdpInfo& flow, std::span<uint8_t> wrap,
                                std::vector<iovec>& pieces, std::vector<uint16_t>& counts) {
  if (wrap.size() < kWrapSlot) return Invalid("GatherReadResponsePacket: no room for the headers");
  const packet::ConstBuffer buffer{piece.data(), piece.size()};
  std::span<uint8_t, packet::kMaxTrailerBytes> trailer(wrap.data() + 64, packet::kMaxTrailerBytes);
  auto built = packet::BuildGathered(ReadResponseHeaders(dest_qp, psn, msn, first, last),
                                     {&buffer, piece.empty() ? 0u : 1u}, flow, wrap.first(64), trailer);
  if (!built.ok()) return built.status();
  pieces.push_back({wrap.data(), built->header_bytes});
  if (!piece.empty()) pieces.push_back({const_cast<uint8_t*>(piece.data()), piece.size()});
  pieces.push_back({trailer.data(), built->trailer_bytes});
  counts.push_back(piece.empty() ? 2 : 3);
  return Status::Ok();
}

Status BuildReadResponse(uint32_t dest_qp, uint32_t psn, uint32_t msn, std::span<const uint8_t> data, uint32_t mtu,
                         const packet::IpUdpInfo& flow, std::span<uint8_t> buffer,
                         const std::function<Status(std::span<const uint8_t>)>& emit) {
  const uint64_t count = data.empty() ? 1 : (data.size() + mtu - 1) / mtu;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t offset = i * mtu;
    auto n = BuildReadResponsePacket(dest_qp, static_cast<uint32_t>(psn + i), msn, i == 0, i + 1 == count,
                                     data.subspan(offset, std::min<size_t>(mtu, data.size() - offset)), flow, buffer);
    if (!n.ok()) return n.status();
    SV_RETURN_IF_ERROR(emit({buffer.data(), *n}));
  }
  return Status::Ok();
}

bool RequestOfPacket(const packet::ParsedPacket& p, WireRequest* out) {
  const packet::OpcodeInfo& info = *p.info;
  if (info.transport != packet::Transport::kUd || info.operation != packet::Operation::kSend) return false;
  Request& r = out->request;
  r = Request{};
  r.qp_type = kUd;
  r.opcode = info.has_immediate ? WrOpcode::kSendWithImm : WrOpcode::kSend;
  r.dest_qp = p.hdr.bth.dest_qp;
  r.src_qp = p.hdr.deth.src_qp;
  r.qkey = p.hdr.deth.qkey;
  r.solicited = p.hdr.bth.se;
  r.imm_data = htobe32(p.hdr.immdt.imm);  // ibv_wc.imm_data is in network order
  out->piece = {const_cast<uint8_t*>(p.payload.data()), p.payload.size()};
  r.local = &out->piece;
  r.local_count = 1;
  r.length = p.payload.size();
  return true;
}

Result<size_t> BuildDatagram(const Request& r, uint32_t psn, const packet::IpUdpInfo& flow, std::span<uint8_t> out) {
  packet::PacketHeaders h;
  h.bth.opcode = static_cast<uint8_t>(packet::op::kUd | (r.with_imm() ? packet::op::kSendOnlyWithImmediate
                                                                       : packet::op::kSendOnly));
  h.bth.se = r.solicited;
  h.bth.dest_qp = r.dest_qp & packet::kQpnMask;
  h.bth.psn = psn & packet::kPsnMask;
  h.bth.ack_req = true;  // every UD packet ends its message (rxe sets it; receivers ignore it)
  h.deth.qkey = r.qkey;
  h.deth.src_qp = r.src_qp & packet::kQpnMask;
  h.immdt.imm = be32toh(r.imm_data);
  std::vector<packet::ConstBuffer> payload(r.local_count);
  for (size_t i = 0; i < r.local_count; ++i) payload[i] = {r.local[i].iov_base, r.local[i].iov_len};
  return packet::Build(h, payload, flow, out);
}

}  // namespace softverbs::transport
