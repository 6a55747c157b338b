// Completion queues and completion channels.
//
// A CQ is a bounded ring of Completions. Producers (the transport roles, next in the data path)
// Push(); the application polls. Arming (ibv_req_notify_cq) makes the next matching completion
// raise one event on the CQ's channel, whose fd becomes readable (ibv_get_cq_event(3)).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "base/event_fd.h"
#include "base/status.h"
#include "core/pd.h"

namespace softverbs::core {

class Context;
class Cq;

// One work completion, the core's ibv_wc. Field meanings and values are those of ibv_poll_cq(3).
struct Completion {
  uint64_t wr_id = 0;
  uint32_t status = 0;    // enum ibv_wc_status
  uint32_t opcode = 0;    // enum ibv_wc_opcode
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // network order, or the invalidated rkey
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;  // enum ibv_wc_flags
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  bool solicited = false;   // raises an event on a CQ armed solicited-only
  uint64_t timestamp_ns = 0;
};

class CompChannel {
 public:
  static Result<std::unique_ptr<CompChannel>> Create(Context& context);

  int fd() const { return fd_.fd(); }
  UseCount& users() { return users_; }  // CQs bound to it

  // Queues an event for `cq` and makes fd() readable.
  void Notify(Cq* cq);
  // ibv_get_cq_event: the CQ of the oldest event; blocks unless fd() is O_NONBLOCK.
  Result<Cq*> Wait();

 private:
  explicit CompChannel(EventFd fd) : fd_(std::move(fd)) {}
  EventFd fd_;
  std::mutex mu_;
  std::deque<Cq*> events_;
  UseCount users_;
};

class Cq {
 public:
  // The ABI object wrapping this one (events name it to the application).
  void* user_handle() const { return user_handle_; }
  void set_user_handle(void* handle) { user_handle_ = handle; }

  // ibv_create_cq(3): 1 <= cqe <= max_cqe, comp_vector < num_comp_vectors.
  static Result<std::unique_ptr<Cq>> Create(Context& context, int cqe, CompChannel* channel,
                                            int comp_vector);
  ~Cq();

  uint32_t handle() const { return handle_; }
  // The number of completions the CQ holds (>= what was asked: ibv_create_cq(3)).
  uint32_t capacity() const;
  CompChannel* channel() const { return channel_; }
  UseCount& users() { return users_; }  // QPs and SRQs that complete here

  // ibv_resize_cq(3): fails (EINVAL) if `cqe` is smaller than the completions held now.
  Status Resize(int cqe);

  // Adds a completion; false if the CQ is full (an overrun: the caller raises IBV_EVENT_CQ_ERR).
  bool Push(const Completion& c);
  // Moves up to `max` completions into `out`; returns how many.
  int Poll(Completion* out, int max);
  // Drops the completions of QP `qp_num` (the QP moved to RESET: ibv_modify_qp, IBA 10.3.1).
  void RemoveEntriesOf(uint32_t qp_num);

  // ibv_req_notify_cq(3).
  Status RequestNotify(bool solicited_only);

  // ibv_get_cq_event / ibv_ack_cq_events bookkeeping: ibv_destroy_cq waits for all acks.
  void CountEvent();
  void AckEvents(unsigned int n);
  void WaitForAcks();

 private:
  Cq(Context& context, uint32_t handle, uint32_t capacity, CompChannel* channel)
      : context_(context), handle_(handle), capacity_(capacity), channel_(channel) {}

  enum class Arm : uint8_t { kNone, kSolicited, kNext };

  Context& context_;
  const uint32_t handle_;
  mutable std::mutex mu_;
  uint32_t capacity_;
  std::deque<Completion> entries_;
  Arm arm_ = Arm::kNone;
  CompChannel* channel_;
  UseCount users_;
  std::condition_variable acked_cv_;
  uint64_t events_ = 0;
  uint64_t acked_ = 0;
  void* user_handle_ = nullptr;
};

}  // namespace softverbs::core
