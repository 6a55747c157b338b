// The requester role: a QP's send queue. ibv_post_send hands each work request here; it is
// executed at once, in the poster's thread, when nothing is queued before it (the initiator is
// the NIC). Executing a work request means checking its local side (IBA 10.6.3.1), building the
// Request the packets of the message would carry, and handing it to the link of its destination
// (transport/link.h); the reply goes to the completer (transport/completer.h). A request the
// target cannot take yet (RNR, or a target that does not answer) waits in the queue, with
// everything posted after it, until the progress thread retries it when the completer says.
// With a rate limit (transport/pacer.h) a message leaves only when the pacer allows: until then
// it waits in the queue the same way, and the progress thread carries it when its time comes.
// Every request completes exactly once: success, error, or flush.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "base/spin_lock.h"
#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "transport/completer.h"
#include "transport/imported_key.h"
#include "transport/key_table.h"
#include "transport/link.h"
#include "transport/pacer.h"
#include "transport/request.h"
#include "transport/work_request.h"

namespace softverbs::transport {

class PinnedPieces;
struct KeyRule;

// The QP attributes the requester works with; the core refreshes them on every ibv_modify_qp.
struct RequesterConfig {
  CompleterConfig completer;  // qp_num, transport type, timers, retry counts, sq_sig_all
  uint32_t source_qpn = 0;    // UD with IBV_QP_CREATE_SOURCE_QPN: the QPN its sends carry
  uint64_t pd = 0;            // host-unique PD id
  uint32_t process_slot = 0;  // this process (owner of the local keys)
  uint32_t dest_qp_num = 0;   // RC/UC
  Addressing av;              // RC/UC: the address vector's GIDs and GRH fields
  bool dest_on_host = false;  // RC/UC: av.dgid is one of this host's GIDs
  uint32_t path_mtu = 4096;   // bytes
  uint32_t qkey = 0;          // UD: the QP's own Q_Key (used when a WR's has the high bit set)
  uint8_t max_rd_atomic = 0;  // RDMA READs / atomics this QP may have outstanding as initiator
  uint32_t max_send_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_inline = 0;
  bool block_self_mcast_lb = false;  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
  bool dc_initiator = false;  // a DCI: each WR names its DCT (SendWr::dc)
  bool xrc_initiator = false; // XRC_SEND: each WR names its XRC SRQ (SendWr::xrc_srqn)
  // Packet pacing (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit(3)): kbps, 0 unlimited; the
  // burst in bytes, 0 the device's default (one path MTU).
  uint32_t rate_limit_kbps = 0;
  uint32_t max_burst_sz = 0;
  // MLX5DV_QP_CREATE_SIG_PIPELINING: a failed signature check stops the send queue (SQD) after
  // its work request (transport/sig_pipelining.cc).
  bool sig_pipelining = false;
};

class Requester final : private ReplySink {
 public:
  // `links`: how destinations on this host and elsewhere are reached (owned by the caller).
  Requester(fabric::LocalProcess& local, RequesterHost& host, Links links);
  ~Requester();
  Requester(const Requester&) = delete;
  Requester& operator=(const Requester&) = delete;

  void Configure(const RequesterConfig& config);
  // ibv_modify_qp with IBV_QP_SQ_PSN: the next message's first packet carries `psn`.
  void SetPsn(uint32_t psn);

  // ibv_post_send of one WR in state `qp_state` (enum ibv_qp_state). A refusal (EINVAL, ENOMEM)
  // leaves the WR unposted; otherwise it completes later, exactly once.
  Status Post(const SendWr& wr, uint32_t qp_state);
  // ibv_post_send of a SEND, RDMA WRITE, READ or atomic with one SGE, on the lane of its own
  // (requester_lane.cc): run here and now when nothing waits before it, through an lkey kept
  // since earlier work requests (HeldKey) -- a WRITE, READ or atomic to a destination kept too
  // (Link::CarryDirect) --, and every rule Post and Execute apply to it holds. True: posted
  // (completes exactly once: now, or from the queue like any WR the target could not take yet).
  // False: nothing was done -- Post decides, answers and logs as for any work request.
  bool PostOnLane(const LaneWr& wr, uint32_t qp_state);
  // The QP entered ERR: every queued WR completes with IBV_WC_WR_FLUSH_ERR, and WRs posted
  // from now on are flushed as they arrive (until Reset()).
  void Flush();
  // The QP returned to RESET: queued WRs are dropped without completions (IBA 10.3.1).
  void Reset();
  // The QP left SQE for RTS (ibv_modify_qp): WRs posted from now on execute again.
  void Resume();
  // mlx5dv_dci_stream_id_reset(3): a DCI stream in error executes the WRs posted from now on.
  Status ResetStream(uint16_t stream);
  // mlx5dv_qp_cancel_posted_send_wrs(3): the WRs of `wr_id` not started yet become NOPs (good
  // completions as signaled); how many (sig_pipelining.cc). The caller checked the QP is in SQD.
  Result<uint32_t> CancelPosted(uint64_t wr_id);
  // The QP left SQD for RTS: a send queue stopped by a signature error goes on.
  void LeaveDrained();
  // Retries what is due; returns when it wants to run again (time_point::max(): never).
  std::chrono::steady_clock::time_point Progress();
  // The clock the pacer is consulted with (steady_clock by default): tests pass a fake one.
  using PacingClock = std::function<std::chrono::steady_clock::time_point()>;
  void SetPacingClock(PacingClock clock);

