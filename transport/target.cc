#include "transport/target.h"

#include "base/event_fd.h"

namespace softverbs::transport {

bool Target::Pin(QpEndpoint* e, uint32_t qpn) {
  // Pin first, then check: the owner clears qp_num before it waits for the pins to drain.
  e->users.fetch_add(1, std::memory_order_acq_rel);
  if (e->qp_num == qpn) return true;
  e->users.fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

Result<Target> Target::Find(fabric::LocalProcess& local, uint32_t qpn, PeerHint* hint) {
  fabric::HostRegistry& registry = local.registry();
  // QP numbers are host-table slots plus 0x100 (core::QpnOfSlot).
  if (qpn < 0x100 || qpn - 0x100 >= registry.qps().count()) return Status(ENOENT, "no such QP number");
  auto& slot = registry.qps().slot(qpn - 0x100);
  auto& entry = fabric::EntryOf<fabric::QpEntry>(slot);
  if (entry.qp_num.load(std::memory_order_acquire) != qpn) return Status(ENOENT, "no QP with that number");
  const uint32_t process_slot = entry.process_slot.load(std::memory_order_relaxed);
  const fabric::SharedRef block = entry.block;
  if (process_slot == local.slot()) {
    auto* e = static_cast<QpEndpoint*>(local.At(block));
    if (!Pin(e, qpn)) return Status(ENOENT, "no QP with that number");
    return Target(local, process_slot, nullptr, e);
  }
  std::shared_ptr<fabric::Peer> peer;
  const uint64_t token = registry.processes().slot(process_slot).owner.load(std::memory_order_acquire);
  if (hint != nullptr && hint->peer != nullptr && hint->token == token) {
    peer = hint->peer;
  } else {
    auto found = local.PeerAt(process_slot);
    if (!found.ok()) return Status(ENOENT, "the QP's process is gone: " + found.status().rule());
    peer = std::move(found.value());
    if (hint != nullptr) *hint = {token, peer};
  }
  auto at = peer->At(block, registry);
  if (!at.ok()) return Status(ENOENT, "the QP's endpoint is unreachable: " + at.status().rule());
  auto* e = static_cast<QpEndpoint*>(at.value());
  if (!Pin(e, qpn)) return Status(ENOENT, "no QP with that number");
  return Target(local, process_slot, std::move(peer), e);
}

Status Target::WriteV(const iovec* local, size_t nl, const iovec* remote, size_t nr) const {
  if (peer_ == nullptr) {
    auto self = local_->PeerAt(local_->slot());
    if (!self.ok()) return self.status();
    return (*self)->process().WriteV(local, nl, remote, nr);
  }
  return peer_->process().WriteV(local, nl, remote, nr);
}

Status Target::ReadV(const iovec* local, size_t nl, const iovec* remote, size_t nr) const {
  if (peer_ == nullptr) {
    auto self = local_->PeerAt(local_->slot());
    if (!self.ok()) return self.status();
    return (*self)->process().ReadV(local, nl, remote, nr);
  }
  return peer_->process().ReadV(local, nl, remote, nr);
}

void* Target::Resolve(fabric::SharedRef ref) const {
  if (peer_ == nullptr) return local_->At(ref);
  auto at = peer_->At(ref, local_->registry());
  return at.ok() ? at.value() : nullptr;
}

void Target::Signal(int fd, uint64_t tag) const {
  if (peer_ == nullptr) return EventFd::SignalFd(fd);
  auto mine = peer_->process().BorrowFd(fd, tag);
  if (mine.ok()) EventFd::SignalFd(mine.value());
}

}  // namespace softverbs::transport
