// Signature pipelining (mlx5dv_create_qp(3) MLX5DV_QP_CREATE_SIG_PIPELINING and
// mlx5dv_qp_cancel_posted_send_wrs(3)): the requester's side. A work request whose access
// through a signature mkey fails a check completes as usual ("the transfer operation itself may
// be completed successfully", mlx5dv_mkey_check(3)); nothing posted after it starts. Once nothing
// before the stop is in flight the host is told, the QP enters SQD and raises
// IBV_EVENT_SQ_DRAINED. The application may turn waiting WRs into NOPs, then moves the QP to RTS.
// The hooks sit in requester.cc (SigStopFlag where accesses convert, the stop in CarryQueued).
#include "base/log.h"
#include "transport/requester.h"

namespace softverbs::transport {

void Requester::ReportSigStop() {
  // An error completion took the QP to ERR (or SQE) instead: that wins, nothing to report.
  if (sig_reported_ || stopped_ || (!queue_.empty() && queue_.front().in_flight)) return;
  sig_reported_ = true;
  SV_LOG(kInfo,
         "qp 0x%x: a signature check failed (mlx5dv_mkey_check tells which mkey); signature pipelining stops the "
         "send queue there: SQD, IBV_EVENT_SQ_DRAINED, %zu WR(s) waiting (mlx5dv_qp_cancel_posted_send_wrs(3))",
         config_.completer.qp_num, queue_.size());
  host_.SendQueueDrained();
}

Result<uint32_t> Requester::CancelPosted(uint64_t wr_id) {
  std::lock_guard lock(mu_);
  uint32_t canceled = 0;
  // providers/mlx5/qp.c mlx5dv_qp_cancel_posted_send_wrs: from the first WQE the send queue has
  // not executed to the last posted, every WQE of this wr_id becomes a NOP. One started already
  // (carried, even if waiting to be carried again) has been executed.
  for (Pending& p : queue_) {
    if (p.in_flight || p.has_psn || p.wr.wr_id != wr_id) continue;
    // mlx5dv_qp_cancel_wr: the WQE's opcode is NOP now, which is none it can cancel (EINVAL);
    // those canceled before this one stay canceled.
    if (p.canceled)
      return Status(EINVAL, "wr_id " + std::to_string(wr_id) +
                                " was canceled already (mlx5 finds a NOP there, which it does not cancel); " +
                                std::to_string(canceled) + " canceled by this call");
    p.canceled = true;
    ++canceled;
  }
  return canceled;
}

void Requester::LeaveDrained() {
  std::lock_guard lock(mu_);
  sig_stopped_ = false;
  sig_reported_ = false;
}

}  // namespace softverbs::transport