 private:
  // A work request's progress; apart from the WR itself so that one executed at once, which
  // never waits in the queue, does not build a queue entry (a SendWr is ~700 bytes).
  struct WrProgress {
    bool has_psn = false;  // a retry carries the PSNs of its first attempt
    uint32_t psn = 0;
    uint64_t ticket = 0;   // names it to a link that answers later
    bool in_flight = false;  // carried, its reply not in yet (kPending)
    bool local_error = false;  // response bytes could not be written locally (IBA 10.6.3.1)
    uint64_t length = 0;   // the message's bytes (the completion's byte_len)
    uint32_t packets = 1;  // the PSNs it takes
    // A SEND or WRITE to another host is carried in parts as the window allows (Sliced): its
    // packets carried so far, and those the responder acknowledged. A retry resumes at `acked`.
    uint32_t sent = 0;
    uint32_t acked = 0;
    bool canceled = false;  // mlx5dv_qp_cancel_posted_send_wrs: completes as a NOP
    RetryState retry;
    std::chrono::steady_clock::time_point due{};
  };
  struct Pending : WrProgress {
    SendWr wr;
    std::vector<uint8_t> inline_copy;  // IBV_SEND_INLINE bytes, copied at post time
  };
  // Work requests a link may have in flight at once, and the PSNs carried and not acknowledged:
  // like rxe (RXE_MAX_UNACKED_PSNS, 128), so a burst fits the receiver's socket buffer. A long
  // SEND or WRITE slides through that window, asking for an ACK every kAckEvery packets (rxe's
  // RXE_MAX_PKT_PER_ACK is 64): as each comes back, the next packets leave.
  static constexpr size_t kMaxInFlight = 64;
  static constexpr uint32_t kMaxInFlightPsns = 128;
  static constexpr uint32_t kAckEvery = 32;

