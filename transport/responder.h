// The responder role (IBA 9.7.4 / 9.7.5): executes a request at its destination QP -- checks the
// QP may take it, checks the remote key, places or fetches the bytes, consumes a receive WQE and
// writes the receive completion -- and answers with the Reply the requester's completer turns
// into a completion (ACK, RNR NAK, NAK with a syndrome, or nothing at all).
//
// Written once against TargetQp (transport/target_qp.h): it never knows which fabric brought the
// request. On the same host it runs in the initiator's process, on the target's behalf
// (DESIGN.md section 5: the initiator is the NIC).
#pragma once

#include <cstdint>

#include "transport/codes.h"
#include "transport/dc_access.h"
#include "transport/indirect_key.h"
#include "transport/key_table.h"
#include "transport/recv_queue.h"
#include "transport/rendezvous.h"
#include "transport/request.h"
#include "transport/tag_matcher.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

// Where a receive WQE's buffers are in the target process, and the pins that keep them.
struct ScatterList {
  PinnedPieces pieces;     // no pins when only checked (peek_only)
  uint32_t lkey[kMaxSge];  // peek_only: the key of each piece (one per SGE)
  bool indirect = false;   // peek_only: an SGE names an indirect key (not checked: never landed)
  bool signature = false;  // an SGE names a signature mkey: left out of `pieces` (ResponderSigReceive)
  bool imported = false;   // an SGE names an lkey imported from another process: left out of `pieces`
                           // (ResponderImportedReceive)
};

// A one-sided request's destination as a route kept across work requests reaches it (the
// same host's, transport/host/direct_route.h): the QP's live endpoint, the R_Key's registration
// as last read and found current, and this process's address of the registration's first byte.
// The fabric moves the bytes: `move` copies `n` bytes between `at` (mapped) and `local`;
// `atomic` applies an atomic's operation to the word at owner address `va` (mapped at `word`)
// under its IBV_ATOMIC_HCA exclusion, the value before in `*before`. Both return false when the
// owner's memory was not there (a file truncated under the registration: the fabric said why).
// `move` null: the mapping cannot lose its pages (a file that cannot shrink), the responder
// copies itself. `grants`: Responder::DirectGrants of the endpoint and the key, found when the
// key was kept (neither the view, while current, nor the endpoint's PD and number change).
struct DirectTarget {
  const QpEndpoint* endpoint = nullptr;
  uint32_t process_slot = 0;
  const KeyView* key = nullptr;
  uint32_t grants = 0;
  uint8_t* base = nullptr;
  bool (*move)(const void* ctx, bool write, uint8_t* at, void* local, size_t n) = nullptr;
  bool (*atomic)(const void* ctx, uint64_t va, uint64_t* word, uint64_t (*op)(uint64_t, const void*),
                 const void* arg, uint64_t* before) = nullptr;
  const void* ctx = nullptr;
};

class Responder {
 public:
  // The most bytes ExecuteDirect moves in one step (mapped_copy.h's chunk): a longer WRITE or READ
  // is moved a step at a time by its caller, which stops between steps when the access may have
  // been revoked (DirectRoute::MoveInSteps), as Execute's copies stop between chunks.
  static constexpr uint64_t kDirectMaxBytes = 256 * 1024;
  // Executes an RDMA WRITE, READ or atomic (one local piece) at `t` when every rule Execute
  // applies to it holds -- the QP admits it (Admits), grants the access and has the resources,
  // the key admits it and covers the range, the atomic is aligned -- and answers kAck (or, as
  // Execute, kRemoteOp when the memory was not there). False when a rule does not hold, or `r`
  // is not such a request: nothing was done, and the caller runs Execute, which answers (and
  // logs) as usual. The caller holds the QP and the key. Sets reply->code (and ->original),
  // nothing else of *reply.
  static bool ExecuteDirect(const DirectTarget& t, const DirectRequest& r, Reply* reply) {
    return ExecuteDirect(t, DirectAdmitted(t), r, reply);
  }
  // The same with the rules of the endpoint's state and of the key -- DirectAdmitted -- as the
  // caller found them (a kept route while nothing changed: fabric::HostRegistry::route_epoch);
  // the request's own rules (opcode, length, range, alignment) are checked here.
  static bool ExecuteDirect(const DirectTarget& t, uint32_t admitted, const DirectRequest& r, Reply* reply);
  // The remote accesses (kRemoteWrite, kRemoteRead, kRemoteAtomic) `t` admits now by the rules
  // that do not depend on the request: the endpoint admits an RC request in its state
  // (Admits, IBA 10.3.1) and grants the access (qp_access_flags), READs and atomics need
  // responder resources (max_dest_rd_atomic, IBA 9.7.5.1.4), and the key grants it (grants).
  static uint32_t DirectAdmitted(const DirectTarget& t) {
    const QpEndpoint& e = *t.endpoint;
    if (!Admits(e, qp_type::kRc, false, false, 0)) return 0;
    using namespace access_bit;
    return e.access & t.grants & (e.max_dest_rd_atomic != 0 ? kRemoteWrite | kRemoteRead | kRemoteAtomic : kRemoteWrite);
  }
  // The remote accesses (kRemoteWrite, kRemoteRead, kRemoteAtomic) key `k` of process
  // `process_slot` admits at endpoint `e` -- a plain key (not indirect, null or on demand), its
  // owner, PD or bound QP, its access flags (KeyAdmits) --: DirectTarget::grants.
  static uint32_t DirectGrants(const QpEndpoint& e, uint32_t process_slot, const KeyView& k);

