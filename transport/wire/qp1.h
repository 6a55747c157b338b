// QP1, the General Services Interface QP, on the wire (IBA 13.5; annex A17): the UD datagrams
// that carry the connection manager's MADs between hosts. WireFabric hands those addressed to
// QP1 to one registered handler (the CM agent, above this layer) instead of a QP of the host
// registry, and sends the agent's MADs from QP1, with the constants the kernel's rxe uses.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "fabric/packet/packet.h"
#include "fabric/wire/udp_port.h"

namespace softverbs::transport {

inline constexpr uint32_t kQp1 = 1;                 // "GSI QP is always QPN 1" (rxe_recv.c)
inline constexpr uint32_t kGsiQkey = 0x80010000;    // IB_QP1_QKEY / rxe's GSI_QKEY
inline constexpr uint16_t kGsiPkey = 0xffff;        // IB_DEFAULT_PKEY_FULL
inline constexpr uint16_t kQp1SourcePort = 0xd872;  // rxe: 0xc000 | (hash_32(1, 14) & 0x3fff)
inline constexpr size_t kMadBytes = 256;            // IBA 13.4.1

// rxe_recv.c pkey_match: the low 15 bits equal and non-zero, and at least one of the two a
// full member (bit 15). So a limited-member 0x7fff also matches the default 0xffff.
bool PkeyMatch(uint16_t a, uint16_t b);

// Whether a parsed packet to QP1 may reach the CM agent, as rxe_recv.c decides for its GSI QP:
// a UD opcode (check_type_state), P_Key matching 0xFFFF and Q_Key 0x80010000 (check_keys), a
// payload that fits the GSI QP's 256-byte receive buffers (rxe_resp_check_length). EINVAL with
// the rule otherwise; rxe drops such packets silently.
Status CheckQp1Packet(const fabric::packet::ParsedPacket& p);

// Builds the UD SEND_ONLY that carries `mad` from QP1 to the peer's QP1 (BTH P_Key 0xFFFF,
// AckReq as rxe sets it on every UD packet; DETH Q_Key 0x80010000, SrcQP 1) for `flow`.
Result<size_t> BuildMadPacket(std::span<const uint8_t> mad, uint32_t psn, const fabric::packet::IpUdpInfo& flow,
                              std::span<uint8_t> out);

// One MAD that arrived for QP1.
struct Qp1Datagram {
  std::array<uint8_t, 16> sgid{};  // the sender's GID: its IP source address (annex A17.4.5.2)
  std::array<uint8_t, 16> dgid{};  // the local GID it arrived on
  fabric::wire::UdpAddress from;   // the sender's UDP address (port: its source port)
  uint32_t src_qp = 0;             // DETH SrcQP (1 from a CM; IBA lets any QP send to QP1)
  uint16_t pkey = 0;               // BTH P_Key
  std::span<const uint8_t> mad;    // the payload: up to 256 bytes, valid during the call
  // Received by another process of this host and forwarded here (WireFabric::ForwardMad): the
  // handler must not forward it again. `from`, `src_qp` and `pkey` are then unknown (zero).
  bool forwarded = false;
};

// The CM agent's side. Called in the wire fabric's receive thread (or a busy poller's), one
// datagram at a time; it must not block for long, nor call WireFabric::SetQp1Handler.
class Qp1Handler {
 public:
  virtual ~Qp1Handler() = default;
  virtual void OnMad(const Qp1Datagram& datagram) = 0;
  // Lines the handler adds to the process's report for `softverbs status` (the CM's counters),
  // each starting with two spaces and ending with '\n'. Called with the handler registered.
  virtual std::string Report() { return {}; }
};

}  // namespace softverbs::transport
