#include "transport/requester.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/imported_key.h"
#include "transport/indirect_key.h"
#include "transport/signature_access.h"
#include "transport/key_table.h"
#include "transport/mcast_table.h"
#include "transport/progress_thread.h"
#include "transport/tag_matcher.h"
#include "transport/window_key.h"

namespace softverbs::transport {
namespace {

using Clock = std::chrono::steady_clock;
using Verdict = Completer::Verdict;

// enum ibv_qp_type / ibv_qp_state values.
using qp_type::kRc, qp_type::kUc, qp_type::kUd;
using qp_state::kRts, qp_state::kErr;
using access_bit::kLocalWrite;

bool IsAtomic(WrOpcode op) { return op == WrOpcode::kAtomicCmpSwp || op == WrOpcode::kAtomicFetchAdd; }
// READ and atomics write the local buffers; the rest read them.
bool WritesLocal(WrOpcode op) { return op == WrOpcode::kRdmaRead || IsAtomic(op); }
// BIND_MW, LOCAL_INV and UMRs change keys of this process and send nothing.
bool IsLocalOp(WrOpcode op) {
  return op == WrOpcode::kDriver1 || op == WrOpcode::kBindMw || op == WrOpcode::kLocalInv;
}
// The payload bytes a message sends: what pacing counts (a READ request carries none; its
// response is the responder's to send).
uint64_t RequesterPayloadOf(const SendWr& wr) {
  if (wr.opcode == WrOpcode::kRdmaRead) return 0;
  if ((wr.flags & send_flag::kInline) && CarriesData(wr.opcode)) return wr.inline_length;
  uint64_t total = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) total += wr.sge[i].length;
  return total;
}

// Whether `wr` passes Check at once (nearly every work request): a SEND, a WRITE off UD, or a
// READ or atomic on RC with max_rd_atomic, in RTS or later, within max_send_sge and, inline,
// within max_inline_data. Anything else is decided by Check, which says why it refuses.
bool PlainlyValid(const SendWr& wr, uint32_t qp_state, const RequesterConfig& c) {
  if (qp_state < kRts || wr.num_sge > c.max_send_sge) return false;
  const uint32_t type = c.completer.type;
  switch (wr.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return !(wr.flags & send_flag::kInline) || wr.inline_length <= c.max_inline;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return type != kUd && (!(wr.flags & send_flag::kInline) || wr.inline_length <= c.max_inline);
    case WrOpcode::kRdmaRead:
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      return type == kRc && c.max_rd_atomic != 0;
    default:
      return false;
  }
}

}  // namespace

Requester::Requester(fabric::LocalProcess& local, RequesterHost& host, Links links)
    : local_(local), host_(host), completer_(host), links_(links), pacing_clock_([] { return Clock::now(); }) {
  links_.host->Attach(this);
  links_.wire->Attach(this);
}

Requester::~Requester() { ProgressThread::Get().Forget(this); }

void Requester::Configure(const RequesterConfig& config) {
  std::lock_guard lock(mu_);
  // A path migration the QP has not taken in yet (TimedOut) keeps the path it moved to.
  const bool keep_path = config.completer.migrations < completer_.migrations();
  const RequesterConfig before = config_;
  config_ = config;
  if (keep_path) {
    config_.av = before.av;
    config_.dest_on_host = before.dest_on_host;
    config_.completer.timeout = before.completer.timeout;
    config_.completer.alt.armed = false;
  }
  completer_.Configure(config_.completer);
  // ibv_modify_qp_rate_limit(3): "Setting a value of 0 for max_burst_sz ... will use the
  // devices defaults": one path MTU, a packet at a time.
  const uint32_t burst = config.max_burst_sz ? config.max_burst_sz : config.path_mtu;
  pacer_.Configure(config.rate_limit_kbps, config.rate_limit_kbps ? burst : 0);
  lane_ = config_.completer.type == kRc && !config_.dc_initiator && !config_.xrc_initiator && config_.dest_on_host &&
          !config_.sig_pipelining && config_.rate_limit_kbps == 0 && config_.max_send_wr > 0 &&
          config_.max_send_sge > 0;
}

void Requester::SetPacingClock(PacingClock clock) {
  std::lock_guard lock(mu_);
  pacing_clock_ = std::move(clock);
}

void Requester::SetPsn(uint32_t psn) {
  std::lock_guard lock(mu_);
  next_psn_ = psn & 0xffffff;
}

