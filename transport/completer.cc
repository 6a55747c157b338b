#include "transport/completer.h"

#include <algorithm>

#include "transport/codes.h"
#include "transport/rendezvous.h"

namespace softverbs::transport {
namespace {

using qp_type::kRc;

// IBA 9.7.5.2.8 table 45: the RNR timer codes, in microseconds (code 0 is the longest).
constexpr uint32_t kRnrDelayUs[32] = {655360, 10,    20,    30,    40,    60,    80,    120,
                                      160,    240,   320,   480,   640,   960,   1280,  1920,
                                      2560,   3840,  5120,  7680,  10240, 15360, 20480, 30720,
                                      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

uint32_t WcOpcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: return wc_opcode::kRdmaWrite;
    case WrOpcode::kRdmaRead: return wc_opcode::kRdmaRead;
    case WrOpcode::kAtomicCmpSwp: return wc_opcode::kCompSwap;
    case WrOpcode::kAtomicFetchAdd: return wc_opcode::kFetchAdd;
    case WrOpcode::kAtomicWrite: return wc_opcode::kAtomicWrite;
    case WrOpcode::kBindMw: return wc_opcode::kBindMw;
    case WrOpcode::kLocalInv: return wc_opcode::kLocalInv;
    case WrOpcode::kDriver1: return wc_opcode::kDriver1;  // MLX5DV_WC_UMR (mlx5dv_wr_post(3))
    default: return wc_opcode::kSend;
  }
}

}  // namespace

Completer::Clock::duration AckTimeout(uint8_t timeout) {
  if (timeout == 0) return std::chrono::seconds(1);
  return std::chrono::nanoseconds(static_cast<int64_t>(4096.0 * static_cast<double>(1ull << std::min<uint8_t>(timeout, 31))));
}

Completer::Clock::duration RnrDelay(uint8_t code) { return std::chrono::microseconds(kRnrDelayUs[code & 31]); }

Completer::Verdict Completer::OnOtherReply(const SendWr& wr, RetryState& retry, const Reply& reply,
                                           uint64_t byte_len) {
  ReplyCode code = reply.code;
  // UC and UD have no acknowledgements (IBA 9.8.3, 9.6.3): whatever the responder found, the
  // requester only knows it sent the message.
  if (config_.type != kRc && code != ReplyCode::kPending) code = ReplyCode::kAck;
  switch (code) {
    case ReplyCode::kAck:
    case ReplyCode::kDropped:
      Finish(wr, wc_status::kSuccess, byte_len);
      return {};
    case ReplyCode::kRnr:
      // IBA 9.7.5.2.8: wait the responder's RNR delay, at most rnr_retry times (7: forever).
      if (config_.rnr_retry != 7 && retry.rnr_left == 0) return Fail(wr, wc_status::kRnrRetryExcErr);
      if (config_.rnr_retry != 7) --retry.rnr_left;
      return {Verdict::kRetry, Clock::now() + RnrDelay(reply.rnr_timer)};
    case ReplyCode::kNoAnswer:
      // IBA 9.7.6.1.3: no answer; the local ACK timeout runs before anything is decided.
      retry.awaiting_timeout = true;
      return {Verdict::kRetry, Clock::now() + AckTimeout(config_.timeout)};
    case ReplyCode::kSequenceError:
      // IBA 9.7.5.2.1: the responder missed a packet; the requester resends from this message
      // at once, and the retry counts against retry_cnt as a timeout does (rxe's ERROR_RETRY).
      // retry_cnt bounds attempts without progress: one that got further than the last starts
      // the count again (rxe resets its counters on every response that advances).
      if (reply.progress) retry.timeouts = 0;
      if (++retry.timeouts > config_.retry_cnt) return Fail(wr, wc_status::kRetryExcErr);
      return {Verdict::kRetry, Clock::now()};
    case ReplyCode::kPending:  // not a reply yet: the link reports it later
    case ReplyCode::kPartial:  // part of the message acknowledged: the rest is still to come
      return {Verdict::kInFlight};
    case ReplyCode::kRemoteAccess:
      return Fail(wr, wc_status::kRemAccessErr);
    case ReplyCode::kInvalidRequest:
      return Fail(wr, wc_status::kRemInvReqErr);
    case ReplyCode::kRemoteOp:
      return Fail(wr, wc_status::kRemOpErr);
  }
  return {};
}

Completer::Verdict Completer::OnTimeout(const SendWr& wr, RetryState& retry) {
  retry.awaiting_timeout = false;
  // IBA 9.7.6.1.3: the request is sent once and retried retry_cnt times, each attempt waiting
  // one timeout: the error comes when the (retry_cnt + 1)-th timeout expires. timeout 0 is an
  // infinite timeout: never. An armed alternate path takes over instead (IBA 17.2.8).
  if (config_.timeout != 0 && ++retry.timeouts > config_.retry_cnt) {
    if (config_.alt.armed) return Migrate(retry);
    return Fail(wr, wc_status::kRetryExcErr);
  }
  return {Verdict::kRetry, Clock::now()};
}

Completer::Verdict Completer::Migrate(RetryState& retry) {
  // IBA 17.2.8: the QP moves to the alternate path and retransmits there what the primary path
  // did not deliver; the retry budget starts again with the alternate path's timeout. The
  // alternate is used once: the consumer re-arms (REARM) with a path of its choice.
  retry.timeouts = 0;
  config_.timeout = config_.alt.timeout;
  config_.alt.armed = false;
  ++migrations_;
  host_.PathMigrated();
  Verdict v{Verdict::kRetry, Clock::now()};
  v.migrated = true;
  return v;
}

void Completer::Complete(const SendWr& wr, uint32_t status, uint64_t byte_len) {
  if (wr.internal) {  // the QP's own work (transport/rendezvous.h): not the application's completion
    if (std::optional<SendWr> next = wr.internal->Finished(status)) follow_ups_.push_back(std::move(*next));
    return;
  }
  // (An unsignaled success never gets here: Finish returned.)
  CompleteAs(wr.wr_id, wr.opcode, status, byte_len);
}

void Completer::CompleteAs(uint64_t wr_id, WrOpcode opcode, uint32_t status, uint64_t byte_len) {
  Completion c;
  c.wr_id = wr_id;
  c.status = status;
  c.opcode = WcOpcode(opcode);
  c.byte_len = static_cast<uint32_t>(byte_len);
  c.qp_num = config_.qp_num;
  host_.Complete(c);
}

Completer::Verdict Completer::Fail(const SendWr& wr, uint32_t status) {
  // mlx5dv_dci_stream_id_reset(3): a stream-related error flushes only that stream's work
  // requests; the DCI stays in RTS until 2^log_num_errored streams are in error.
  if (wr.dc.set && streams_.enabled() && streams_.OnError(wr.dc.stream_id) == DciStreams::Outcome::kStreamError) {
    Finish(wr, status, 0);
    return {Verdict::kStreamFailed};
  }
  // IBA 10.8.3: a completion in error stops the send queue and what follows is flushed; the QP
  // enters ERR (RC) or SQE (UC, UD: IBA 10.3.1, their receive queue goes on). The state change
  // is announced before the completion is written, so whoever polls it sees the QP's new state.
  if (config_.type == kRc)
    host_.EnterError();
  else
    host_.EnterSendQueueError();
  Finish(wr, status, 0);
  return {Verdict::kFailed};
}

}  // namespace softverbs::transport
