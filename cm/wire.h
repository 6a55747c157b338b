// The CM messages two identifiers exchange (IBA vol 1 chapter 12: REQ, REP, RTU, REJ, DREQ,
// DREP, SIDR_REQ, SIDR_REP), one per SOCK_SEQPACKET datagram between the processes of a host.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <vector>

#include "base/status.h"

namespace softverbs::cm {

using Gid = std::array<uint8_t, 16>;

enum class MessageType : uint8_t {
  kReq = 1,
  kRep,
  kRtu,
  kRej,
  kDreq,
  kDrep,
  kSidrReq,
  kSidrRep,
};
const char* MessageName(MessageType type);

// The private data a consumer may carry in each message, for the RDMA_PS_TCP/UDP port spaces:
// the IBA sizes (REQ 92, REP 196, REJ 148, RTU 224, DREQ 220, DREP 224, SIDR_REQ 216,
// SIDR_REP 136) less the 36-byte rdma_cm header in REQ and SIDR_REQ (rdma_connect(3),
// rdma_accept(3): "private_data_len ... maximum size ... 56 bytes for REQ").
size_t MaxPrivateData(MessageType type);

// Enhanced connection establishment (rdma_set_local_ece(3)): a vendor ID and the vendor's
// options. On the wire (the kernel's cm.c) REQ and REP carry the vendor ID in reserved bytes and
// the options as the MAD header's attribute modifier; the kernel CM passes them between the two
// librdmacm ends unchanged (docs/cm.md, "ECE").
struct Ece {
  uint32_t vendor_id = 0;  // 24 bits on the wire
  uint32_t options = 0;
};

// What the QP of each side needs from the other (IBA chapter 12 REQ/REP fields).
struct Message {
  MessageType type = MessageType::kReq;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t flow_control = 0;
  uint8_t retry_count = 0;
  uint8_t rnr_retry_count = 0;
  uint8_t srq = 0;
  uint8_t private_data_len = 0;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint32_t qkey = 0;
  uint32_t status = 0;  // REJ reason or SIDR_REP status (cm/event.h)
  Gid gid{};            // the sender's GID (its source address)
  sockaddr_storage src{};  // the sender's address and port
  sockaddr_storage dst{};  // the address the sender talks to
  Ece ece;  // REQ, REP, SIDR_REP
  std::array<uint8_t, 224> private_data{};
};

// Sends one message; EPIPE/ECONNRESET when the peer is gone.
Status SendMessage(int fd, const Message& message);

// Receives one message from a readable socket. Returns false in `*closed` when the peer closed
// (EOF or reset), which the caller turns into the CM event a dead peer gives.
Status ReceiveMessage(int fd, Message* message, bool* closed);

}  // namespace softverbs::cm