Status Requester::Check(const SendWr& wr, uint32_t qp_state) const {
  const uint32_t type = config_.completer.type;
  // ibv_post_send(3) / IBA 10.8.2: sends are accepted from RTS on (and flushed in ERR).
  if (qp_state < kRts) return Invalid("the QP must be in RTS to post sends (IBA 10.8.2)");
  if (wr.num_sge > config_.max_send_sge)
    return Invalid("num_sge " + std::to_string(wr.num_sge) + " exceeds max_send_sge " + std::to_string(config_.max_send_sge));
  // (ATOMIC WRITE's 8 bytes travel in the WQE whatever max_inline_data is, as rxe's atomic_wr.)
  if ((wr.flags & send_flag::kInline) && CarriesData(wr.opcode) && wr.opcode != WrOpcode::kAtomicWrite &&
      wr.inline_length > config_.max_inline)
    return Invalid("inline data of " + std::to_string(wr.inline_length) + " bytes exceeds max_inline_data " +
                   std::to_string(config_.max_inline));
  switch (wr.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return Status::Ok();
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      if (type == kUd) return Invalid("UD QPs have no RDMA WRITE (IBA 9.4)");
      return Status::Ok();
    case WrOpcode::kRdmaRead:
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      if (type != kRc) return Invalid("only RC QPs have RDMA READ and atomics (IBA 9.4)");
      // IBA 11.2.4.2: max_rd_atomic is how many may be outstanding; 0 allows none.
      if (config_.max_rd_atomic == 0)
        return Invalid("max_rd_atomic is 0: this QP may not initiate RDMA READ or atomics");
      return Status::Ok();
    case WrOpcode::kLocalInv:
    case WrOpcode::kBindMw:
      // ibv_bind_mw(3): "The QP Transport Service Type must be either UC, RC or XRC_SEND for
      // bind operations"; local invalidation works on the same QPs.
      if ((type != kRc && type != kUc) || config_.dc_initiator)
        return Invalid("BIND_MW and LOCAL_INV are posted on RC and UC QPs only (ibv_bind_mw(3))");
      return Status::Ok();
    case WrOpcode::kSendWithInv:
      // IBA 9.4: SEND with Invalidate is an RC (and XRC) operation.
      if (type != kRc || config_.dc_initiator) return Invalid("SEND_WITH_INV is an RC operation (IBA 9.4)");
      return Status::Ok();
    case WrOpcode::kAtomicWrite:
      // IBA 1.5 9.4.6: an RC operation of exactly 8 bytes. Same host only: the guest kernel's
      // rxe (6.1) does not parse opcode 0x1D, so it is not sent on the wire.
      if (type != kRc || config_.dc_initiator) return Invalid("ATOMIC WRITE is an RC operation (IBA 1.5 9.4.6)");
      if (!config_.dest_on_host)
        return NotSupported("ATOMIC WRITE to another host: the wire peer (rxe of Linux 6.1) has no opcode 0x1D");
      if ((wr.flags & send_flag::kInline) && wr.inline_length != 8)
        return Invalid("ATOMIC WRITE carries exactly 8 bytes, not " + std::to_string(wr.inline_length));
      return Status::Ok();
    case WrOpcode::kDriver1:
      // mlx5dv_wr_post(3) lists mlx5dv_wr_mr_interleaved / mlx5dv_wr_mr_list under "RC QPs".
      if (!wr.umr)
        return Invalid("opcode IBV_WR_DRIVER1 is posted by mlx5dv_wr_mr_list / _mr_interleaved / _mkey_configure only");
      if (type != kRc) return Invalid("UMR work requests (indirect mkeys) are for RC QPs (mlx5dv_wr_post(3))");
      if (wr.inline_length < sizeof(UmrRequest)) return Invalid("a UMR work request without its layout");
      return Status::Ok();
    default:
      return Invalid("opcode " + std::to_string(static_cast<uint32_t>(wr.opcode)) + " is not a send opcode of this QP");
  }
}

Status Requester::Post(const SendWr& wr, uint32_t qp_state) {
  std::lock_guard lock(mu_);
  if (!PlainlyValid(wr, qp_state, config_)) SV_RETURN_IF_ERROR(Check(wr, qp_state));
  if (stopped_ || qp_state == kErr || completer_.StreamStopped(wr)) {
    // IBA 10.8.3.1: a WR posted to a QP in ERR completes with a flush error; so does one of a
    // DCI stream in error until it is reset (mlx5dv_dci_stream_id_reset(3)).
    completer_.Flush(wr);
    return Status::Ok();
  }
  // (An empty queue is the common case: deque::size() is a few multiplies, empty() one compare.)
  const size_t queued = queue_.empty() ? 0 : queue_.size();
  if (queued >= config_.max_send_wr)
    return Status(ENOMEM, "the send queue is full (" + std::to_string(config_.max_send_wr) + " WRs waiting)");
  WrProgress p;
  p.retry = completer_.Budget();
  // Nothing waits before it: executed here and now, without entering the queue (and without
  // copying the WR: it is copied only if it has to wait).
  if (qp_state == kRts && queued == 0 && !sig_stopped_ && (!pacer_.limited() || Paced(wr))) {
    const Verdict v = Execute(wr, p, kMaxInFlightPsns);  // (an empty queue: the whole window)
    if (v.kind == Verdict::kFailed) stopped_ = true;
    if (v.kind == Verdict::kCompleted || v.kind == Verdict::kFailed || v.kind == Verdict::kStreamFailed) {
      if (sig_stopped_) ReportSigStop();
      if (completer_.HasFollowUps() && QueueFollowUps()) RunQueue();
      return Status::Ok();
    }
    WaitInQueue(wr, p, v);  // in flight, or RNR / no answer: it waits in the queue like the rest
    return Status::Ok();
  }
  // SQD: accepted, executed once the QP is back in RTS; SQE: the send queue is stopped. A WR
  // the pacer holds back waits in the queue too (delayed, never failed).
  Enqueue(wr, p);
  if (qp_state == kRts) RunQueue();
  return Status::Ok();
}

void Requester::WaitInQueue(const SendWr& wr, WrProgress& p, const Verdict& v) {
  p.in_flight = v.kind == Verdict::kInFlight;
  p.due = p.in_flight ? Clock::now() + AckTimeout(config_.completer.timeout) : v.retry_at;
  Enqueue(wr, p);
  ProgressThread::Get().Schedule(this, queue_.front().due);
}

