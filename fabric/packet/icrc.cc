#include "fabric/packet/icrc.h"

#include <cstring>

#include "base/strings.h"
#include "fabric/packet/crc32.h"
#include "fabric/packet/opcode.h"

namespace softverbs::fabric::packet {
namespace {

// The CRC register after ~0 and the 8 bytes of 0xff standing for the LRH (rxe_icrc.c's seed).
constexpr uint32_t kSeedAfterMaskedLrh = 0xdebb20e3u;

// Builds the masked IP + UDP + BTH pseudo header; returns its length.
size_t MaskedPseudoHeader(const IpUdpInfo& ip, std::span<const uint8_t> payload, uint8_t* out) {
  size_t n = WriteIpUdpHeaders(ip, payload.size() + kIcrcBytes, /*checksums=*/false, nullptr, out);
  if (ip.ipv6) {
    // Version stays; traffic class and flow label become ones (rxe: priority = 0xf,
    // flow_lbl[] = 0xff); hop limit 0xff.
    out[0] |= 0x0f;
    out[1] = out[2] = out[3] = 0xff;
    out[7] = 0xff;
  } else {
    out[1] = 0xff;                // TOS
    out[8] = 0xff;                // TTL
    out[10] = out[11] = 0xff;     // header checksum (CSUM_MANGLED_0)
  }
  size_t udp = ip.ip_header_bytes();
  out[udp + 6] = out[udp + 7] = 0xff;  // UDP checksum
  memcpy(out + n, payload.data(), kBthBytes);
  out[n + 4] = 0xff;  // BTH resv8a: FECN, BECN and resv6 may change in flight
  return n + kBthBytes;
}

}  // namespace

uint32_t ComputeIcrc(const IpUdpInfo& ip, std::span<const uint8_t> payload) {
  if (payload.size() < kBthBytes) return 0;  // not a RoCEv2 packet; never read past it
  uint8_t pseudo[kMaxIpUdpHeaderBytes + kBthBytes];
  size_t n = MaskedPseudoHeader(ip, payload, pseudo);
  uint32_t crc = Crc32Update(kSeedAfterMaskedLrh, pseudo, n);
  crc = Crc32Update(crc, payload.data() + kBthBytes, payload.size() - kBthBytes);
  return ~crc;
}

Status CheckIcrc(const IpUdpInfo& ip, std::span<const uint8_t> udp_payload) {
  if (udp_payload.size() < kBthBytes + kIcrcBytes)
    return Invalid("RoCEv2 packet shorter than BTH + ICRC (IBA 9.2, A17)");
  auto body = udp_payload.first(udp_payload.size() - kIcrcBytes);
  uint32_t want = ComputeIcrc(ip, body);
  uint32_t got = LoadIcrc(udp_payload.data() + body.size());
  if (want != got)
    return Status(EBADMSG, "ICRC mismatch: packet carries " + Hex(got) + ", computed " + Hex(want) +
                               " (IBA A17.3.3)");
  return Status::Ok();
}

}  // namespace softverbs::fabric::packet
