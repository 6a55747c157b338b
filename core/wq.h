// Receive work queues (ibv_create_wq(3), ibv_modify_wq(3)) and RSS indirection tables
// (ibv_create_rwq_ind_table(3)): the receive side of an RSS RAW_PACKET QP. A WQ is a receive
// queue with its own CQ and state; a table lists 2^n WQs, and the Toeplitz hash of a frame picks
// one (core/raw_qp.h).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "core/cq.h"
#include "core/pd.h"
#include "fabric/raw/frame.h"
#include "transport/raw/flow_table.h"
#include "transport/recv_queue.h"

namespace softverbs::core {

class Context;

// enum ibv_wq_state
enum class WqState : uint32_t { kReset = 0, kReady = 1, kErr = 2, kUnknown = 3 };

// ibv_wq_attr_mask
namespace wq_attr {
inline constexpr uint32_t kState = 1u << 0;
inline constexpr uint32_t kCurState = 1u << 1;
inline constexpr uint32_t kFlags = 1u << 2;
}  // namespace wq_attr

class Wq {
 public:
  // IBV_WQT_RQ only; max_wr / max_sge within the device's limits (EINVAL otherwise).
  static Result<std::unique_ptr<Wq>> Create(Context& context, Pd* pd, Cq* cq, uint32_t wq_type, uint32_t max_wr,
                                            uint32_t max_sge, uint32_t create_flags);
  ~Wq();

  uint32_t wq_num() const { return wq_num_; }
  WqState state() const { return static_cast<WqState>(state_.load(std::memory_order_acquire)); }
  uint32_t max_wr() const { return max_wr_; }
  uint32_t max_sge() const { return max_sge_; }
  UseCount& users() { return users_; }  // indirection tables listing it

  // ibv_modify_wq(3): RESET <-> RDY, any -> ERR (flushing its WQEs), with cur_state checked.
  Status Modify(uint32_t mask, WqState state, WqState cur_state, uint32_t flags, uint32_t flags_mask);
  // ibv_post_wq_recv: from RESET and RDY (ERR: flushed at once).
  Status PostRecv(uint64_t wr_id, const transport::RecvSge* sge, uint32_t num_sge);
  // A frame the RSS hash gave this WQ (the port's thread): into its oldest WQE; dropped when it is
  // not RDY or has none. `tunnel_offloads`: the RSS QP's (its TIR's) MLX5DV_QP_CREATE_TUNNEL_OFFLOADS.
  void OnFrame(std::span<const uint8_t> frame, const fabric::raw::FrameView& view,
               const transport::raw::FlowMark& mark, bool tunnel_offloads);

 private:
  Wq(Context& context, Pd* pd, Cq* cq, std::unique_ptr<transport::RecvQueue> rq, uint32_t max_wr, uint32_t max_sge);
  void Flush();

  Context& context_;
  Pd* pd_;
  Cq* cq_;
  std::unique_ptr<transport::RecvQueue> rq_;
  const uint32_t max_wr_, max_sge_;
  const uint32_t wq_num_;
  std::atomic<uint32_t> state_{static_cast<uint32_t>(WqState::kReset)};
  UseCount users_;
};

// rss_caps.max_rwq_indirection_table_size: 2^8 entries.
inline constexpr uint32_t kMaxLogIndTableSize = 8;

class RwqIndTable {
 public:
  // ibv_create_rwq_ind_table(3): 2^log_size WQs of this context (EINVAL: a size above the cap,
  // a missing WQ).
  static Result<std::unique_ptr<RwqIndTable>> Create(uint32_t log_size, std::vector<Wq*> wqs);
  ~RwqIndTable();

  uint32_t number() const { return number_; }
  uint32_t size() const { return static_cast<uint32_t>(wqs_.size()); }
  Wq* at(uint32_t i) const { return wqs_[i & (size() - 1)]; }
  UseCount& users() { return users_; }  // RSS QPs using it

 private:
  RwqIndTable(std::vector<Wq*> wqs, uint32_t number) : wqs_(std::move(wqs)), number_(number) {}
  std::vector<Wq*> wqs_;
  uint32_t number_;
  UseCount users_;
};

}  // namespace softverbs::core