void Requester::Enqueue(const SendWr& wr, const WrProgress& p) {
  Pending q;
  static_cast<WrProgress&>(q) = p;
  q.wr = wr;
  Enqueue(std::move(q));
}

void Requester::Enqueue(Pending&& p) {
  // The caller's inline bytes are only valid during ibv_post_send: a queued WR keeps a copy.
  if (p.wr.flags & send_flag::kInline) {
    p.inline_copy.assign(p.wr.inline_data, p.wr.inline_data + p.wr.inline_length);
    p.wr.inline_data = p.inline_copy.data();
  }
  queue_.push_back(std::move(p));
}

bool Requester::Settle(Pending& head, const Verdict& v) {
  if (v.kind == Verdict::kFailed) stopped_ = true;
  if (v.kind != Verdict::kRetry) return true;
  head.due = v.retry_at;
  ProgressThread::Get().Schedule(this, head.due);
  return false;
}

Verdict Requester::TimedOut(Pending& p) {
  const AlternatePath alt = config_.completer.alt;
  const Verdict v = completer_.OnTimeout(p.wr, p.retry);
  if (v.migrated) {
    // IBA 17.2.8: from now on messages take the alternate path (Completer::Migrate).
    config_.av = alt.av;
    config_.dest_on_host = alt.dest_on_host;
    config_.completer = completer_.config();
  }
  return v;
}

void Requester::Rewind() {
  for (Pending& p : queue_) {
    if (!p.in_flight) break;
    p.in_flight = false;
    p.sent = p.acked;  // resumes at its first packet not acknowledged (rxe's req_retry)
    p.due = {};  // due at once, behind the head
  }
}

void Requester::RunQueue() {
  pace_until_ = Clock::time_point::max();  // CarryQueued says again what waits for the pacer
  // The head's local ACK timeout expired with its reply still out: the completer decides
  // whether everything in flight is carried again (IBA 9.7.6.1.3).
  if (!queue_.empty() && !stopped_ && queue_.front().in_flight && queue_.front().due <= Clock::now()) {
    Pending& head = queue_.front();
    const Verdict v = TimedOut(head);
    if (v.kind == Verdict::kFailed || v.kind == Verdict::kStreamFailed) {
      stopped_ = v.kind == Verdict::kFailed;
      queue_.pop_front();
      // (a DCI stream's failure: what was carried behind it goes on waiting for its replies)
    } else {
      Rewind();
    }
  }
  CarryQueued();
  if (QueueFollowUps()) CarryQueued();
  // The head failed: what waited behind it is flushed now, not at the owner's next verb
  // (IBA 10.8.3.1), so a consumer that only polls sees every completion.
  while (stopped_ && !queue_.empty()) {
    completer_.Flush(queue_.front().wr);
    queue_.pop_front();
  }
  if (sig_stopped_) ReportSigStop();
  if (!queue_.empty() && !stopped_) ProgressThread::Get().Schedule(this, NextDue());
}

bool Requester::QueueFollowUps() {
  // (the rendezvous FIN after its READ: transport/rendezvous.h)
  if (!completer_.HasFollowUps()) return false;  // nearly always: no vector made and dropped
  std::vector<SendWr> next = completer_.TakeFollowUps();
  for (SendWr& wr : next) {
    Pending p;
    p.wr = std::move(wr);
    p.retry = completer_.Budget();
    Enqueue(std::move(p));
  }
  return !next.empty();
}

// (A canceled WR is a NOP: the callers let it go without the pacer.)
bool Requester::Paced(const SendWr& wr) {
  if (!pacer_.limited() || IsLocalOp(wr.opcode)) return true;
  const Clock::time_point now = pacing_clock_();
  const uint64_t bytes = RequesterPayloadOf(wr);
  if (!pacer_.MayGo(bytes, now)) {
    pace_until_ = std::min(pace_until_, pacer_.ReadyAt(bytes));
    return false;
  }
  pacer_.Take(bytes, now);
  return true;
}

Clock::time_point Requester::NextDue() const {
  if (queue_.empty() || stopped_) return Clock::time_point::max();
  const Pending& head = queue_.front();
  if (sig_stopped_ && !head.in_flight) return Clock::time_point::max();  // until LeaveDrained
  // A head in flight waits for its reply or ACK timeout, and what follows it maybe for the
  // pacer; a head not carried yet waits for its RNR delay and then for the pacer.
  if (head.in_flight) return std::min(head.due, pace_until_);
  return pace_until_ == Clock::time_point::max() ? head.due : std::max(head.due, pace_until_);
}

