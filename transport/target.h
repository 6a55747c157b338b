// The destination QP of an operation, as the initiator reaches it: its shared endpoint and the
// process that owns it (DESIGN.md section 5: the initiator does the responder's work).
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "transport/qp_endpoint.h"

namespace softverbs::transport {

class Target {
 public:
  // The QP numbered `qpn` on this host; ENOENT if there is none (never created, destroyed, or
  // its process died).
  static Result<Target> Find(fabric::LocalProcess& local, uint32_t qpn);

  QpEndpoint& endpoint() const { return *endpoint_; }
  uint32_t process_slot() const { return process_slot_; }
  bool is_self() const { return peer_ == nullptr; }
  // Copies into / out of the target process's memory.
  Status WriteV(const iovec* local, size_t nl, const iovec* remote, size_t nr) const;
  Status ReadV(const iovec* local, size_t nl, const iovec* remote, size_t nr) const;
  // The target's address of a block of its arena, in this process; nullptr if unreachable.
  void* Resolve(fabric::SharedRef ref) const;
  // Makes the target's eventfd `fd` readable (its completion channel).
  void Signal(int fd) const;
  bool IsAlive() const { return peer_ == nullptr || peer_->process().IsAlive(); }

 private:
  Target(fabric::LocalProcess& local, uint32_t slot, std::shared_ptr<fabric::Peer> peer, QpEndpoint* e)
      : local_(&local), process_slot_(slot), peer_(std::move(peer)), endpoint_(e) {}
  fabric::LocalProcess* local_;
  uint32_t process_slot_;
  std::shared_ptr<fabric::Peer> peer_;  // null: the target is in this process
  QpEndpoint* endpoint_;
};

}  // namespace softverbs::transport
