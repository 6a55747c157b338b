// The typed events between the transport roles (DESIGN.md sections 4 and 6): the requester turns
// a work request into a Request, a fabric's Link carries it to the responder of the destination
// QP, and the responder's Reply travels back to the completer, which turns it into a completion
// or a retry. No role reads another's state: everything one needs of another is in these events.
#pragma once

#include <sys/uio.h>

#include <cstdint>

#include "transport/work_request.h"

namespace softverbs::transport {

// What the responder answered (IBA 9.7.5: ACK, RNR NAK, or NAK with an error syndrome), or that
// nothing answered. For UC and UD the requester learns nothing (IBA 9.8.3, 9.6.3): the completer
// treats every reply but kAck as the message having been sent.
enum class ReplyCode : uint8_t {
  kAck,             // done
  kRnr,             // RC: no receive WQE; retry after Reply::rnr_timer (IBA 9.7.5.2.8)
  kDropped,         // UC/UD: silently lost (no WQE, wrong Q_Key, target not receiving)
  kNoAnswer,        // RC: the target does not answer (gone, not in RTR/RTS): the local ACK timeout
  kRemoteAccess,    // NAK remote access error (IBA 9.7.5.2.4, AETH 0x62)
  kInvalidRequest,  // NAK invalid request (AETH 0x61)
  kRemoteOp,        // NAK remote operational error (AETH 0x63)
  kSequenceError,   // NAK PSN sequence error (AETH 0x60): resend from this message now, a retry
  kPending,         // in flight: the link reports the reply later (ReplySink, transport/link.h)
  kPartial,         // RC: the responder acknowledged the message's first Reply::acked packets;
                    // the rest is still in flight or to be carried (IBA 9.7.5.1.1)
};

struct Reply {
  ReplyCode code = ReplyCode::kNoAnswer;
  uint8_t rnr_timer = 0;  // kRnr: the responder's min_rnr_timer code (IBA table 45)
  uint64_t original = 0;  // atomics with kAck: the remote value before the operation (AtomicAckETH)
  // kSequenceError: the responder took packets of the message since its last attempt (forward
  // progress: the retry count starts again, as rxe's reset_retry_counters on every response).
  bool progress = false;
  // kPartial, and the NAKs of a SEND or WRITE: how many of the message's packets the responder
  // took (a NAK acknowledges every packet before its PSN, IBA 9.7.5.1.1). A retry resumes there.
  uint32_t acked = 0;
  // kAck of a tag matching rendezvous (IBV_TMH_RNDV) whose READ the responder made on this host:
  // the FIN it answers with (ibv_tmh FIN, the RNDV's tag and app_ctx) from QP `fin_from_qp`.
  // The requester carries it to its own QP after the SEND's completion, mlx5's order: the SEND
  // completes when acknowledged, the FIN comes after the receiver's READ.
  bool fin = false;
  uint32_t fin_from_qp = 0;
  uint32_t fin_app_ctx = 0;
  uint64_t fin_tag = 0;

  static Reply Of(ReplyCode code) { return Reply{code}; }
  static Reply Rnr(uint8_t timer) { return Reply{ReplyCode::kRnr, timer}; }
};

// The network header a message arrives with, from the requester's address vector: RoCEv2 has
// no GRH on the wire, the IP header is its GRH (IBA annex A17.4.5.2). A UD receiver gets it in
// the first 40 bytes of its buffer.
struct Addressing {
  uint8_t sgid[16] = {};
  uint8_t dgid[16] = {};
  uint32_t flow_label = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
};

// One message, as the requester hands it to a link: what the packets of the message would carry
// (BTH opcode and destination, RETH, AtomicETH, DETH, ImmDt, IETH) and where its bytes are in the
// requester's memory.
struct Request {
  uint32_t qp_type = 0;  // the requester's transport (enum ibv_qp_type: RC, UC, UD; DC runs RC)
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t src_qp = 0;   // BTH/DETH source (UD with IBV_QP_CREATE_SOURCE_QPN: the QPN sends carry)
  uint32_t dest_qp = 0;  // BTH DestQP
  // RC/UC: the PSN of the message's first packet and the path MTU that cuts it into packets
  // (IBA 9.7.1, 9.4); a fabric without packets ignores both.
  uint32_t psn = 0;
  uint32_t mtu = 4096;
  // RC on a fabric with packets: carry only the message's packets [first_packet, +packets) (0:
  // to the end), asking for an acknowledgement every `ack_every` packets and at the last one
  // carried (BTH AckReq, IBA 9.7.6.1.1), so the requester's PSN window slides within a long
  // message as rxe's does. A fabric without packets ignores them (it is never given a part).
  uint32_t first_packet = 0;
  uint32_t packets = 0;
  uint32_t ack_every = 0;
  // Names the work request in the replies a link reports later (ReplySink); a retry carries the
  // same ticket, and a link forgets what it had in flight from that ticket on.
  uint64_t ticket = 0;
  // The message's bytes: SENDs and WRITEs read them, READs and atomics write them.
  const iovec* local = nullptr;
  size_t local_count = 0;
  uint64_t length = 0;
  // RETH / AtomicETH
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // ImmDt / IETH / the solicited event bit
  uint32_t imm_data = 0;  // network order
  uint32_t invalidate_rkey = 0;
  bool solicited = false;
  // UD: DETH's Q_Key (already resolved: never the "use my own" form) and the network header.
  uint32_t qkey = 0;
  const Addressing* addressing = nullptr;
  // DC: the requester is a DCI presenting this access key to the DCT (transport/dc_access.h).
  bool from_dci = false;
  uint64_t dc_access_key = 0;
  // XRC (IBA annex A14): an RC message from an XRC_SEND QP, for an XRC_RECV QP, carrying the
  // XRCETH that names the SRQ it lands on.
  bool xrc = false;
  uint32_t xrc_srqn = 0;

  bool with_imm() const { return opcode == WrOpcode::kSendWithImm || opcode == WrOpcode::kRdmaWriteWithImm; }
};

class HeldKey;  // (transport/key_table.h)

// An RC RDMA WRITE, READ or atomic whose local side is one piece, as a link that can execute it
// at once takes it (Link::CarryDirect): the part of a Request such a message is. Not a DCI's, not
// XRC.
struct DirectRequest {
  WrOpcode opcode = WrOpcode::kRdmaWrite;
  uint32_t dest_qp = 0;
  // The bytes: a WRITE reads them, a READ writes them, an atomic writes its 8-byte original.
  void* local = nullptr;
  uint64_t length = 0;
  uint64_t remote_addr = 0;  // RETH / AtomicETH
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // The kept lkey `local` lies in (the caller applied KeyAdmits and KeyCovers to its view), or
  // null when `local` needs none (inline bytes, a piece the caller holds). The carrier announces
  // it with its own entries (one barrier), trusts it while the route epoch reads *local_epoch
  // (else finds it current and sets *local_epoch), and lands an atomic's original value in
  // `local` before it lets go of it. Both set, or neither.
  const HeldKey* local_key = nullptr;
  uint64_t* local_epoch = nullptr;
};

}  // namespace softverbs::transport
