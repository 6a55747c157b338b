// The data path of a QP: posting, and the transitions to ERR that the data path causes.
#include <cstring>

#include "base/log.h"
#include "core/context.h"
#include "core/qp.h"
#include "core/raw_qp.h"

namespace softverbs::core {

using transport::Completion;

bool Qp::AddressingOf(const AddressVector& av, transport::Addressing* out) const {
  const GidTable gids = context_.gids();
  memcpy(out->sgid, gids.at(av.sgid_index).gid.data(), 16);
  memcpy(out->dgid, av.dgid.data(), 16);
  out->flow_label = av.flow_label;
  out->traffic_class = av.traffic_class;
  out->hop_limit = av.hop_limit;
  return gids.Find(av.dgid) >= 0;
}

transport::RequesterConfig Qp::RequesterConfigOf() const {
  transport::RequesterConfig c;
  c.completer.qp_num = qpn_;
  c.completer.type = static_cast<uint32_t>(TransportTypeOf(init_.type, init_.dc.role));  // DC: RC's requester
  c.completer.timeout = attr_.timeout;
  c.completer.retry_cnt = attr_.retry_cnt;
  c.completer.rnr_retry = attr_.rnr_retry;
  c.completer.sq_sig_all = init_.sq_sig_all;
  c.dc_initiator = init_.dc.role == DcRole::kDci;
  c.completer.dci_streams = {c.dc_initiator && init_.dc.has_streams, init_.dc.log_num_concurrent,
                             init_.dc.log_num_errored};
  c.source_qpn = init_.has_create_flags && (init_.create_flags & create_flag::kSourceQpn) ? init_.source_qpn : 0;
  c.pd = init_.pd != nullptr ? init_.pd->host_id() : 0;  // (XRC_RECV: no PD, and no sends)
  c.xrc_initiator = init_.type == QpType::kXrcSend;
  c.process_slot = context_.local().slot();
  c.dest_qp_num = attr_.dest_qp_num;
  // RC/UC: the address vector decides the fabric (DESIGN.md section 6) and the network header.
  if (attr_.ah_attr.is_global) c.dest_on_host = AddressingOf(attr_.ah_attr, &c.av);
  // An armed alternate path (IBA 17.2.8) is where the requester goes when the primary fails.
  c.completer.migrations = migrations_seen_;
  if (attr_.path_mig_state == MigState::kArmed && attr_.alt_ah_attr.is_global) {
    c.completer.alt.armed = true;
    c.completer.alt.dest_on_host = AddressingOf(attr_.alt_ah_attr, &c.completer.alt.av);
    c.completer.alt.timeout = attr_.alt_timeout;
  }
  // UD sends are bounded by the port's MTU; RC/UC segment by path_mtu (one message here).
  c.path_mtu = init_.type == QpType::kUd ? MtuBytes(DeviceLimits::kMaxMtu) : MtuBytes(attr_.path_mtu);
  c.qkey = attr_.qkey;
  c.max_rd_atomic = attr_.max_rd_atomic;
  c.max_send_wr = init_.cap.max_send_wr;
  c.max_send_sge = init_.cap.max_send_sge;
  c.max_inline = init_.cap.max_inline_data;
  c.block_self_mcast_lb = init_.has_create_flags && (init_.create_flags & create_flag::kBlockSelfMcastLb);
  c.rate_limit_kbps = attr_.rate_limit;
  c.max_burst_sz = attr_.max_burst_sz;
  c.sig_pipelining = init_.has_mlx5_create_flags && (init_.mlx5_create_flags & mlx5_create_flag::kSigPipelining);
  return c;
}

// Flattened: the ring's push is inlined whole into the completer's one call (a signaled work
// request's completion), not left as a call of its own (measured: 18 instructions less).
[[gnu::flatten]] void Qp::Complete(const Completion& c) {
  // A full CQ loses the completion: the CQ is in error (IBA 11.6.2, IBV_EVENT_CQ_ERR).
  if (!init_.send_cq->Push(c)) init_.send_cq->ReportOverrun();
}

void Qp::PathMigrated() {
  // Called by the requester under its lock: the attributes follow under mu_ at the next verb
  // (FoldPathMigrationsLocked); the event is raised now (ibv_get_async_event(3)).
  path_migrations_.fetch_add(1, std::memory_order_acq_rel);
  context_.PostAsyncEvent({kEventPathMig, AsyncEvent::Subject::kQp, user_handle_, 0});
}

void Qp::SendQueueDrained() {
  // Called by the requester under its lock, as PathMigrated: the state follows under mu_ at the
  // next verb; the event is raised now (mlx5dv_create_qp(3): "the QP is moved to SQD state upon
  // encountering a signature error, and IBV_EVENT_SQ_DRAINED is generated").
  sig_drained_.store(true, std::memory_order_release);
  context_.PostAsyncEvent({kEventSqDrained, AsyncEvent::Subject::kQp, user_handle_, 0});
}

void Qp::FoldSendQueueDrainLocked() {
  if (!sig_drained_.exchange(false, std::memory_order_acq_rel)) return;
  if (attr_.qp_state != QpState::kRts) return;  // ERR, RESET or SQD meanwhile: nothing to do
  attr_.qp_state = QpState::kSqd;
  PublishEndpoint();
}

Result<uint32_t> Qp::CancelPostedSends(uint64_t wr_id) {
  ApplyPendingError();
  // providers/mlx5/qp.c mlx5_qp_query_sqd: a QP not in SQD is EINVAL.
  if (state() != QpState::kSqd)
    return Invalid(std::string("the QP is in ") + QpStateName(state()) +
                   ": work requests are canceled in SQD only (mlx5dv_qp_cancel_posted_send_wrs(3))");
  if (raw_) return NotSupported("raw packet QPs have no signature offload: nothing of theirs waits to be canceled");
  return sq_->CancelPosted(wr_id);
}

void Qp::FoldPathMigrationsLocked() {
  const uint32_t done = path_migrations_.load(std::memory_order_acquire);
  if (migrations_seen_ == done) return;
  // Each automatic migration disarmed the alternate path, and a re-arm (ibv_modify_qp) folds
  // first: at most one is new. One the consumer forced meanwhile (MIGRATED) took the QP to the
  // same path already.
  for (; migrations_seen_ != done; ++migrations_seen_)
    if (attr_.path_mig_state == MigState::kArmed) Migrate(attr_);
  SV_LOG(kInfo, "qp 0x%x: the primary path failed, migrated to the alternate path (IBA 17.2.8)", qpn_);
  PublishEndpoint();
}

void Qp::EnterError() {
  requester_error_.store(true, std::memory_order_release);
  if (init_.send_cq == nullptr) return;  // (XRC_RECV: no requester, no CQs)
  init_.send_cq->NeedAttention();
  init_.recv_cq->NeedAttention();
}

void Qp::EnterSendQueueError() {
  send_queue_error_.store(true, std::memory_order_release);
  if (init_.send_cq != nullptr) init_.send_cq->NeedAttention();
}

void Qp::ApplyPendingErrorNow() {
  if (sig_drained_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mu_);
    FoldSendQueueDrainLocked();
  }
  if (init_.type == QpType::kXrcRecv) {
    // The initiator that failed it moved it to ERR already (its state is shared by all its
    // handles): report each new failure once (IBA 11.6.3.1).
    const uint32_t n = endpoint().xrc_errors.load(std::memory_order_acquire);
    if (xrc_seen_errors_.exchange(n) != n)
      context_.PostAsyncEvent({kEventQpAccessErr, AsyncEvent::Subject::kQp, user_handle_, 0});
    return;
  }
  const uint32_t remote = endpoint().remote_error.load(std::memory_order_acquire);
  const bool requester = requester_error_.load(std::memory_order_acquire);
  if (!requester && remote == 0 && !send_queue_error_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu_);
  if (!requester && remote == 0) {
    // UC/UD send error: RTS (or SQD) -> SQE. The send queue already flushes what it holds and
    // what is posted; receives go on (IBA 10.3.1). ibv_modify_qp SQE -> RTS resumes it.
    if (send_queue_error_.exchange(false) &&
        (attr_.qp_state == QpState::kRts || attr_.qp_state == QpState::kSqd)) {
      attr_.qp_state = QpState::kSqe;
      PublishEndpoint();
    }
    return;
  }
  if (attr_.qp_state == QpState::kErr || attr_.qp_state == QpState::kReset) return;
  EnterErrorLocked();
  // A responder-side error is reported to the QP's owner asynchronously (IBA 11.6.3.1).
  if (endpoint().remote_error.exchange(0) != 0)
    context_.PostAsyncEvent({kEventQpAccessErr, AsyncEvent::Subject::kQp, user_handle_, 0});
}