void Requester::CarryQueued() {
  size_t i = 0;
  uint64_t psns = 0;       // carried and not acknowledged
  uint32_t rd_atomic = 0;  // READs and atomics in flight
  for (; i < queue_.size() && queue_[i].in_flight; ++i) {
    psns += Outstanding(queue_[i], Sliced(queue_[i]));
    rd_atomic += WritesLocal(queue_[i].wr.opcode) ? 1 : 0;
  }
  // The last message in flight may have packets left: it goes on before anything new.
  if (i > 0 && queue_[i - 1].sent < queue_[i - 1].packets && Sliced(queue_[i - 1])) --i;
  while (i < queue_.size() && !stopped_ && i < kMaxInFlight) {
    Pending& p = queue_[i];
    const bool sliced = Sliced(p), resume = p.in_flight;
    if (!resume && sig_stopped_) return;  // signature pipelining: stopped until SQD -> RTS
    // A WR of a DCI stream that entered error while it waited: flushed, never carried
    // (mlx5dv_dci_stream_id_reset(3)); the other streams' WRs go on.
    if (!resume && completer_.StreamStopped(p.wr)) {
      completer_.Flush(p.wr);
      queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (!resume && !MayStart(p, i, psns, rd_atomic)) return;
    if (sliced && psns >= kMaxInFlightPsns) return;  // the window is full until an ACK comes
    // Packet pacing, last (it takes the message's bytes from the bucket): a message leaves when
    // the bucket allows; a later part of one already carried was paid for with its first.
    if (!resume && !p.canceled && !Paced(p.wr)) return;
    const uint32_t budget = sliced ? static_cast<uint32_t>(kMaxInFlightPsns - psns) : UINT32_MAX;
    // A head whose last attempt got no answer has waited its timeout: the completer decides
    // whether it is tried again.
    Verdict v{Verdict::kRetry, Clock::now()};
    if (!resume && p.retry.awaiting_timeout) v = TimedOut(p);
    const uint32_t sent_before = p.sent;
    if (v.kind == Verdict::kRetry) v = Execute(p.wr, p, budget);
    if (v.kind == Verdict::kInFlight) {
      if (!resume) {
        p.in_flight = true;
        p.due = Clock::now() + AckTimeout(config_.completer.timeout);
        rd_atomic += WritesLocal(p.wr.opcode) ? 1 : 0;
      }
      psns += sliced ? p.sent - sent_before : p.packets;
      if (sliced && p.sent < p.packets) return;  // the window is full
      ++i;
      continue;
    }
    if (resume) return;  // a part not carried now: the message's ACK timeout decides
    if (i > 0) return;  // (a link that answers at once never has requests in flight)
    if (!Settle(p, v)) return;
    queue_.pop_front();
  }
}

bool Requester::MayStart(const Pending& p, size_t i, uint64_t psns, uint32_t rd_atomic) const {
  if (p.due > Clock::now()) return false;
  if (!Sliced(p) && i > 0 && psns + p.packets > kMaxInFlightPsns) return false;  // the oldest always goes
  // IBA 9.7.5.1.4 / rxe's req rd_atomic: at most max_rd_atomic READs and atomics outstanding.
  // The responder keeps that many to answer their duplicates; a READ carried beyond them
  // pushed an older one's out, and once that older one's response was lost, its retries
  // were dropped as duplicates with no resource until IBV_WC_RETRY_EXC_ERR.
  if (WritesLocal(p.wr.opcode) && rd_atomic >= std::max<uint32_t>(config_.max_rd_atomic, 1)) return false;
  // mlx5dv_qp_cancel_posted_send_wrs(3): a pipelining QP stops "between the WQE that generated
  // the signature error, and the next WQE that has IBV_SEND_FENCE": that one waits for the rest.
  if (config_.sig_pipelining && (p.wr.flags & send_flag::kFence) && i > 0) return false;
  const bool local_op = IsLocalOp(p.wr.opcode) || p.canceled;  // (a canceled WR: a NOP, local)
  // Completions come in order (IBA 10.8.x): an operation that completes at once -- a local
  // one, or one for this host's fabric -- waits until nothing before it is in flight.
  return i == 0 || !(local_op || OnHost(p.wr));
}

bool Requester::Sliced(const SendWr& wr) const {
  if (config_.completer.type != kRc || config_.dc_initiator || OnHost(wr)) return false;
  switch (wr.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kSendWithInv:
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return true;
    default:
      return false;
  }
}

Clock::time_point Requester::Progress() {
  std::lock_guard lock(mu_);
  RunQueue();
  return NextDue();
}

Requester::Pending* Requester::InFlight(uint64_t ticket) {
  for (Pending& p : queue_) {
    if (!p.in_flight) return nullptr;
    if (p.ticket == ticket) return &p;
  }
  return nullptr;
}

void Requester::OnReply(uint64_t ticket, const Reply& reply) {
  std::lock_guard lock(mu_);
  // Replies come in order; one for a request carried again since is stale.
  if (queue_.empty() || !queue_.front().in_flight || queue_.front().ticket != ticket || stopped_) return;
  Pending& head = queue_.front();
  // What the responder took of a sliced message stays taken: a retry resumes after it.
  if (reply.acked > head.acked && Sliced(head)) head.acked = std::min(reply.acked, head.sent);
  if (reply.code == ReplyCode::kPartial) {
    // Part of the message is acknowledged: forward progress (the retry count starts again, as
    // for READ responses below), the ACK timer measures silence from now, and the window has
    // room for the next packets.
    head.retry.timeouts = 0;
    head.due = Clock::now() + AckTimeout(config_.completer.timeout);
    RunQueue();
    return;
  }
  Verdict v;
  if (reply.code == ReplyCode::kAck && head.local_error) {
    v = completer_.Fail(head.wr, wc_status::kLocProtErr);
  } else if (reply.code == ReplyCode::kAck && IsAtomic(head.wr.opcode) &&
             !WriteLocal(head, 0, {reinterpret_cast<const uint8_t*>(&reply.original), 8})) {
    v = completer_.Fail(head.wr, wc_status::kLocProtErr);
  } else {
    v = completer_.OnReply(head.wr, head.retry, reply, IsAtomic(head.wr.opcode) ? 8 : head.length);
  }
  if (v.kind == Verdict::kRetry) {
    Rewind();  // RNR or a sequence NAK: everything from the head is carried again
    head.due = v.retry_at;
  } else {
    if (v.kind == Verdict::kFailed) stopped_ = true;
    queue_.pop_front();
    // The ACK timer measures silence, not a message's age (IBA 9.7.6.1.3; rxe re-arms its
    // retransmission timer after each response, rxe_comp.c): an acknowledgement that leaves
    // requests outstanding gives the next one a whole timeout from now. Behind a long pipeline,
    // or facing a responder that answers steadily but slower than one timeout per window (rxe
    // under emulation), the next message was already due: everything in flight was carried
    // again and a retry spent for nothing.
    if (!stopped_ && !queue_.empty() && queue_.front().in_flight)
      queue_.front().due = std::max(queue_.front().due, Clock::now() + AckTimeout(config_.completer.timeout));
  }
  RunQueue();
}

void Requester::OnResponseData(uint64_t ticket, uint64_t offset, std::span<const uint8_t> bytes) {
  std::lock_guard lock(mu_);
  Pending* p = InFlight(ticket);
  if (p == nullptr) return;
  // A READ response in order is forward progress: the retry count starts again (rxe
  // check_ack: reset_retry_counters on every READ response).
  p->retry.timeouts = 0;
  if (p == &queue_.front()) p->due = Clock::now() + AckTimeout(config_.completer.timeout);  // as in OnReply
  if (!WriteLocal(*p, offset, bytes)) p->local_error = true;
}

bool Requester::WriteLocal(const Pending& p, uint64_t offset, std::span<const uint8_t> bytes) {
  // The SGEs are checked again now, as a NIC's DMA of the response is (IBA 10.6.3.1): the MR may
  // be gone since the request was carried.
  const KeyRule rule{config_.process_slot, config_.pd, kLocalWrite, true};
  size_t done = 0;
  for (uint32_t i = 0; i < p.wr.num_sge && done < bytes.size(); ++i) {
    const Sge& s = p.wr.sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(s.length - offset, bytes.size() - done);
    PinnedPieces pieces;
    if (!ResolveKey(local_.registry(), s.lkey, s.addr + offset, n, n, rule,
                    [this](fabric::SharedRef ref) { return local_.At(ref); }, &pieces)) {
      // An lkey imported from another process: the bytes are written there (imported_key.h).
      if (IsImportedKey(local_.registry(), s.lkey, config_.pd, config_.process_slot)) {
        const iovec from{const_cast<uint8_t*>(bytes.data() + done), n};
        if (!WriteImportedKey(local_, ImportedAccessOf(s.lkey, s.addr + offset, true), &from, 1)) return false;
        done += n;
        offset = 0;
        continue;
      }
      // A signature mkey refuses plain accesses: the wire bytes are checked and converted
      // (signature_access.h).
      if (SigAccess(local_.registry(), s.lkey, s.addr + offset, n, rule,
                    [this](fabric::SharedRef ref) { return local_.At(ref); }, SigMoveLocal, /*scatter=*/true,
                    const_cast<uint8_t*>(bytes.data() + done), SigStopFlag()) != SigAccessResult::kDone)
        return false;
      done += n;
      offset = 0;
      continue;
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
      memcpy(pieces.data()[k].iov_base, bytes.data() + done, pieces.data()[k].iov_len);
      done += pieces.data()[k].iov_len;
    }
    offset = 0;
  }
  return done == bytes.size();
}

void Requester::Flush() {
  std::lock_guard lock(mu_);
  stopped_ = true;
  while (!queue_.empty()) {
    completer_.Flush(queue_.front().wr);
    queue_.pop_front();
  }
}

void Requester::Reset() {
  std::lock_guard lock(mu_);
  queue_.clear();
  stopped_ = false;
  sig_stopped_ = sig_reported_ = false;
  completer_.ClearStreams();
  next_psn_ = 0;
}

Status Requester::ResetStream(uint16_t stream) {
  std::lock_guard lock(mu_);
  return completer_.ResetStream(stream);
}

void Requester::Resume() {
  std::lock_guard lock(mu_);
  stopped_ = false;  // what waited was flushed when the error happened
}

Verdict Requester::ExecuteUmr(const SendWr& wr) {
  UmrRequest req;
  memcpy(&req, wr.inline_data, sizeof req);
  const bool sig_present = (req.set & kUmrSetSignature) != 0;
  const uint64_t entry_bytes = static_cast<uint64_t>(req.entries) * sizeof(LayoutEntry);
  if (wr.inline_length != sizeof req + entry_bytes + (sig_present ? sizeof(SigConfig) : 0))
    return completer_.Fail(wr, wc_status::kLocQpOpErr);  // not what the builders write: a malformed WQE
  std::vector<LayoutEntry> entries(req.entries);
  if (req.entries) memcpy(entries.data(), wr.inline_data + sizeof req, entry_bytes);
  SigConfig sig;
  if (sig_present) memcpy(static_cast<void*>(&sig), wr.inline_data + sizeof req + entry_bytes, sizeof sig);
  // The builder checked the mkey when it was posted; it may have been destroyed since, which
  // makes the UMR a local protection error (the mkey is not valid for this QP).
  std::shared_ptr<IndirectKey> mkey = IndirectKey::Find(req.mkey);
  if (mkey == nullptr || mkey->pd() != config_.pd || req.entries > mkey->max_entries())
    return completer_.Fail(wr, wc_status::kLocProtErr);
  mkey->Configure(req, entries.data(), sig_present ? &sig : nullptr);
  completer_.Finish(wr, wc_status::kSuccess, 0);
  return {};
}

Verdict Requester::ExecuteLocalOp(const SendWr& wr) {
  // Memory window binds and local invalidations change keys of this process, in order with the
  // rest of the queue; a refusal completes in error and the QP enters ERR (IBA 10.8.3).
  const WindowQp qp{config_.completer.qp_num, config_.pd};
  std::string rule;
  uint32_t status;
  if (wr.opcode == WrOpcode::kBindMw) {
    std::shared_ptr<WindowKey> window = WindowKey::Find(wr.bind.window);
    rule = window == nullptr ? "the window was deallocated" : window->Bind(wr.bind, qp);
    status = wc_status::kMwBindErr;
  } else {
    rule = LocalInvalidate(local_, wr.invalidate_rkey, qp);
    status = wc_status::kLocQpOpErr;
  }
  if (!rule.empty()) {
    SV_LOG(kError, "ibv_post_send(qp 0x%x): %s completes with %s: %s", config_.completer.qp_num,
           wr.opcode == WrOpcode::kBindMw ? "BIND_MW" : "LOCAL_INV",
           wr.opcode == WrOpcode::kBindMw ? "IBV_WC_MW_BIND_ERR" : "IBV_WC_LOC_QP_OP_ERR", rule.c_str());
    return completer_.Fail(wr, status);
  }
  completer_.Finish(wr, wc_status::kSuccess, 0);
  return {};
}

bool Requester::GatherSignature(const Sge& s, const KeyRule& rule, PinnedPieces& pieces) {
  // A signature mkey refuses plain accesses (ResolveKey): the message carries its wire view,
  // made in a buffer the pieces keep (signature_access.h). An RDMA READ's response lands in
  // such a buffer and is converted into the mkey when the READ is answered (LandSignatures).
  // Only an mkey can be one: anything else is refused before a buffer of its length is made.
  KeyView k;
  if (!KeyPin::Peek(local_.registry(), s.lkey, &k) || !k.indirect()) return false;
  uint8_t* wire = pieces.Hold(s.length);
  if (wire == nullptr) return false;
  if (rule.writes) {
    if (!KeyAdmits(k, rule) || !KeyCovers(k, s.addr, s.length)) return false;
    pieces.AddSigLanding({s.lkey, s.addr, s.length, wire});
    pieces.Add({wire, s.length});
    return true;
  }
  if (SigAccess(local_.registry(), s.lkey, s.addr, s.length, rule,
                [this](fabric::SharedRef ref) { return local_.At(ref); }, SigMoveLocal, /*scatter=*/false,
                wire, SigStopFlag()) != SigAccessResult::kDone)
    return false;
  pieces.Add({wire, s.length});
  return true;
}

bool Requester::LandSignatures(const PinnedPieces& pieces) {
  const KeyRule rule{config_.process_slot, config_.pd, kLocalWrite, true};
  for (const PinnedPieces::SigLanding& l : pieces.sig_landings())
    if (SigAccess(local_.registry(), l.lkey, l.addr, l.length, rule,
                  [this](fabric::SharedRef ref) { return local_.At(ref); }, SigMoveLocal, /*scatter=*/true,
                  l.bytes, SigStopFlag()) != SigAccessResult::kDone)
      return false;
  return true;
}

uint32_t Requester::GatherLocal(const SendWr& wr, PinnedPieces& pieces, uint64_t* total) {
  // Inline bytes were copied at post time; otherwise the SGEs are checked against this process's
  // keys (IBA 10.6.3.1), each resolved into pieces (one per SGE, or several through an indirect key).
  *total = 0;
  if ((wr.flags & send_flag::kInline) && CarriesData(wr.opcode)) {
    if (wr.inline_length) pieces.Add({wr.inline_data, wr.inline_length});
    *total = wr.inline_length;
    return wc_status::kSuccess;
  }
  const bool writes = WritesLocal(wr.opcode);
  const KeyRule rule{config_.process_slot, config_.pd, writes ? kLocalWrite : 0, writes};
  fabric::HostRegistry& registry = local_.registry();
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& s = wr.sge[i];
    if (s.length == 0) continue;
    *total += s.length;
    // The lkeys of the last SGEs, kept resolved: most work requests name one of them.
    const HeldKey& held = local_keys_[local_keys_[0].key() == s.lkey ? 0 : 1];
    if (ResolveHeldKey(registry, held, s.lkey, s.addr, s.length, rule, &pieces)) continue;
    if (ResolveKey(registry, s.lkey, s.addr, s.length, s.length, rule,
                   [this](fabric::SharedRef ref) { return local_.At(ref); }, &pieces)) {
      KeepLocalKey(s.lkey);
      continue;
    }
    if (!(!IsAtomic(wr.opcode) && GatherSignature(s, rule, pieces)) && !GatherImported(s, writes, pieces))
      return wc_status::kLocProtErr;
  }
  if (*total > (1ull << 31)) return wc_status::kLocLenErr;  // IBA: 2^31 bytes per message
  // The local buffer of an atomic is the 8-byte original value (IBA 9.4.5).
  if ((IsAtomic(wr.opcode) || wr.opcode == WrOpcode::kAtomicWrite) && *total != 8) return wc_status::kLocLenErr;
  // A UD message fits one packet: at most the path MTU (IBA 9.6.3).
  if (config_.completer.type == kUd && *total > config_.path_mtu) return wc_status::kLocLenErr;
  return wc_status::kSuccess;
}

