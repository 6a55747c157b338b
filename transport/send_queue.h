// The requester role: a QP's send queue. ibv_post_send hands each work request here; it is
// executed at once, in the poster's thread, when nothing is queued before it (the initiator is
// the NIC). A request the target cannot take yet (RNR, or a target that does not answer) waits
// in the queue, with everything posted after it, until the progress thread retries it after the
// delay the QP's attributes imply (min_rnr_timer / timeout), at most rnr_retry / retry_cnt times.
// Every request completes exactly once: success, error, or flush.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "transport/completion.h"
#include "transport/responder.h"
#include "transport/target.h"
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
};

// The QP attributes the requester works with; the core refreshes them on every ibv_modify_qp.
struct RequesterConfig {
  uint32_t qp_num = 0;
  uint32_t type = 0;          // enum ibv_qp_type
  uint32_t source_qpn = 0;    // UD with IBV_QP_CREATE_SOURCE_QPN: the QPN its sends carry
  uint64_t pd = 0;            // host-unique PD id
  uint32_t process_slot = 0;  // this process (owner of the local keys)
  uint32_t dest_qp_num = 0;   // RC/UC
  uint32_t path_mtu = 4096;   // bytes
  uint32_t qkey = 0;          // UD: the QP's own Q_Key (used when a WR's has the high bit set)
  uint8_t timeout = 0;        // local ACK timeout exponent (0: wait forever)
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;      // 7: retry forever
  uint8_t max_rd_atomic = 0;  // RDMA READs / atomics this QP may have outstanding as initiator
  bool sq_sig_all = false;
  uint32_t max_send_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_inline = 0;
  bool block_self_mcast_lb = false;  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
  uint8_t sgid[16] = {};      // UD: the GRH source of sends (from the AH)
  bool dc_initiator = false;  // a DCI: each WR names its DCT (SendWr::dc)
};

class SendQueue {
 public:
  SendQueue(fabric::LocalProcess& local, RequesterHost& host);
  ~SendQueue();
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  void Configure(const RequesterConfig& config);

  // ibv_post_send of one WR in state `qp_state` (enum ibv_qp_state). A refusal (EINVAL, ENOMEM)
  // leaves the WR unposted; otherwise it completes later, exactly once.
  Status Post(const SendWr& wr, uint32_t qp_state);
  // The QP entered ERR: every queued WR completes with IBV_WC_WR_FLUSH_ERR, and WRs posted
  // from now on are flushed as they arrive (until Reset()).
  void Flush();
  // The QP returned to RESET: queued WRs are dropped without completions (IBA 10.3.1).
  void Reset();
  // The QP left SQE for RTS (ibv_modify_qp): WRs posted from now on execute again.
  void Resume();
  // Retries what is due; returns when it wants to run again (time_point::max(): never).
  std::chrono::steady_clock::time_point Progress();

 private:
  struct Pending {
    SendWr wr;
    std::vector<uint8_t> inline_copy;  // IBV_SEND_INLINE bytes, copied at post time
    uint32_t rnr_left = 0;
    uint32_t retries_left = 0;
    std::chrono::steady_clock::time_point due{};
  };
  enum class Step { kDone, kWait };

  Status Check(const SendWr& wr, uint32_t qp_state) const;
  // Appends `p` to the queue (under mu_), copying its inline bytes.
  void Enqueue(Pending&& p);
  // Runs the head of the queue once; kWait if it must be retried later.
  Step Execute(Pending& p);
  // A UMR (kDriver1): configures an indirect mkey of this process (transport/indirect_key.h).
  Step ExecuteUmr(const SendWr& wr);
  // BIND_MW / LOCAL_INV: changes a key of this process (transport/window_key.h).
  Step ExecuteLocalOp(const SendWr& wr);
  void Finish(const SendWr& wr, uint32_t status, uint64_t byte_len);
  void Fail(const SendWr& wr, uint32_t status);
  void RunQueue(std::unique_lock<std::mutex>& lock);
  // UD SEND to one target: the Q_Key rule, then the delivery with the GRH.
  Reply DeliverDatagram(const Target& target, const SendWr& wr, const iovec* local, size_t nl, uint64_t total,
                        MessageInfo& info);
  // UD SEND to a multicast GID: delivered to every QP attached to the group.
  void SendMulticast(const SendWr& wr, const iovec* local, size_t nl, uint64_t total);

  fabric::LocalProcess& local_;
  RequesterHost& host_;
  Responder responder_;
  std::mutex mu_;
  RequesterConfig config_;
  std::deque<Pending> queue_;
  bool error_ = false;
  PeerHint peer_hint_;
};

}  // namespace softverbs::transport
