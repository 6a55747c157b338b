// The tag matching rendezvous of a message from another host (ibv_post_srq_ops(3), IBV_TMH_RNDV),
// as mlx5 hardware does it: the receiving QP READs the buffer the RVH names from the sender over
// the wire, then SENDs it a FIN. On the same host the responder does all of it while it carries
// the RNDV message (Responder::Rendezvous). On the wire the READ must be a real READ of the
// receiving QP's send queue -- PSNs, retries, NAKs -- so the packet responder hands it to the
// QP's owner here: an internal work request, which completes on the receive CQ (not the send
// queue's: the application never posted it) and is followed by the FIN, internal too.
//
// mlx5 keeps these off the application's send queue completions as well (its hardware issues the
// READ on the QP, rdma-core tests/test_tag_matching.py: the sender sees only its SEND and the
// FIN's receive).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "transport/completion.h"
#include "transport/tag_matcher.h"
#include "transport/work_request.h"

namespace softverbs::transport {

// What a matched RNDV leaves for the receiving QP: the RVH (ibv_rvh: va, rkey, len), the tag's
// TMH fields, and the tag's buffer (its recv_wr_id, one SGE: tm_caps.max_sge is 1).
struct RendezvousRead {
  uint32_t qp_num = 0;  // the receiving QP
  uint32_t src_qp = 0;  // the sender's
  uint64_t tag = 0;
  uint32_t app_ctx = 0;
  uint64_t wr_id = 0;
  Sge buffer{};  // the tag's buffer; length >= len (checked when the tag is taken)
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t len = 0;
};

// The RVH after a TMH in the first bytes of a message (kTmhBytes + kRvhBytes of them).
void ParseRvh(const uint8_t* tmh_and_rvh, RendezvousRead* out);

// The second completion of a rendezvous (mlx5 cq.c): IBV_WC_TM_RECV with IBV_WC_TM_DATA_VALID
// and byte_len = len when the data is in place; in error (no TM flags, byte_len 0) otherwise.
// It carries no tag info, as mlx5's second CQE carries no TMH.
Completion RendezvousCompletion(const RendezvousRead& read, uint32_t status);

// A work request a QP's requester runs for the QP itself (SendWr::internal): its completion is
// handed here instead of the send CQ, under the requester's lock (no call back into it).
class InternalWork {
 public:
  virtual ~InternalWork() = default;
  // The work request completed with `status`; what to post next on the same send queue, if
  // anything (behind what is queued: the FIN after its READ).
  virtual std::optional<SendWr> Finished(uint32_t status) = 0;
};

// The READ of `read` as an internal work request; `complete` writes a completion on the
// receiving QP's receive CQ. On success the READ is followed by the FIN (a 16-byte SEND of a
// TMH of opcode FIN, the tag and app_ctx), internal as well: a FIN that fails is logged.
SendWr RendezvousReadWr(const RendezvousRead& read, std::function<void(const Completion&)> complete);

// Who can issue the READ for a QP of this process: its owner (core's QP), registered by QP
// number while it lives. The packet responder may run in any process of the host; only the
// owner's requester can send for the QP.
class RendezvousIssuer {
 public:
  virtual ~RendezvousIssuer() = default;
  // The QP may READ now (RTS, max_rd_atomic > 0): checked when the tag is taken, so a QP that
  // cannot gets mlx5's software rendezvous instead (IBV_WC_TM_RNDV_INCOMPLETE).
  virtual bool CanIssueRendezvous() const = 0;
  // Posts the READ (RendezvousReadWr) on the QP's send queue; false if it refused it.
  virtual bool IssueRendezvous(const RendezvousRead& read) = 0;
};
void RegisterRendezvousIssuer(uint32_t qpn, RendezvousIssuer* issuer);
// Waits for a call in progress: the issuer may be destroyed once this returns.
void UnregisterRendezvousIssuer(uint32_t qpn, RendezvousIssuer* issuer);
// Whether QP `qpn` belongs to this process and can READ now.
bool RendezvousReady(uint32_t qpn);
// Hands `read` to its QP's issuer; false if there is none or it refused (the caller then
// completes the rendezvous in error).
bool IssueRendezvous(const RendezvousRead& read);

}  // namespace softverbs::transport
