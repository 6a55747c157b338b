// A device context (ibv_open_device): the host registry, a GID table snapshot and the async
// event queue with its pollable fd.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "base/event_fd.h"
#include "base/status.h"
#include "core/device.h"
#include "core/object_space.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/host_registry.h"

namespace softverbs::core {

class Qp;
class Srq;
class OpenedQp;

// enum ibv_event_type values the core raises.
inline constexpr uint32_t kEventCqErr = 0;
inline constexpr uint32_t kEventQpFatal = 1;
inline constexpr uint32_t kEventQpAccessErr = 3;
inline constexpr uint32_t kEventSqDrained = 5;
inline constexpr uint32_t kEventPathMig = 6;
inline constexpr uint32_t kEventPortActive = 9;
inline constexpr uint32_t kEventSrqLimitReached = 15;
inline constexpr uint32_t kEventQpLastWqeReached = 16;

// What ibv_get_async_event returns, in the core's terms. `handle` is the ABI object the event is
// about (its ibv_qp / ibv_cq / ibv_srq), set by abi/ when it created the object.
struct AsyncEvent {
  enum class Subject : uint8_t { kQp, kCq, kSrq, kPort, kDevice };
  uint32_t type = 0;  // enum ibv_event_type value
  Subject subject = Subject::kDevice;
  void* handle = nullptr;
  uint32_t port = 0;
};

class Context {
 public:
  // ibv_open_device: a new object space (its cmd_fd); ibv_import_device: `space`, shared with
  // the contexts already on it (core/object_space.h).
  static Result<std::unique_ptr<Context>> Open(std::shared_ptr<ObjectSpace> space = nullptr);
  // ibv_close_device. Objects the application did not destroy stop acting on their own before
  // the context goes (the kernel's uverbs destroys every object of a closed file, flows before
  // QPs): no flow rule steers to a raw QP of this context after this, and no paced send queue
  // sends or completes (core/raw_qp.h).
  ~Context();

  fabric::HostRegistry& registry() { return local_->registry(); }
  // This process's membership of the host: its process slot, shared arena and peers.
  fabric::LocalProcess& local() { return *local_; }
  // The GID table, re-read when the snapshot is older than a second (addresses may change).
  GidTable gids();

  int async_fd() const { return async_fd_.fd(); }
  uint64_t async_tag() const { return async_tag_; }
  void PostAsyncEvent(const AsyncEvent& event);
  // Blocks (unless async_fd is O_NONBLOCK) until an event is queued.
  Result<AsyncEvent> GetAsyncEvent();
  // Forgets the undelivered events about `handle` (the object is being destroyed).
  void DropAsyncEventsFor(const void* handle);

  // The QPs and SRQs whose events peers may raise (a sender in another process crossing an SRQ
  // limit, or failing a QP): GetAsyncEvent collects them when async_fd is signalled.
  void Register(Qp* qp);
  void Unregister(Qp* qp);
  void Register(Srq* srq);
  void Unregister(Srq* srq);
  void Register(OpenedQp* qp);  // ibv_open_qp handles (core/xrc_qp.h)
  void Unregister(OpenedQp* qp);
  // A QP of this context has QP number `qp_num` (mlx5dv_map_ah_to_qp names its QP by number).
  bool HasQp(uint32_t qp_num);

  // Numbers for objects that have no host-wide number (PD, CQ, AH handles), unique in the
  // context's object space as the kernel's per-file handles are.
  uint32_t NewHandle() { return space_->NewHandle(); }
  ObjectSpace& object_space() { return *space_; }
  std::shared_ptr<ObjectSpace> shared_object_space() { return space_; }

 private:
  Context(fabric::LocalProcess* local, EventFd async_fd) : local_(local), async_fd_(std::move(async_fd)) {}

  fabric::LocalProcess* local_;
  std::mutex gid_mu_;
  GidTable gids_;
  std::chrono::steady_clock::time_point gids_read_{};
  EventFd async_fd_;
  uint64_t async_tag_ = 0;
  std::mutex async_mu_;
  std::deque<AsyncEvent> async_events_;
  std::mutex objects_mu_;
  std::vector<Qp*> qps_;
  std::vector<Srq*> srqs_;
  std::vector<OpenedQp*> opened_qps_;
  // Turns flags raised by peers into queued events.
  void CollectRemoteEvents();
  std::shared_ptr<ObjectSpace> space_;
};

}  // namespace softverbs::core
