#include "fabric/packet/icrc.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "base/strings.h"
#include "fabric/packet/crc32.h"
#include "fabric/packet/opcode.h"

namespace softverbs::fabric::packet {
namespace {

// The CRC register after ~0 and the 8 bytes of 0xff standing for the LRH (rxe_icrc.c's seed).
constexpr uint32_t kSeedAfterMaskedLrh = 0xdebb20e3u;

// Builds the masked IP + UDP + BTH pseudo header of a packet of `udp_payload_without_icrc`
// bytes whose BTH is `bth`; returns its length.
size_t MaskedPseudoHeader(const IpUdpInfo& ip, size_t udp_payload_without_icrc, const uint8_t* bth, uint8_t* out) {
  size_t n = WriteIpUdpHeaders(ip, udp_payload_without_icrc + kIcrcBytes, /*checksums=*/false, nullptr, out);
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
  memcpy(out + n, bth, kBthBytes);
  out[n + 4] = 0xff;  // BTH resv8a: FECN, BECN and resv6 may change in flight
  return n + kBthBytes;
}

}  // namespace

IcrcBuilder::IcrcBuilder(const IpUdpInfo& ip, std::span<const uint8_t> head, size_t udp_payload_without_icrc) {
  if (head.size() < kBthBytes || udp_payload_without_icrc < head.size()) return;  // not RoCEv2: never read past it
  uint8_t pseudo[kMaxIpUdpHeaderBytes + kBthBytes];
  const size_t n = MaskedPseudoHeader(ip, udp_payload_without_icrc, head.data(), pseudo);
  crc_ = Crc32Update(kSeedAfterMaskedLrh, pseudo, n);
  crc_ = Crc32Update(crc_, head.data() + kBthBytes, head.size() - kBthBytes);
  valid_ = true;
}

void IcrcBuilder::Add(std::span<const uint8_t> bytes) {
  if (valid_) crc_ = Crc32Update(crc_, bytes.data(), bytes.size());
}

uint32_t ComputeIcrc(const IpUdpInfo& ip, std::span<const uint8_t> payload) {
  return IcrcBuilder(ip, payload, payload.size()).Finish();
}

Status CheckIcrc(const IpUdpInfo& ip, std::span<const uint8_t> udp_payload) {
  if (udp_payload.size() < kBthBytes + kIcrcBytes)
    return Invalid("RoCEv2 packet shorter than BTH + ICRC (IBA 9.2, A17)");
  auto body = udp_payload.first(udp_payload.size() - kIcrcBytes);
  uint32_t want = ComputeIcrc(ip, body);
  uint32_t got = LoadIcrc(udp_payload.data() + body.size());
  if (want != got)
    return Status(EBADMSG, "ICRC mismatch: packet carries " + Hex(got) + ", computed " + Hex(want) +
                               " (IBA Annex A17, ICRC)");
  return Status::Ok();
}

namespace {

// The ICRC's change when the IPv4 ID is `id` instead of 0: the CRC of the ID bytes alone (from a
// zero register, so the parts that do not change cancel) carried through the `tail` bytes that
// follow the ID in the covered data. Linear in `id`.
uint32_t IdEffect(uint16_t id, size_t tail) {
  const uint8_t bytes[2] = {static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id)};
  return Crc32ZeroExtend(Crc32Update(0, bytes, 2), tail);
}

// Covered after the ID: the rest of the IPv4 header, the UDP header, BTH ... pad.
size_t BytesAfterIpv4Id(size_t udp_payload_without_icrc) {
  return (kIpv4HeaderBytes - 6) + kUdpHeaderBytes + udp_payload_without_icrc;
}

// The effect of each of the 16 ID bits for one length (any ID's effect is an XOR of these), and
// their Gaussian elimination over GF(2), ready to solve. A flow's packets mostly share a length
// (the path MTU), so each thread keeps the last few: a GSO burst's segments, whose IDs are 1, 2...,
// then cost one table walk each instead of 16 zero extensions.
struct IdBasis {
  size_t tail = SIZE_MAX;
  std::array<uint32_t, 16> effect{};
  uint32_t basis[32] = {};
  uint16_t combo[32] = {};
};

void Eliminate(IdBasis& b) {
  for (int i = 0; i < 16; ++i) {
    uint32_t v = b.effect[i];
    uint16_t c = static_cast<uint16_t>(1u << i);
    for (int bit = 31; bit >= 0 && v != 0; --bit) {
      if (!(v >> bit & 1)) continue;
      if (b.basis[bit] == 0) {
        b.basis[bit] = v, b.combo[bit] = c;
        break;
      }
      v ^= b.basis[bit], c ^= b.combo[bit];
    }
  }
}

const IdBasis& BasisFor(size_t tail) {
  thread_local std::array<IdBasis, 4> cache;
  thread_local size_t next = 0;
  for (const IdBasis& b : cache)
    if (b.tail == tail) return b;
  IdBasis& b = cache[next++ % cache.size()];
  b = IdBasis{};
  b.tail = tail;
  for (int i = 0; i < 16; ++i) b.effect[i] = IdEffect(static_cast<uint16_t>(1u << i), tail);
  Eliminate(b);
  return b;
}

// The 16-bit combination of the ID bits' effects whose XOR is `target`.
Result<uint16_t> Solve(const IdBasis& b, uint32_t target) {
  uint16_t id = 0;
  for (int bit = 31; bit >= 0; --bit) {
    if (!(target >> bit & 1)) continue;
    if (b.basis[bit] == 0)
      return Status(EBADMSG, "ICRC mismatch for every IPv4 ID (IBA Annex A17, ICRC)");
    target ^= b.basis[bit], id ^= b.combo[bit];
  }
  return id;
}

}  // namespace

Result<uint16_t> RecoverIpv4Id(const IpUdpInfo& ip, std::span<const uint8_t> udp_payload) {
  if (ip.ipv6) return Invalid("RecoverIpv4Id: an IPv6 flow has no IP ID");
  if (udp_payload.size() < kBthBytes + kIcrcBytes)
    return Invalid("RoCEv2 packet shorter than BTH + ICRC (IBA 9.2, A17)");
  IpUdpInfo zero_id = ip;
  zero_id.ip_id = 0;
  auto body = udp_payload.first(udp_payload.size() - kIcrcBytes);
  const uint32_t diff = ComputeIcrc(zero_id, body) ^ LoadIcrc(udp_payload.data() + body.size());
  if (diff == 0) return uint16_t{0};  // the common case: a Linux socket's DF datagram
  return Solve(BasisFor(BytesAfterIpv4Id(body.size())), diff);
}

uint32_t Ipv4IdIcrcEffect(uint16_t id, size_t udp_payload_bytes) {
  if (udp_payload_bytes < kBthBytes + kIcrcBytes) return 0;
  const IdBasis& b = BasisFor(BytesAfterIpv4Id(udp_payload_bytes - kIcrcBytes));
  uint32_t effect = 0;
  for (int i = 0; i < 16; ++i)
    if (id >> i & 1) effect ^= b.effect[i];
  return effect;
}

}  // namespace softverbs::fabric::packet