void Requester::KeepLocalKey(uint32_t lkey) {
  // Read again only when it changed: a key that is not plain is not asked about twice in a row.
  if (lkey == not_plain_lkey_) return;
  HeldKey* slot = local_keys_[0].key() == lkey ? &local_keys_[0] : local_keys_[1].key() == lkey ? &local_keys_[1] : nullptr;
  if (slot != nullptr && slot->Current()) return;
  if (slot == nullptr) {  // a new key takes the place of the older one
    slot = &local_keys_[next_local_key_];
    next_local_key_ ^= 1;
  }
  LearnPlainKey(local_.registry(), lkey, slot);
  local_epochs_[slot - local_keys_] = ~0ull;  // (another registration: found current anew)
  not_plain_lkey_ = slot->key() == lkey ? 0 : lkey;
  // (GatherLocal's two rules, the read and the write one)
  const KeyRule read{config_.process_slot, config_.pd, 0, false}, write{config_.process_slot, config_.pd, kLocalWrite, true};
  local_grants_[slot - local_keys_] = (KeyAdmits(slot->view(), read) ? kReadGrant : 0) |
                                      (KeyAdmits(slot->view(), write) ? kWriteGrant : 0);
}

ImportedAccess Requester::ImportedAccessOf(uint32_t lkey, uint64_t addr, bool writes) const {
  return {lkey, config_.pd, config_.process_slot, config_.completer.qp_num, addr, writes};
}

