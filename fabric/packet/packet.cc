#include "fabric/packet/packet.h"

#include <cstring>
#include <string>

#include "base/strings.h"
#include "fabric/packet/icrc.h"

namespace softverbs::fabric::packet {
namespace {

// The largest UDP payload: the UDP length field is 16 bits and counts its own 8-byte header.
constexpr size_t kMaxUdpPayload = 0xffff - kUdpHeaderBytes;

std::string Named(const OpcodeInfo& info) {
  return std::string(info.name) + " (" + Hex(&info - kOpcodeTable.data()) + ")";
}

// The length rules, in the order a receiver meets them (IBA 9.2 BTH; 9.6 header validation).
Status CheckLengths(const OpcodeInfo& info, const Bth& bth, size_t size) {
  if (size < info.header_bytes + kIcrcBytes)
    return Invalid("packet of " + std::to_string(size) +
                   " bytes is shorter than the headers + ICRC of " + Named(info) + ", " +
                   std::to_string(info.header_bytes + kIcrcBytes) + " bytes (IBA 9.3)");
  // Headers and ICRC are whole words and the pad completes the payload's last word, so the
  // packet is a whole number of 4-byte words (IBA 9.2: PadCnt aligns the payload to 4 bytes).
  if (size % 4 != 0)
    return Invalid("packet length " + std::to_string(size) +
                   " is not a multiple of 4 bytes, which no PadCnt can explain (IBA 9.2)");
  size_t after_headers = size - info.header_bytes - kIcrcBytes;
  if (!info.has_payload && (after_headers != 0 || bth.pad != 0))
    return Invalid(Named(info) + " carries no payload but has " + std::to_string(after_headers) +
                   " bytes after its headers and PadCnt " + std::to_string(bth.pad) + " (IBA 9.3)");
  if (bth.pad > after_headers)
    return Invalid("PadCnt " + std::to_string(bth.pad) + " exceeds the " +
                   std::to_string(after_headers) + " bytes after the headers (IBA 9.2)");
  return Status::Ok();
}

}  // namespace

Result<ParsedPacket> Parse(std::span<const uint8_t> udp_payload, const IpUdpInfo* flow) {
  if (udp_payload.size() < kBthBytes + kIcrcBytes)
    return Invalid("packet of " + std::to_string(udp_payload.size()) +
                   " bytes is shorter than BTH + ICRC, 16 bytes (IBA 9.2, A17)");
  ParsedPacket pkt;
  pkt.hdr.bth = DecodeBth(udp_payload.data());
  const Bth& bth = pkt.hdr.bth;
  pkt.info = LookupOpcode(bth.opcode);
  if (pkt.info == nullptr)
    return NotSupported("unknown BTH opcode " + Hex(bth.opcode) + " (IBA 9.2, BTH OpCode)");
  // IBA 9.2: TVer 0 is the only version; rxe's hdr_check() drops any other.
  if (bth.tver != 0)
    return Invalid("BTH TVer " + std::to_string(bth.tver) + " is not 0 (IBA 9.2)");
  SV_RETURN_IF_ERROR(CheckLengths(*pkt.info, bth, udp_payload.size()));
  if (flow != nullptr) SV_RETURN_IF_ERROR(CheckIcrc(*flow, udp_payload));
  DecodeExtensions(*pkt.info, udp_payload.data(), &pkt.hdr);
  size_t payload_bytes = udp_payload.size() - pkt.info->header_bytes - kIcrcBytes - bth.pad;
  pkt.payload = udp_payload.subspan(pkt.info->header_bytes, payload_bytes);
  pkt.icrc = LoadIcrc(udp_payload.data() + udp_payload.size() - kIcrcBytes);
  return pkt;
}

namespace {

Status CheckBuildable(const PacketHeaders& h, const OpcodeInfo* info, size_t payload_bytes) {
  if (info == nullptr) return Invalid("Build: unknown BTH opcode " + Hex(h.bth.opcode));
  if (!info->has_payload && payload_bytes != 0)
    return Invalid("Build: " + Named(*info) + " carries no payload (IBA 9.3)");
  if (h.bth.tver != 0) return Invalid("Build: BTH TVer must be 0 (IBA 9.2)");
  if (h.bth.dest_qp > kQpnMask || h.bth.psn > kPsnMask || h.deth.src_qp > kQpnMask ||
      h.aeth.msn > kPsnMask)
    return Invalid("Build: a QPN, PSN or MSN wider than 24 bits (IBA 9.2, 9.3)");
  if (payload_bytes > kMaxUdpPayload || WireBytes(*info, payload_bytes) > kMaxUdpPayload)
    return Invalid("Build: packet larger than a UDP datagram");
  return Status::Ok();
}

}  // namespace

Result<GatheredPacket> BuildGathered(const PacketHeaders& h, std::span<const ConstBuffer> payload, const IpUdpInfo& ip,
                                     std::span<uint8_t> head, std::span<uint8_t, kMaxTrailerBytes> trailer) {
  const OpcodeInfo* info = LookupOpcode(h.bth.opcode);
  size_t payload_bytes = 0;
  for (const ConstBuffer& piece : payload) {
    payload_bytes += piece.size;
    if (piece.size > kMaxUdpPayload || payload_bytes > kMaxUdpPayload)
      return Invalid("Build: packet larger than a UDP datagram");
  }
  SV_RETURN_IF_ERROR(CheckBuildable(h, info, payload_bytes));
  const size_t total = WireBytes(*info, payload_bytes);
  if (head.size() < info->header_bytes)
    return Invalid("Build: header buffer of " + std::to_string(head.size()) + " bytes, headers need " +
                   std::to_string(info->header_bytes));
  Bth bth = h.bth;
  bth.pad = static_cast<uint8_t>((0 - payload_bytes) & 3);
  EncodeBth(bth, head.data());
  EncodeExtensions(*info, h, head.data());
  IcrcBuilder icrc(ip, head.first(info->header_bytes), total - kIcrcBytes);
  for (const ConstBuffer& piece : payload)
    if (piece.size) icrc.Add({static_cast<const uint8_t*>(piece.data), piece.size});
  memset(trailer.data(), 0, bth.pad);  // pad bytes are zero (IBA 9.2)
  icrc.Add(trailer.first(bth.pad));
  StoreIcrc(icrc.Finish(), trailer.data() + bth.pad);
  return GatheredPacket{info->header_bytes, payload_bytes, bth.pad + kIcrcBytes};
}

Result<size_t> Build(const PacketHeaders& h, std::span<const ConstBuffer> payload,
                     const IpUdpInfo& ip, std::span<uint8_t> out) {
  uint8_t trailer[kMaxTrailerBytes];
  auto built = BuildGathered(h, payload, ip, out, trailer);
  if (!built.ok()) return built.status();
  const size_t total = built->bytes();
  if (out.size() < total)
    return Invalid("Build: output buffer of " + std::to_string(out.size()) + " bytes, packet needs " +
                   std::to_string(total));
  uint8_t* at = out.data() + built->header_bytes;
  for (const ConstBuffer& piece : payload) {
    if (piece.size) memcpy(at, piece.data, piece.size);
    at += piece.size;
  }
  memcpy(at, trailer, built->trailer_bytes);
  return total;
}

}  // namespace softverbs::fabric::packet
