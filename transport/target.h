// The destination QP of an operation, as the initiator reaches it: its shared endpoint and the
// process that owns it (DESIGN.md section 5: the initiator does the responder's work).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "transport/qp_endpoint.h"

namespace softverbs::transport {

// The process an initiator reached last, kept by its send queue: most work requests of a QP go
// to the same process, and this spares the process-cache lookup (DESIGN.md section 5's fast path).
struct PeerHint {
  uint64_t token = 0;  // the process slot owner's token the peer belongs to
  std::shared_ptr<fabric::Peer> peer;
};

class Target {
 public:
  Target(Target&& o) noexcept
      : local_(o.local_), process_slot_(o.process_slot_), peer_(std::move(o.peer_)),
        endpoint_(std::exchange(o.endpoint_, nullptr)) {}
  Target& operator=(Target&&) = delete;
  Target(const Target&) = delete;
  ~Target() { Release(); }

  // The QP numbered `qpn` on this host; ENOENT if there is none (never created, destroyed, or
  // its process died).
  static Result<Target> Find(fabric::LocalProcess& local, uint32_t qpn, PeerHint* hint = nullptr);

  QpEndpoint& endpoint() const { return *endpoint_; }
  uint32_t process_slot() const { return process_slot_; }
  bool is_self() const { return peer_ == nullptr; }
  // The target's process as this one reaches it; nullptr when it is this process.
  fabric::Peer* peer() const { return peer_.get(); }
  // Copies into / out of the target process's memory.
  Status WriteV(const iovec* local, size_t nl, const iovec* remote, size_t nr) const;
  Status ReadV(const iovec* local, size_t nl, const iovec* remote, size_t nr) const;
  // The target's address of a block of its arena, in this process; nullptr if unreachable.
  void* Resolve(fabric::SharedRef ref) const;
  // Makes the target's eventfd `fd` (incarnation `tag`) readable: its channel or async fd.
  void Signal(int fd, uint64_t tag) const;
  bool IsAlive() const { return peer_ == nullptr || peer_->process().IsAlive(); }

 private:
  Target(fabric::LocalProcess& local, uint32_t slot, std::shared_ptr<fabric::Peer> peer, QpEndpoint* e)
      : local_(&local), process_slot_(slot), peer_(std::move(peer)), endpoint_(e) {}
  void Release() {
    if (endpoint_ != nullptr) endpoint_->users.fetch_sub(1, std::memory_order_acq_rel);
    endpoint_ = nullptr;
  }
  // Pins `e` for the life of this Target; false if it no longer is QP `qpn`.
  static bool Pin(QpEndpoint* e, uint32_t qpn);
  fabric::LocalProcess* local_;
  uint32_t process_slot_;
  std::shared_ptr<fabric::Peer> peer_;  // null: the target is in this process
  QpEndpoint* endpoint_;
};

}  // namespace softverbs::transport