bool Requester::GatherImported(const Sge& s, bool writes, PinnedPieces& pieces) {
  // An MR imported from another process (ibv_import_mr(3)): a NIC reads the exporter's pages when
  // it sends, and writes them when a READ's response or an atomic's original value comes back.
  const ImportedAccess a = ImportedAccessOf(s.lkey, s.addr, writes);
  if (s.length > (1ull << 31) || !IsImportedKey(local_.registry(), s.lkey, config_.pd, config_.process_slot)) {
    ExplainMissingImport(local_.registry(), a, s.length);
    return false;
  }
  uint8_t* copy = pieces.Hold(s.length);
  if (copy == nullptr) return false;
  if (writes) {
    // Checked now (a bad SGE fails before anything is sent), written when answered (LandImported):
    // the response lands in this buffer first.
    if (Status st = CheckImportedKey(local_.registry(), a, s.length); !st.ok()) {
      LogImportedRefusal(a, s.length, st);
      return false;
    }
    pieces.AddImportedLanding({s.lkey, s.addr, s.length, copy});
  } else if (!ReadImportedKey(local_, a, s.length, copy)) {  // read on every (re)send
    return false;
  }
  pieces.Add({copy, s.length});
  return true;
}

bool Requester::LandImported(const PinnedPieces& pieces) {
  for (const PinnedPieces::SigLanding& l : pieces.imported_landings()) {
    const iovec from{l.bytes, l.length};
    if (!WriteImportedKey(local_, ImportedAccessOf(l.lkey, l.addr, true), &from, 1)) return false;
  }
  return true;
}