  Status Check(const SendWr& wr, uint32_t qp_state) const;
  // Appends `p` to the queue (under mu_), copying its inline bytes.
  void Enqueue(Pending&& p);
  // Appends `wr` with its progress so far `p`.
  void Enqueue(const SendWr& wr, const WrProgress& p);
  // Runs `p` once; what the completer decided. A sliced message carries at most `budget` of its
  // packets from p.sent on (a part); a part beyond the first whose local side fails now
  // (its MR withdrawn) is not carried and not completed: `p` waits for its timeout, and fails
  // in order when it heads the queue.
  // `wr` is `p.wr` for a queued WR; the caller's own WR when it runs at once (not copied).
  Completer::Verdict Execute(const SendWr& wr, WrProgress& p, uint32_t budget);
  // `p` is a SEND or WRITE that the window carries in parts (RC to another host).
  bool Sliced(const SendWr& wr) const;
  bool Sliced(const Pending& p) const { return Sliced(p.wr); }
  // The PSNs `p` (in flight) holds in the window.
  static uint32_t Outstanding(const WrProgress& p, bool sliced) { return sliced ? p.sent - p.acked : p.packets; }
  // A UMR (kDriver1): configures an indirect mkey of this process (transport/indirect_key.h).
  Completer::Verdict ExecuteUmr(const SendWr& wr);
  // BIND_MW / LOCAL_INV: changes a key of this process (transport/window_key.h).
  Completer::Verdict ExecuteLocalOp(const SendWr& wr);
  // The message's local side: inline bytes, or SGEs checked against this process's keys and
  // resolved into pieces of memory. 0, or the completion error of a bad local side.
  uint32_t GatherLocal(const SendWr& wr, PinnedPieces& pieces, uint64_t* total);
  // SGE `s` through an lkey imported from another process (imported_key.h), added to `pieces`:
  // its bytes read now, or (`writes`) a buffer checked now and landed by LandImported.
  bool GatherImported(const Sge& s, bool writes, PinnedPieces& pieces);
  bool LandImported(const PinnedPieces& pieces);
  ImportedAccess ImportedAccessOf(uint32_t lkey, uint64_t addr, bool writes) const;
  // After `lkey` was resolved the usual way: kept for the next work requests if it is plain.
  void KeepLocalKey(uint32_t lkey);
  void CarryFin(const Reply& reply);
  // The wire view of SGE `s` when its lkey is a signature mkey, added to `pieces`; false if not
  // one or the access is refused.
  bool GatherSignature(const Sge& s, const KeyRule& rule, PinnedPieces& pieces);
  // Converts the READ response bytes that landed in the buffers of signature mkeys into them.
  bool LandSignatures(const PinnedPieces& pieces);
  // The Request `wr` makes (local side in `pieces`); `ud` receives a UD send's addressing.
  Request BuildRequest(const SendWr& wr, const PinnedPieces& pieces, uint64_t total, Addressing* ud) const;
  // Queues what internal work requests asked to post after them; true if there was any.
  bool QueueFollowUps();
  // Runs the queue: the head's timeout, then every work request that may be carried now;
  // flushes what follows a failure; schedules the progress thread for what waits.
  void RunQueue();
  // Carries queued work requests from the first not in flight on, while the window allows.
  void CarryQueued();
  // Whether `p`, not carried yet and at queue position `i`, may start now, with `psns` PSNs and
  // `rd_atomic` READs/atomics of those before it outstanding.
  bool MayStart(const Pending& p, size_t i, uint64_t psns, uint32_t rd_atomic) const;
  // Pacing: whether `p`, not carried yet, may leave now; if so its bytes are taken from the
  // bucket, if not pace_until_ says when it may.
  bool Paced(const SendWr& wr);
  // When the progress thread should run the queue next (time_point::max(): never).
  std::chrono::steady_clock::time_point NextDue() const;
  // Applies a verdict about the queue's head; false if the queue must wait.
  bool Settle(Pending& head, const Completer::Verdict& v);
  // `p`'s local ACK timeout expired (Completer::OnTimeout); a path migration it causes moves
  // this requester to the alternate path.
  Completer::Verdict TimedOut(Pending& p);
  // Go-back-N (IBA 9.7.6.1.3): nothing is in flight any more; everything is carried again, with
  // its PSNs, from the head on.
  void Rewind();
  // Writes `bytes` at `offset` of `p`'s local buffers (READ responses, atomic originals),
  // checked against this process's keys now; false if they no longer allow it.
  bool WriteLocal(const Pending& p, uint64_t offset, std::span<const uint8_t> bytes);
  Pending* InFlight(uint64_t ticket);
  // A lane's SEND (SEND with immediate) from `local` (held by the caller): carried the general
  // way's link (the responder receives it), settled.
  void SendOnLane(const LaneWr& wr, void* local);
  // A lane's reply other than an ACK to `wr`, which took PSNs from `psn` on: decided by the
  // completer as Execute's would be -- failed, or waiting in the queue (WaitInQueue).
  void SettleOnLane(const LaneWr& wr, const Reply& reply, uint32_t psn, uint32_t packets, uint64_t ticket);
  // `wr` (progress `p`) could not be completed now (verdict `v`: in flight, or to retry at
  // v.retry_at): it waits at the queue's tail, and the progress thread is told when.
  void WaitInQueue(const SendWr& wr, WrProgress& p, const Completer::Verdict& v);
  // The destination of `wr` is on this host (the same-host fabric answers at once).
  bool OnHost(const SendWr& wr) const;
  // ReplySink (the link's receive thread).
  void OnReply(uint64_t ticket, const Reply& reply) override;
  void OnResponseData(uint64_t ticket, uint64_t offset, std::span<const uint8_t> bytes) override;
  // Signature pipelining (sig_pipelining.cc): where a failed check is noted (null: not
  // pipelining), and the report of the stop once nothing before it is in flight.
  bool* SigStopFlag() { return config_.sig_pipelining ? &sig_stopped_ : nullptr; }
  void ReportSigStop();

  fabric::LocalProcess& local_;
  RequesterHost& host_;
  // The lkeys of the last SGEs resolved, kept (indirect_key.h, ResolveHeldKey): two, so that a
  // program alternating between two MRs does not read each again per work request.
  HeldKey local_keys_[2];
  // What each kept lkey's view admits under this QP's rule (KeyAdmits, found when it was kept:
  // the view, the PD and the process do not change while it is current): kReadGrant, kWriteGrant.
  uint8_t local_grants_[2] = {};
  // The route epoch under which each kept lkey was last found current by the link that carried a
  // lane's request with it (DirectRequest::local_epoch); ~0: not yet.
  uint64_t local_epochs_[2] = {~0ull, ~0ull};
  static constexpr uint8_t kReadGrant = 1, kWriteGrant = 2;
  uint32_t next_local_key_ = 0;  // the one the next key learned replaces
  uint32_t not_plain_lkey_ = 0;  // the last lkey found not to be a plain key (not kept)
  Completer completer_;
  Links links_;
  SpinLock mu_;  // the poster and the progress thread, one at a time (base/spin_lock.h)
  RequesterConfig config_;
  std::deque<Pending> queue_;
  // PostOnLane may run: an RC QP (not a DCI, not XRC) to a QP of this host, unpaced, without
  // signature pipelining, with a send queue and an SGE (set by Configure).
  bool lane_ = false;
  bool stopped_ = false;  // a completion error stopped the queue (ERR, or SQE for UC/UD)
  bool sig_stopped_ = false;   // signature pipelining: a check failed, nothing new starts
  bool sig_reported_ = false;  // ... and the host was told (SendQueueDrained)
  uint32_t next_psn_ = 0;  // RC/UC: the PSN of the next new message's first packet
  uint64_t next_ticket_ = 1;
  Pacer pacer_;
  PacingClock pacing_clock_;
  // A message waits for the pacer until then (time_point::max(): none waits).
  std::chrono::steady_clock::time_point pace_until_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace softverbs::transport
