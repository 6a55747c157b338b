// The Ethernet side of an IBV_QPT_RAW_PACKET QP (issue 14): its sends are whole frames on the
// port's interface and its receives are the frames that flow rules steer to it
// (transport/raw/). Owned by its core::Qp, which keeps the state machine, the queues and the
// CQs; this holds the port and turns frames into work completions.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "core/pd.h"
#include "core/types.h"
#include "transport/raw/paced_send_queue.h"
#include "transport/raw/raw_port.h"
#include "transport/raw/raw_receive.h"
#include "transport/raw/raw_send.h"

namespace softverbs::core {

class Context;
class Flow;
class Qp;
class RwqIndTable;
struct QpInitAttributes;

class RawQp final : public transport::raw::RawSink {
 public:
  // Opens this process's port on the interface owning the GIDs: EPERM without CAP_NET_RAW in
  // the QP's network namespace (as the kernel requires of raw QPs on mlx5), ENODEV without one.
  static Result<std::unique_ptr<RawQp>> Open(Context& context, const QpInitAttributes& init);
  ~RawQp() override;

  // Called once the QP exists: its number and the QP the frames complete on.
  void Attach(Qp* qp, uint32_t qpn);
  // ibv_post_send of one WR in `state` (sends from RTS on; flushed in ERR).
  Status PostSend(const transport::SendWr& wr, QpState state);
  // Sends what PostSend queued (one sendmmsg for a whole ibv_post_send list).
  void Flush();
  // IBV_QP_RATE_LIMIT (ibv_modify_qp_rate_limit(3)): with a rate, frames wait for the token
  // bucket and each WR completes when its frames have left (transport/raw/paced_send_queue.h).
  // `burst_bytes` 0: one frame of the port's largest.
  void SetRate(uint32_t rate_kbps, uint32_t burst_bytes);
  // The QP entered ERR: the WRs still waiting for the bucket complete with a flush error.
  void FlushPaced();
  // The QP entered RESET: they are dropped.
  void DropPaced();

  // ibv_post_recv posted WQEs: frames waiting in the receive buffer take them now.
  void DrainBacklog();

  // Flow rules (core/flow.h) steering to this QP: ibv_destroy_qp refuses while any remain.
  transport::raw::RawPort& port() { return *port_; }
  void AddFlow(Flow* flow);
  // False if this QP no longer holds `flow` (its context's close detached it already).
  bool RemoveFlow(Flow* flow);
  size_t flow_count() const;

  // The QP's context is closed while the QP lives (ibv_close_device without ibv_destroy_qp, as
  // after an EBUSY refusal). The kernel's uverbs then destroys every object of the file itself,
  // flows before QPs; here the QP stops acting: DetachFlows takes its rules off the port (no
  // frame reaches it after this), then Close stops the paced send queue as a destroy does
  // (StopPaced: nothing completes) and lets go of the port. Context::~Context calls both, all
  // flows first.
  void DetachFlows();
  void Close();

  // transport::raw::RawSink: a steered frame (the port's thread, or a sender's loopback).
  void OnFrame(std::span<const uint8_t> frame, const fabric::raw::FrameView& view,
               const transport::raw::FlowMark& mark) override;
  // The transport domain is the device context, as mlx5 allocates one per context.
  const void* domain() const override { return &context_; }
  bool AllowsSelfLoopback(bool multicast) const override {
    return multicast ? allow_self_loopback_mc_ : allow_self_loopback_uc_;
  }

 private:
  RawQp(Context& context, std::shared_ptr<transport::raw::RawPort> port, const QpInitAttributes& init);
  void Complete(const transport::SendWr& wr, uint32_t status);
  // With a rate: builds `wr`'s frames and hands them to paced_ (under send_mu_).
  Status PostPaced(const transport::SendWr& wr, bool tso);
  void CompletePaced(const transport::raw::PacedSendQueue::Wr& wr, uint32_t status);
  // Hands pending_ to the port (under send_mu_); nothing once Close let go of the port.
  void SendPendingLocked();
  // Destroy or context close: what waits for the rate may leave for kDestroyGrace, then the
  // queue's thread stops.
  void StopPaced(std::unique_ptr<transport::raw::PacedSendQueue> paced);
  static constexpr std::chrono::milliseconds kDestroyGrace{50};
  // IBV_WR_TSO: the segments of `wr` into pending_ (under send_mu_); a wc status.
  uint32_t BuildSegments(const transport::SendWr& wr);
  // Places one frame in the next WQE (under rx_mu_); false if none is posted.
  bool Deliver(std::span<const uint8_t> frame, const fabric::raw::FrameView& view,
               const transport::raw::FlowMark& mark);

  // The port's receive buffer: frames that found no WQE wait here, in order, for the next
  // ibv_post_recv, as a NIC's buffer with link-level flow control holds them instead of
  // dropping. Beyond kMaxBacklog frames it drops (out_of_buffer).
  static constexpr size_t kMaxBacklog = 4096;
  struct Held {
    std::vector<uint8_t> frame;
    transport::raw::FlowMark mark;
  };

  Context& context_;
  std::shared_ptr<transport::raw::RawPort> port_;
  Qp* qp_ = nullptr;
  transport::raw::RawSendConfig send_;
  transport::raw::RawReceiveConfig receive_;
  bool sq_sig_all_ = false;
  std::mutex send_mu_;
  std::vector<std::vector<uint8_t>> pending_;  // built frames not yet handed to the socket
  // Made by the first rate (a thread of its own); a WR goes through it while it is limited or
  // still holds WRs, so sends never overtake each other.
  std::unique_ptr<transport::raw::PacedSendQueue> paced_;
  std::atomic<bool> destroying_{false};  // no more completions (StopPaced)
  mutable std::mutex flows_mu_;
  std::vector<Flow*> flows_;
  std::mutex rx_mu_;
  std::deque<Held> backlog_;
  // An RSS QP: the table whose WQs receive, and the hash that picks one.
  RwqIndTable* ind_table_ = nullptr;
  std::vector<uint8_t> hash_key_;
  uint64_t hash_fields_ = 0;
  uint16_t max_tso_header_ = 0;  // ibv_qp_init_attr_ex.max_tso_header
  // MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC / _MC
  bool allow_self_loopback_uc_ = false, allow_self_loopback_mc_ = false;
};

}  // namespace softverbs::core