Request Requester::BuildRequest(const SendWr& wr, const PinnedPieces& pieces, uint64_t total, Addressing* ud) const {
  Request r;
  r.qp_type = config_.completer.type;
  r.opcode = wr.opcode;
  r.src_qp = config_.source_qpn ? config_.source_qpn : config_.completer.qp_num;
  r.local = pieces.data();
  r.local_count = pieces.size();
  r.length = total;
  r.remote_addr = wr.remote_addr;
  r.rkey = wr.rkey;
  r.compare_add = wr.compare_add;
  r.swap = wr.swap;
  r.imm_data = wr.imm_data;
  r.invalidate_rkey = wr.invalidate_rkey;
  r.solicited = (wr.flags & send_flag::kSolicited) != 0;
  r.from_dci = config_.dc_initiator;
  r.xrc = config_.xrc_initiator;
  r.xrc_srqn = wr.xrc_srqn;
  r.addressing = &config_.av;
  r.dest_qp = config_.dest_qp_num;
  r.mtu = config_.path_mtu;
  if (r.qp_type == kUd) {
    // IBA 10.2.5: a Q_Key with the high bit set means "use the QP's own Q_Key".
    r.qkey = (wr.ud.remote_qkey & 0x80000000u) ? config_.qkey : wr.ud.remote_qkey;
    r.dest_qp = wr.ud.remote_qpn;
    memcpy(ud->sgid, wr.ud.sgid, 16);
    memcpy(ud->dgid, wr.ud.dgid, 16);
    ud->flow_label = wr.ud.flow_label;
    ud->traffic_class = wr.ud.traffic_class;
    ud->hop_limit = wr.ud.hop_limit;
    r.addressing = ud;
  } else if (config_.dc_initiator) {  // DC: the WR names its DCT (mlx5dv_wr_set_dc_addr(3))
    r.dest_qp = wr.dc.remote_dctn;
    r.dc_access_key = wr.dc.access_key;
    *ud = config_.av;
    memcpy(ud->dgid, wr.dc.dgid, 16);
    r.addressing = ud;
  }
  return r;
}

