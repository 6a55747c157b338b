// The completer role (IBA 9.7.6 / 10.8.3): turns the responder's Reply to a work request into
// its completion, or into a retry after the delay the QP's attributes give (RNR: min_rnr_timer
// and rnr_retry; no answer: the local ACK timeout and retry_cnt), and decides when a completion
// error takes the QP out of RTS. It writes completions and reports state changes through
// RequesterHost; what the requester must do next comes back as a typed Verdict.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/status.h"
#include "transport/completion.h"
#include "transport/dci_streams.h"
#include "transport/request.h"
#include "transport/work_request.h"

namespace softverbs::transport {

// Where the send queue's completions go (the QP's send CQ) and how it reports that a completion
// error other than a flush took the QP out of RTS (IBA 10.8.3): RC enters ERR; UC and UD enter
// SQE, whose receive queue keeps working (IBA 10.3.1).
class RequesterHost {
 public:
  virtual ~RequesterHost() = default;
  virtual void Complete(const Completion& c) = 0;
  virtual void EnterError() = 0;
  virtual void EnterSendQueueError() = 0;
  // The requester moved to the alternate path (IBA 17.2.8): the QP is MIGRATED and raises
  // IBV_EVENT_PATH_MIG. Called from the requester (its lock held): it must not call back.
  virtual void PathMigrated() {}
  // Signature pipelining (MLX5DV_QP_CREATE_SIG_PIPELINING): a signature check failed and the
  // send queue stopped behind that work request, nothing of it in flight: the QP enters SQD and
  // raises IBV_EVENT_SQ_DRAINED. Called under the requester's lock: it must not call back.
  virtual void SendQueueDrained() {}
};

// The alternate path of a QP armed for automatic path migration (IBA 17.2.8,
// core/path_migration.h): where the requester's messages go once the primary path failed.
struct AlternatePath {
  bool armed = false;        // path_mig_state ARMED
  Addressing av;             // alt_ah_attr's GIDs and GRH fields
  bool dest_on_host = false; // av.dgid is one of this host's GIDs
  uint8_t timeout = 0;       // alt_timeout
};

// The attributes the completer applies (from ibv_modify_qp).
struct CompleterConfig {
  uint32_t qp_num = 0;
  uint32_t type = 0;      // enum ibv_qp_type of the transport (DC: RC)
  uint8_t timeout = 0;    // local ACK timeout exponent (0: wait forever)
  uint8_t retry_cnt = 0;  // retries after a timeout (IBA 9.7.6.1.3)
  uint8_t rnr_retry = 0;  // retries after an RNR NAK (7: forever)
  bool sq_sig_all = false;
  AlternatePath alt;
  uint32_t migrations = 0;  // automatic migrations the QP has taken in (Completer::migrations)
  DciStreamsConfig dci_streams;  // a DCI created with streams (transport/dci_streams.h)
};

// A work request's retry budget, kept with it while it waits.
struct RetryState {
  uint32_t rnr_left = 0;
  uint32_t timeouts = 0;  // local ACK timeouts that have expired
  bool awaiting_timeout = false;  // the last attempt got no answer: its timeout is running
};

class Completer {
 public:
  using Clock = std::chrono::steady_clock;

  // What the requester does with the work request next.
  struct Verdict {
    // kInFlight: carried, the reply comes later (ReplyCode::kPending). kStreamFailed: completed
    // in error, which stopped only its DCI stream: the send queue goes on (dci_streams.h).
    enum Kind { kCompleted, kRetry, kFailed, kInFlight, kStreamFailed } kind = kCompleted;
    Clock::time_point retry_at{};  // kRetry
    bool migrated = false;  // kRetry on the alternate path: the old config().alt is the path now
  };

  explicit Completer(RequesterHost& host) : host_(host) {}
  void Configure(const CompleterConfig& config) {
    config_ = config;
    streams_.Configure(config.dci_streams);
  }
  const CompleterConfig& config() const { return config_; }