void Qp::EnterErrorLocked() {
  attr_.qp_state = QpState::kErr;
  PublishEndpoint();
  requester_error_.store(false, std::memory_order_release);
  send_queue_error_.store(false, std::memory_order_release);
  sq_->Flush();
  if (raw_) raw_->FlushPaced();  // the WRs waiting for the rate limiter
  // IBA 10.3.1: in ERR every outstanding receive completes with a flush error. An SRQ's WQEs
  // belong to the SRQ; its QP instead reports that its last WQE was reached.
  if (rq_) {
    // A WQE the wire responder took for a message still in progress completes first: it is the
    // oldest (docs/wire.md).
    {
      transport::WireReceive& held = endpoint().wire;
      fabric::RobustLock lock(held.lock);
      if (held.wqe_held) {
        Completion c;
        c.wr_id = held.wqe.wr_id;
        c.status = transport::wc_status::kWrFlushErr;
        c.opcode = transport::wc_opcode::kRecv;
        c.qp_num = qpn_;
        if (!init_.recv_cq->Push(c)) init_.recv_cq->ReportOverrun();
        held.wqe_held = 0;
        held.message = 0;
      }
    }
    for (transport::TakenWqe w = rq_->Take(); w.found; w = rq_->Take()) {
      Completion c;
      c.wr_id = w.wr_id;
      c.status = transport::wc_status::kWrFlushErr;
      c.opcode = transport::wc_opcode::kRecv;
      c.qp_num = qpn_;
      if (!init_.recv_cq->Push(c)) init_.recv_cq->ReportOverrun();
    }
  } else if (init_.srq != nullptr) {
    context_.PostAsyncEvent({kEventQpLastWqeReached, AsyncEvent::Subject::kQp, user_handle_, 0});
  }
}