bool Requester::OnHost(const SendWr& wr) const {
  if (config_.completer.type == kUd) return wr.ud.on_host;
  return config_.dc_initiator ? wr.dc.on_host : config_.dest_on_host;
}

Verdict Requester::Execute(const SendWr& wr, WrProgress& p, uint32_t budget) {
  if (p.canceled) {  // a NOP now: completes as the WR would have, nothing carried
    completer_.Finish(wr, wc_status::kSuccess, 0);
    return {};
  }
  if (wr.opcode == WrOpcode::kDriver1) return ExecuteUmr(wr);
  if (wr.opcode == WrOpcode::kBindMw || wr.opcode == WrOpcode::kLocalInv) return ExecuteLocalOp(wr);
  PinnedPieces pieces;
  uint64_t total = 0;
  // A later part of a message in flight reads its local side again, as a NIC's DMA does.
  // Completing it in error now would complete it before the messages ahead of it: it waits.
  if (uint32_t error = GatherLocal(wr, pieces, &total); error != wc_status::kSuccess)
    return p.in_flight ? Verdict{Verdict::kRetry, p.due} : completer_.Fail(wr, error);
  Addressing addressing;
  Request r = BuildRequest(wr, pieces, total, &addressing);
  if (!p.has_psn) {
    // IBA 9.7.1: a message takes one PSN per packet (a READ, one per response packet); the path
    // MTU cuts it. A retry sends the same PSNs again.
    p.psn = next_psn_;
    p.has_psn = true;
    const uint64_t packets = total == 0 ? 1 : (total + config_.path_mtu - 1) / config_.path_mtu;
    p.packets = static_cast<uint32_t>(std::min<uint64_t>(packets, 0xffffff));
    next_psn_ = static_cast<uint32_t>((next_psn_ + packets) & 0xffffff);
  }
  r.psn = p.psn;
  const bool sliced = Sliced(wr);
  if (sliced) {
    r.first_packet = p.sent;
    r.packets = std::min(budget, p.packets - p.sent);
    r.ack_every = kAckEvery;
  }
  if (p.ticket == 0) p.ticket = next_ticket_++;
  r.ticket = p.ticket;
  p.length = total;
  p.local_error = false;
  const uint32_t type = config_.completer.type;
  if (type == kUd && IsMulticastGid(wr.ud.dgid)) {
    // Multicast reaches this host's members (docs/cm.md: not across hosts). UD: sent is all
    // the requester knows.
    links_.host->CarryMulticast(r, config_.block_self_mcast_lb ? config_.completer.qp_num : 0);
    return completer_.OnReply(wr, p.retry, Reply::Of(ReplyCode::kAck), total);
  }
  const Reply reply = links_.For(OnHost(wr)).Carry(r);
  if (reply.code == ReplyCode::kPending) {
    if (sliced) p.sent += r.packets;
    return {Verdict::kInFlight};
  }
  if (p.in_flight) return {Verdict::kRetry, p.due};  // a part not sent: the ACK timeout decides
  const bool landings = !pieces.no_landings();
  if (reply.code == ReplyCode::kAck && landings && !pieces.sig_landings().empty() && !LandSignatures(pieces))
    return completer_.Fail(wr, wc_status::kLocProtErr);
  if (reply.code == ReplyCode::kAck && IsAtomic(wr.opcode)) {
    // The original value (AtomicAckETH); its 8 bytes may span pieces of an indirect local key.
    const auto* from = reinterpret_cast<const uint8_t*>(&reply.original);
    for (size_t i = 0; i < pieces.size(); from += pieces.data()[i].iov_len, ++i)
      memcpy(pieces.data()[i].iov_base, from, pieces.data()[i].iov_len);
  }
  // A local SGE through an imported lkey: the response or original value is the exporter's now.
  if (reply.code == ReplyCode::kAck && landings && !pieces.imported_landings().empty() && !LandImported(pieces))
    return completer_.Fail(wr, wc_status::kLocProtErr);
  const Verdict verdict = completer_.OnReply(wr, p.retry, reply, total);
  if (reply.fin && reply.code == ReplyCode::kAck) CarryFin(reply);
  return verdict;
}

void Requester::CarryFin(const Reply& reply) {
  // The rendezvous FIN (Reply::fin) from the receiver's QP to this one, after this SEND's
  // completion: a SEND of the 16-byte TMH, received as an ordinary IBV_WC_RECV.
  uint8_t tmh[kTmhBytes];
  WriteTmh(TmHeader{kTmhFin, reply.fin_app_ctx, reply.fin_tag}, tmh);
  iovec bytes{tmh, kTmhBytes};
  Request fin;
  fin.qp_type = kRc;
  fin.src_qp = reply.fin_from_qp;
  fin.dest_qp = config_.completer.qp_num;
  fin.local = &bytes;
  fin.local_count = 1;
  fin.length = kTmhBytes;
  if (const Reply sent = links_.host->Carry(fin); sent.code != ReplyCode::kAck)
    SV_LOG(kError, "tag matching rendezvous at qp 0x%x: the FIN to qp 0x%x was not received (reply %d)",
           reply.fin_from_qp, fin.dest_qp, static_cast<int>(sent.code));
}

}  // namespace softverbs::transport
