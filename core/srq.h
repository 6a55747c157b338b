// Shared receive queues (ibv_create_srq(3), ibv_modify_srq(3)). The SRQ number is unique across
// the host (XRC senders address an SRQ by it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "base/status.h"
#include "core/pd.h"
#include "core/xrcd.h"
#include "fabric/host/shared_arena.h"
#include "transport/qp_endpoint.h"
#include "transport/recv_queue.h"

namespace softverbs::core {

using transport::RecvQueue;

// ibv_srq_attr_mask
namespace srq_attr {
inline constexpr uint32_t kMaxWr = 1u << 0;
inline constexpr uint32_t kLimit = 1u << 1;
}  // namespace srq_attr

struct SrqAttributes {
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  uint32_t srq_limit = 0;
};

class Cq;

// ibv_srq_init_attr_ex.tm_cap
struct TmAttributes {
  uint32_t max_num_tags = 0;
  uint32_t max_ops = 0;
};

// One struct ibv_ops_wr (ibv_post_srq_ops(3)); the enum values are rdma-core's.
namespace srq_op {
inline constexpr uint32_t kTagAdd = 0, kTagDel = 1, kTagSync = 2;  // enum ibv_ops_wr_opcode
inline constexpr uint32_t kSignaled = 1u << 0, kTmSync = 1u << 1;  // enum ibv_ops_flags
}  // namespace srq_op
struct SrqOp {
  uint64_t wr_id = 0;
  uint32_t opcode = 0;
  uint32_t flags = 0;
  uint32_t unexpected_cnt = 0;
  uint32_t handle = 0;  // DEL
  uint64_t recv_wr_id = 0, tag = 0, mask = 0;  // ADD
  const transport::RecvSge* sge = nullptr;
  uint32_t num_sge = 0;
};

class Srq {
 public:
  // The ABI object wrapping this one (events name it to the application).
  void* user_handle() const { return user_handle_; }
  void set_user_handle(void* handle) { user_handle_ = handle; }

  // `attr` is updated to the actual values (>= the request).
  static Result<std::unique_ptr<Srq>> Create(Pd& pd, SrqAttributes& attr);
  // ibv_create_srq_ex with IBV_SRQT_XRC: an SRQ of XRC domain `xrcd` whose receives complete on
  // `cq` (IBA A14.4.2). XRC senders name it by its number, through any XRC_RECV QP of the same
  // domain, from any process: its receive side is published host-wide (receive_endpoint()).
  static Result<std::unique_ptr<Srq>> CreateXrc(Pd& pd, SrqAttributes& attr, Xrcd& xrcd, Cq& cq);
  // ibv_create_srq_ex with IBV_SRQT_TM: a tag matching SRQ whose list operations and tagged
  // receives complete on `cq`; its tag table is published beside its receive ring
  // (transport/tag_matcher.h) for senders of any process.
  static Result<std::unique_ptr<Srq>> CreateTm(Pd& pd, SrqAttributes& attr, Cq& cq, const TmAttributes& tm);
  ~Srq();

  bool is_tm() const { return tm_ref_.valid(); }
  // ibv_post_srq_ops(3), one operation: the `index`-th of its list. ADD returns the handle.
  Result<uint32_t> PostOp(const SrqOp& op, uint32_t index);

  Status Modify(const SrqAttributes& attr, uint32_t mask);
  SrqAttributes Query() const;
  uint32_t srq_num() const { return srqn_; }
  Pd& pd() const { return pd_; }
  UseCount& users() { return users_; }  // QPs receiving through it
  bool is_xrc() const { return xrcd_hold_ != nullptr; }
  // The shared receive ring senders take WQEs from.
  RecvQueue& queue() { return *queue_; }

 private:
  Srq(Pd& pd, const SrqAttributes& attr, uint32_t slot, std::unique_ptr<RecvQueue> queue)
      : pd_(pd), attr_(attr), slot_(slot), srqn_(slot + 1), queue_(std::move(queue)) {}
  static Result<std::unique_ptr<Srq>> Make(Pd& pd, SrqAttributes& attr);
  // XRC: fills and publishes the receive endpoint senders reach the SRQ through.
  void PublishXrc(Cq& cq);
  void WithdrawXrc();

  Pd& pd_;
  mutable std::mutex mu_;  // modify and query from several threads
  SrqAttributes attr_;     // max_wr and max_sge; the armed limit lives in the ring
  uint32_t slot_;
  uint32_t srqn_;
  std::unique_ptr<RecvQueue> queue_;
  UseCount users_;
  void* user_handle_ = nullptr;
  // XRC only: the domain's hold, the completion queue, and the receive endpoint (a
  // QpEndpoint in this process's arena: PD, CQ ring, receive ring, domain).
  std::shared_ptr<XrcdHold> xrcd_hold_;
  Cq* cq_ = nullptr;
  fabric::SharedRef endpoint_ref_{};
  // TM only: the tag table in this process's arena, and the list operation budget.
  fabric::SharedRef tm_ref_{};
  TmAttributes tm_{};
  std::mutex ops_mu_;  // ibv_post_srq_ops from several threads
};

}  // namespace softverbs::core