  // A fresh budget for a work request about to be attempted the first time.
  RetryState Budget() const { return RetryState{config_.rnr_retry, 0, false}; }
  // The reply to an attempt of `wr`; `byte_len` is what a successful completion reports. An
  // ACK (nearly every reply) completes it here, inline.
  Verdict OnReply(const SendWr& wr, RetryState& retry, const Reply& reply, uint64_t byte_len) {
    if (reply.code != ReplyCode::kAck) return OnOtherReply(wr, retry, reply, byte_len);
    Finish(wr, wc_status::kSuccess, byte_len);
    return {};
  }
  // `wr` is due again after a local ACK timeout: kFailed (IBV_WC_RETRY_EXC_ERR) when it was the
  // last the retry count allows, otherwise kRetry now (IBA 9.7.6.1.3). With an armed alternate
  // path, the last one migrates instead (IBA 17.2.8): kRetry now with `migrated`, a fresh retry
  // count and the alternate's timeout; the alternate is disarmed.
  Verdict OnTimeout(const SendWr& wr, RetryState& retry);
  // Automatic path migrations so far (a QP's config says how many it has seen).
  uint32_t migrations() const { return migrations_; }

  // Completes `wr` (unsignaled successes produce nothing: ibv_post_send(3), sq_sig_all; that
  // test is inline, no completion is built for them).
  void Finish(const SendWr& wr, uint32_t status, uint64_t byte_len) {
    if (status == wc_status::kSuccess && !(wr.flags & send_flag::kSignaled) && !config_.sq_sig_all && !wr.internal)
      return;
    Complete(wr, status, byte_len);
  }
  // Finish of a successful work request of the requester's lane (never internal, never
  // a DCI's): `opcode` is its WrOpcode, `flags` its send_flag bits.
  void FinishOnLane(uint64_t wr_id, WrOpcode opcode, uint32_t flags, uint64_t byte_len) {
    if (!(flags & send_flag::kSignaled) && !config_.sq_sig_all) return;
    CompleteAs(wr_id, opcode, wc_status::kSuccess, byte_len);
  }
  // Completes `wr` in error and takes the QP out of RTS (IBA 10.8.3): kFailed. On a DCI with
  // streams, only the WR's stream enters error (kStreamFailed) until 2^log_num_errored have.
  Verdict Fail(const SendWr& wr, uint32_t status);
  // `wr` belongs to a DCI stream in error: it is flushed, not executed.
  bool StreamStopped(const SendWr& wr) const { return wr.dc.set && streams_.InError(wr.dc.stream_id); }
  // mlx5dv_dci_stream_id_reset(3) (EINVAL: no streams, or the stream is not in error).
  Status ResetStream(uint16_t stream) { return streams_.Reset(stream); }
  // The QP went back to RESET: its streams serve again.
  void ClearStreams() { streams_.Clear(); }
  // Completes `wr` with IBV_WC_WR_FLUSH_ERR (IBA 10.8.3.1).
  void Flush(const SendWr& wr) { Finish(wr, wc_status::kWrFlushErr, 0); }
  // The work requests internal ones asked to post after them (SendWr::internal): taken by the
  // requester, which queues them.
  std::vector<SendWr> TakeFollowUps() { return std::exchange(follow_ups_, {}); }
  bool HasFollowUps() const { return !follow_ups_.empty(); }

 private:
  // OnReply of anything but an ACK (and of a UC or UD reply, which completes as one).
  Verdict OnOtherReply(const SendWr& wr, RetryState& retry, const Reply& reply, uint64_t byte_len);
  // Finish of a work request that produces something: its completion, or its internal work's.
  void Complete(const SendWr& wr, uint32_t status, uint64_t byte_len);
  // The application's completion of work request `wr_id` (the send CQ's, through the host).
  void CompleteAs(uint64_t wr_id, WrOpcode opcode, uint32_t status, uint64_t byte_len);
  // The primary path failed with the alternate armed (IBA 17.2.8).
  Verdict Migrate(RetryState& retry);

  RequesterHost& host_;
  CompleterConfig config_;
  uint32_t migrations_ = 0;
  DciStreams streams_;
  std::vector<SendWr> follow_ups_;
};

// IBA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout; 0 means "wait forever", which
// is retried once a second here.
Completer::Clock::duration AckTimeout(uint8_t timeout);
// IBA 9.7.5.2.8 table 45: the RNR delay of timer code `code`.
Completer::Clock::duration RnrDelay(uint8_t code);

}  // namespace softverbs::transport