  // Executes `r` at `t`. `grh`: the 40-byte network header a UD receive starts with (built by
  // the fabric that carried the datagram), nullptr for RC/UC.
  static Reply Execute(const TargetQp& t, const Request& r, const uint8_t* grh = nullptr);

  // A message in packets (a packet fabric's responder, transport/wire/packet_responder.h): the
  // first packet of a SEND takes a receive WQE (BeginReceive; `r` is the first packet's request,
  // gated as Execute gates it); each packet places its bytes at `offset` of the WQE's buffers
  // (PlaceReceive); the last completes it (CompleteReceive, `total` bytes). A failed placement
  // completes the WQE in error at the target, as Execute does.
  // With `tm` (an RC SEND), a QP on a TM SRQ matches the first packet's TMH as Deliver does a
  // whole message (tags of a RoCE peer): the WQE may then be a tag's buffer, and PlaceReceive /
  // CompleteReceive given the same `tm` skip the TMH and complete as IBV_WC_TM_RECV / _NO_TAG.
  // A matched RNDV whose first packet holds the RVH, at a QP whose owner is this process and
  // may READ (transport/rendezvous.h), is done as mlx5 hardware does it: nothing of the message
  // lands; CompleteReceive writes the first completion (IBV_WC_TM_MATCH), checks the RVH's len
  // against the tag's buffer and fills `rndv`, which the caller hands to StartRendezvous once
  // it has released the QP's packet state. Otherwise it is left to the application
  // (IBV_WC_TM_RNDV_INCOMPLETE, mlx5's software rendezvous).
  static Reply BeginReceive(const TargetQp& t, const Request& r, TakenWqe* wqe, ReceiveTm* tm = nullptr);
  static Reply PlaceReceive(const TargetQp& t, const TakenWqe& wqe, uint64_t offset, const Request& r,
                            const ReceiveTm* tm = nullptr);
  // kAck, or kInvalidRequest for a SEND_WITH_INV whose R_Key is no window of the QP (the WQE then
  // completes in error, as in Execute).
  static Reply CompleteReceive(const TargetQp& t, const TakenWqe& wqe, const Request& r, uint64_t total,
                               const ReceiveTm* tm = nullptr, RendezvousRead* rndv = nullptr);
  // Hands a rendezvous READ (CompleteReceive's `rndv`) to its QP's requester; one it cannot
  // take completes the tag in error at `t` (IBV_WC_LOC_QP_OP_ERR, a log line).
  static void StartRendezvous(const TargetQp& t, const RendezvousRead& rndv);
  // How a matched RNDV's first packet `r` is received (BeginReceive): kRndvRead when the READ
  // can be issued (the RVH kept in `tm`), else kRndvSoftware.
  static uint32_t RendezvousMode(const TargetQp& t, const Request& r, ReceiveTm* tm);
  // A packet fabric's RDMA WRITE or READ checked whole at its first packet, as a NIC checks
  // va .. va + DMA length before it moves a byte (IBA 9.7.5.1.3; rxe check_rkey): kAck, or the
  // NAK's code, the target QP then in ERR. A READ also needs responder resources (9.7.5.1.4).
  static Reply CheckRange(const TargetQp& t, uint32_t rkey, uint64_t addr, uint64_t length, bool write);
  // A responder class C error found by a packet fabric (IBA 9.9.3.1.2: opcode sequence, length;
  // rxe do_class_ac_error): the target QP enters ERR.
  static void EnterError(const TargetQp& t);

