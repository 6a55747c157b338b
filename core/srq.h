// Shared receive queues (ibv_create_srq(3), ibv_modify_srq(3)). The SRQ number is unique across
// the host (XRC senders address an SRQ by it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "base/status.h"
#include "core/pd.h"
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

class Srq {
 public:
  // The ABI object wrapping this one (events name it to the application).
  void* user_handle() const { return user_handle_; }
  void set_user_handle(void* handle) { user_handle_ = handle; }

  // `attr` is updated to the actual values (>= the request).
  static Result<std::unique_ptr<Srq>> Create(Pd& pd, SrqAttributes& attr);
  ~Srq();

  Status Modify(const SrqAttributes& attr, uint32_t mask);
  SrqAttributes Query() const;
  uint32_t srq_num() const { return srqn_; }
  Pd& pd() const { return pd_; }
  UseCount& users() { return users_; }  // QPs receiving through it
  // The shared receive ring senders take WQEs from.
  RecvQueue& queue() { return *queue_; }

 private:
  Srq(Pd& pd, const SrqAttributes& attr, uint32_t slot, std::unique_ptr<RecvQueue> queue)
      : pd_(pd), attr_(attr), slot_(slot), srqn_(slot + 1), queue_(std::move(queue)) {}

  Pd& pd_;
  mutable std::mutex mu_;  // modify and query from several threads
  SrqAttributes attr_;     // max_wr and max_sge; the armed limit lives in the ring
  uint32_t slot_;
  uint32_t srqn_;
  std::unique_ptr<RecvQueue> queue_;
  UseCount users_;
  void* user_handle_ = nullptr;
};

}  // namespace softverbs::core
