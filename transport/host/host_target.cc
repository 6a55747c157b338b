#include "transport/host/host_target.h"

#include <atomic>

#include "base/event_fd.h"
#include "fabric/host/token_lock.h"
#include "transport/host/mapped_copy.h"
#include "transport/indirect_key.h"

namespace softverbs::transport {

bool HostTarget::Pin(QpEndpoint* e, uint32_t qpn) {
  // Pin first, then check: the owner clears qp_num before it waits for the pins to drain.
  e->users.fetch_add(1, std::memory_order_acq_rel);
  if (e->qp_num == qpn) return true;
  e->users.fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

Result<HostTarget> HostTarget::Find(fabric::LocalProcess& local, uint32_t qpn, PeerHint* hint) {
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
    return HostTarget(local, process_slot, nullptr, e);
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
  return HostTarget(local, process_slot, std::move(peer), e);
}

Status HostTarget::CopyV(bool write, const iovec* local, size_t nl, const iovec* remote, size_t nr) const {
  std::shared_ptr<fabric::Peer> self;
  fabric::Peer* peer = peer_.get();
  if (peer == nullptr) {
    auto found = local_->PeerAt(local_->slot());
    if (!found.ok()) return found.status();
    self = std::move(found.value());
    peer = self.get();
  }
  return write ? peer->process().WriteV(local, nl, remote, nr) : peer->process().ReadV(local, nl, remote, nr);
}

Status HostTarget::Move(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const {
  // memcpy through a mapping when the target's memory is a shared file it registered
  // (transport/host/mapped_copy.h), process_vm_writev/readv otherwise. The one place where bytes
  // of another process move.
  if (MappedPieces mapped; mapped.Map(local_->registry(), fabric::BackingMaps::ForThisProcess(), peer_.get(), remote)) {
    CopyMapped(write, local, nl, mapped.data(), mapped.size());
    return Status::Ok();
  }
  return CopyInChunks(local, nl, remote.data(), remote.size(),
                      [this, write](const iovec* l, size_t ln, const iovec* r, size_t rn) {
                        return CopyV(write, l, ln, r, rn);
                      });
}

Result<uint64_t> HostTarget::AtomicUpdate(const PinnedPieces& remote, uint64_t (*op)(uint64_t, const void*),
                                          const void* arg) const {
  // IBV_ATOMIC_HCA: atomic against every other atomic through softverbs on this host. The lock
  // stripe is chosen by (process, address) so all initiators meet on the same word.
  const uint64_t va = reinterpret_cast<uint64_t>(remote.data()[0].iov_base);
  const uint64_t stripe = (static_cast<uint64_t>(process_slot_) * 0x9E3779B97F4A7C15ull) ^ (va >> 3);
  fabric::TokenLock lock(local_->registry().atomic_stripe(static_cast<uint32_t>(stripe ^ (stripe >> 29))),
                         local_->token());
  // The word through a mapping of the target's shared backing, if it has one (the same lock).
  MappedPieces mapped;
  if (mapped.Map(local_->registry(), fabric::BackingMaps::ForThisProcess(), peer_.get(), remote)) {
    std::atomic_ref<uint64_t> word(*static_cast<uint64_t*>(mapped.data()[0].iov_base));
    const uint64_t value = word.load(std::memory_order_acquire);
    const uint64_t next = op(value, arg);
    if (next != value) word.store(next, std::memory_order_release);
    return value;
  }
  uint64_t value = 0;
  iovec mine{&value, 8};
  iovec theirs{reinterpret_cast<void*>(va), 8};
  SV_RETURN_IF_ERROR(CopyV(false, &mine, 1, &theirs, 1));
  uint64_t next = op(value, arg);
  if (next != value) {
    iovec out{&next, 8};
    SV_RETURN_IF_ERROR(CopyV(true, &out, 1, &theirs, 1));
  }
  return value;
}

void* HostTarget::Resolve(fabric::SharedRef ref) const {
  if (peer_ == nullptr) return local_->At(ref);
  auto at = peer_->At(ref, local_->registry());
  return at.ok() ? at.value() : nullptr;
}

void HostTarget::Signal(int fd, uint64_t tag) const {
  if (peer_ == nullptr) return EventFd::SignalFd(fd);
  auto mine = peer_->process().BorrowFd(fd, tag);
  if (mine.ok()) EventFd::SignalFd(mine.value());
}

}  // namespace softverbs::transport