 private:
  // SEND / SEND_WITH_IMM / SEND_WITH_INV / RDMA_WRITE_WITH_IMM's receive side: takes a WQE,
  // scatters the message (after `grh`, if any) into it and completes it on the receive CQ.
  static Reply Deliver(const TargetQp& t, const Request& r, const uint8_t* grh);
  // A TM SRQ's EAGER / RNDV message whose tag matched entry `m`: the bytes after the TMH land in
  // the tag's buffer and complete as IBV_WC_TM_RECV with its tag info.
  static Reply DeliverMatched(const TargetQp& t, const Request& r, const TagMatch& m, const TmHeader& h);
  // A matched RNDV (TMH + RVH) where the fabric reaches the requester: READs the buffer the RVH
  // names into the tag's buffer and answers with a FIN in `done` (Reply::fin: the requester
  // carries it after its SEND's completion), as mlx5 hardware does; false where it cannot (the
  // application then does it: IBV_WC_TM_RNDV_INCOMPLETE).
  static bool Rendezvous(const TargetQp& t, const Request& r, const TakenWqe& w, const TmHeader& h, Reply* done);
  // responder_rendezvous.cc: a matched RNDV's CompleteReceive.
  static Reply ReceiveRendezvous(const TargetQp& t, const TakenWqe& w, const Request& r, const ReceiveTm& tm,
                                 RendezvousRead* rndv);
  // Completes at the target (with a TMH's info), or in error moving it to ERR.
  static void CompleteAt(const TargetQp& t, const Completion& c, const TmInfo* info);
  static void FailAt(const TargetQp& t, const Completion& c, uint32_t status);
  // The gates every request passes (transport, DC access, receiving state); false: discarded.
  static bool Admits(const QpEndpoint& e, const Request& r) {
    return Admits(e, r.qp_type, r.xrc, r.from_dci, r.dc_access_key);
  }
  static bool Admits(const QpEndpoint& e, uint32_t qp_type, bool xrc, bool from_dci, uint64_t dc_access_key) {
    // A NIC discards a packet whose transport is not its QP's (IBA 9.6.1.1: the opcode's
    // transport must match the QP's service type; rxe's check_type_state), one for a DCT without
    // its access key (transport/dc_access.h), and any while the QP does not receive (10.3.1).
    // An XRC message is executed only on the view of its target QP and SRQ (host/xrc_target.h).
    // IBA 10.3.1: a QP receives in RTR, RTS, SQD and SQE.
    const uint32_t state = e.state.load(std::memory_order_acquire);
    return e.type == qp_type && (e.xrc_view != 0) == xrc && DcAdmits(e, from_dci, dc_access_key) &&
           (state == qp_state::kRtr || state == qp_state::kRts || state == qp_state::kSqd || state == qp_state::kSqe);
  }
  static Reply Rdma(const TargetQp& t, const Request& r, bool write);
  static Reply Atomic(const TargetQp& t, const Request& r);
  static Reply AtomicWrite(const TargetQp& t, const Request& r);
  // Resolves [addr, +length) of `rkey` under IBA 10.6.3's rules into pieces of the target's
  // memory: the key is the target's, in its QP's PD, grants `access`, covers the range, and the
  // QP grants the same access.
  static ReplyCode CheckRemote(const TargetQp& t, uint32_t rkey, uint64_t addr, uint64_t length, uint32_t access,
                               PinnedPieces* pieces);
  // Resolves `need` bytes of WQE `w`'s buffers from byte `skip` on: kAck, kRemoteOp (a bad SGE)
  // or kInvalidRequest (the message does not fit).
  static ReplyCode Scatter(const TargetQp& t, const TakenWqe& w, uint64_t skip, uint64_t need, bool peek_only,
                           ScatterList* out);
};

}  // namespace softverbs::transport