// ibv_fork_init(3): a child may not use the RDMA resources of its parent. (A load and a compare
// on every post: the refusal is built out of line.)
[[gnu::noinline, gnu::cold]] static Status ForkedChild() {
  return Invalid("the QP belongs to the parent process: a child of fork() cannot use it (ibv_fork_init(3))");
}

Status Qp::PostSend(const transport::SendWr& wr) {
  if (!context_.local().is_current()) [[unlikely]] return ForkedChild();
  ApplyPendingError();
  SV_RETURN_IF_ERROR(CheckDcWorkRequest(init_.dc.role, wr.dc.set));
  if (init_.type == QpType::kXrcRecv)
    return Invalid("an XRC_RECV QP has no send queue (IBA A14: it is the target half of XRC)");
  if (raw_) return raw_->PostSend(wr, state_now());
  return sq_->Post(wr, state_.load(std::memory_order_acquire));
}

bool Qp::PostOnLane(const transport::LaneWr& wr) {
  // (PostSend's gates: a forked child and a pending error are PostSend's to answer)
  if (sq_ == nullptr || !context_.local().is_current()) [[unlikely]] return false;
  ApplyPendingError();
  return sq_->PostOnLane(wr, state_.load(std::memory_order_acquire));
}

Status Qp::ResetDciStream(uint16_t stream) {
  ApplyPendingError();
  // The order of mlx5's checks (providers/mlx5/mlx5.c): the QP must be in RTS (EOPNOTSUPP),
  // then be a DCI (EINVAL); the firmware refuses a stream that is not in error.
  if (state_.load(std::memory_order_acquire) != static_cast<uint32_t>(QpState::kRts))
    return NotSupported("the DCI must be in RTS to reset a stream (mlx5dv_dci_stream_id_reset(3): an errored "
                        "stream of a QP still in RTS)");
  if (init_.dc.role != DcRole::kDci) return Invalid("the QP is not a DCI: only DCIs have streams");
  return sq_->ResetStream(stream);
}

void Qp::FlushRaw() { raw_->Flush(); }

void Qp::PushReceive(const Completion& c) {
  if (!init_.recv_cq->Push(c)) init_.recv_cq->ReportOverrun();
}

Status Qp::PostRecv(uint64_t wr_id, const transport::RecvSge* sge, uint32_t num_sge) {
  if (!context_.local().is_current()) [[unlikely]] return ForkedChild();
  ApplyPendingError();
  if (init_.srq != nullptr)
    return Invalid("the QP receives through an SRQ: post with ibv_post_srq_recv (ibv_post_recv(3))");
  if (init_.type == QpType::kXrcSend || init_.type == QpType::kXrcRecv)
    return Invalid(std::string(QpTypeName(init_.type)) + " QPs have no receive queue: XRC receives are posted to "
                   "XRC SRQs (ibv_post_srq_recv), IBA A14");
  const auto state = static_cast<QpState>(state_.load(std::memory_order_acquire));
  // ibv_post_recv(3) / IBA 10.8.2: receives are accepted from INIT on.
  if (state == QpState::kReset) [[unlikely]] return Invalid("the QP is in RESET: receives are accepted from INIT on");
  if (state == QpState::kErr) [[unlikely]] {
    Completion c;  // IBA 10.8.3.1: flushed at once
    c.wr_id = wr_id;
    c.status = transport::wc_status::kWrFlushErr;
    c.opcode = transport::wc_opcode::kRecv;
    c.qp_num = qpn_;
    init_.recv_cq->Push(c);
    return Status::Ok();
  }
  if (!raw_) [[likely]] return rq_->Post(wr_id, sge, num_sge);
  SV_RETURN_IF_ERROR(rq_->Post(wr_id, sge, num_sge));
  raw_->DrainBacklog();
  return Status::Ok();
}

}  // namespace softverbs::core
