#include "transport/host/host_target.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "base/event_fd.h"
#include "base/log.h"
#include "fabric/host/fault_guard.h"
#include "fabric/host/token_lock.h"
#include "transport/host/mapped_copy.h"
#include "transport/indirect_key.h"

namespace softverbs::transport {

HostTarget::Hold HostTarget::Pin(fabric::LocalProcess& local, QpEndpoint* e, uint32_t qpn, bool qp) {
  // Hold first, then check: the owner clears qp_num (a full barrier) before it waits for the
  // holds to drain, so either this sees the number gone or the owner sees the hold. An
  // announcement is a store to this thread's own line; a pin is a compare-and-swap on a line
  // every sender to the QP shares. A pin is counted per process, so one of a process that dies
  // here is dropped by the owner at once instead of stalling ibv_destroy_qp (issue 17 item 5);
  // an announcement of a dead process likewise.
  if (fabric::HazardLine* line = qp ? fabric::ThisThreadHazards(local) : nullptr) {
    if (std::atomic<uint32_t>* entry = fabric::Announce(*line, fabric::QpHazardValue(qpn))) {
      if (std::atomic_ref<uint32_t>(e->qp_num).load(std::memory_order_seq_cst) == qpn) return {nullptr, entry};
      fabric::Retract(entry);
      return {};
    }
  }
  std::atomic<uint64_t>* word = fabric::Pin(local.registry(), e->users, local.pinner_id());
  if (std::atomic_ref<uint32_t>(e->qp_num).load(std::memory_order_seq_cst) == qpn) return {word, nullptr};
  fabric::Unpin(word, local.pinner_id());
  return {};
}

std::unique_ptr<TargetQp> HostTarget::Requester(uint32_t qpn) const {
  auto found = Find(*local_, qpn);
  if (!found.ok()) return nullptr;
  return std::make_unique<HostTarget>(std::move(found.value()));
}

Result<HostTarget> HostTarget::Find(fabric::LocalProcess& local, uint32_t qpn, PeerHint* hint) {
  // The QP this link found last: its registry entry is where it was.
  if (hint != nullptr && hint->entry != nullptr && hint->qpn == qpn)
    return FindEntry(local, *hint->entry, qpn, hint, /*qp=*/true);
  fabric::HostRegistry& registry = local.registry();
  // QP numbers are host-table slots plus 0x100 (core::QpnOfSlot). A number from a peer beyond
  // the table's extent was never a QP, and reading its slot would allocate a page of the sparse
  // registry (docs/data-path.md, "Sized by use").
  if (qpn < 0x100 || qpn - 0x100 >= registry.qps().extent()) return Status(ENOENT, "no such QP number");
  fabric::QpEntry& entry = fabric::EntryOf<fabric::QpEntry>(registry.qps().slot(qpn - 0x100));
  auto found = FindEntry(local, entry, qpn, hint, /*qp=*/true);
  if (found.ok() && hint != nullptr && hint->qpn == qpn) hint->entry = &entry;
  return found;
}

Result<HostTarget> HostTarget::FindXrcSrq(fabric::LocalProcess& local, uint32_t srqn) {
  // SRQ numbers are SRQ-table slots plus 1 (core/srq.h); bounded by the extent as QP numbers.
  fabric::HostRegistry& registry = local.registry();
  if (srqn == 0 || srqn - 1 >= registry.srqs().extent()) return Status(ENOENT, "no such SRQ number");
  return FindEntry(local, fabric::EntryOf<fabric::QpEntry>(registry.srqs().slot(srqn - 1)), srqn, nullptr,
                   /*qp=*/false);
}

Result<HostTarget> HostTarget::FindEntry(fabric::LocalProcess& local, fabric::QpEntry& entry, uint32_t qpn,
                                         PeerHint* hint, bool qp) {
  fabric::HostRegistry& registry = local.registry();
  if (entry.qp_num.load(std::memory_order_acquire) != qpn) return Status(ENOENT, "no QP with that number");
  const uint32_t process_slot = entry.process_slot.load(std::memory_order_relaxed);
  const fabric::SharedRef block = entry.block;
  if (process_slot == local.slot()) {
    auto* e = static_cast<QpEndpoint*>(local.At(block));
    if (e == nullptr) return Status(ENOENT, "the QP's endpoint is unreachable");
    const Hold hold = Pin(local, e, qpn, qp);
    if (!hold) return Status(ENOENT, "no QP with that number");
    return HostTarget(local, process_slot, qpn, nullptr, nullptr, e, hold);
  }
  const uint64_t token = registry.processes().slot(process_slot).owner.load(std::memory_order_acquire);
  std::shared_ptr<fabric::Peer> owned;
  fabric::Peer* peer = nullptr;
  QpEndpoint* e = nullptr;
  if (hint != nullptr && hint->peer != nullptr && hint->token == token) {
    peer = hint->peer.get();
    // The same QP of the same process as last time: its block resolves to the same address.
    if (hint->qpn == qpn && hint->process_slot == process_slot && hint->block == block) e = hint->endpoint;
  } else {
    auto found = local.PeerAt(process_slot);
    if (!found.ok()) return Status(ENOENT, "the QP's process is gone: " + found.status().rule());
    owned = std::move(found.value());
    peer = owned.get();
    if (hint != nullptr) {
      *hint = PeerHint{};
      hint->token = token;
      hint->peer = owned;
    }
  }
  // A process that died keeps its registry entries until they are reclaimed, and its memory
  // mapped here stays writable (a shared-backed registration, a landing in its CQ ring): its
  // QPs must stop answering as a dead NIC peer's do (issue 17 items 2 and 3).
  if (!peer->AliveRecently()) return Status(ENOENT, "the QP's process died");
  if (e == nullptr) {
    auto at = peer->At(block, registry);
    if (!at.ok()) return Status(ENOENT, "the QP's endpoint is unreachable: " + at.status().rule());
    e = static_cast<QpEndpoint*>(at.value());
    if (hint != nullptr) {
      hint->entry = nullptr;  // (Find sets it once this lookup succeeds)
      hint->qpn = qpn;
      hint->process_slot = process_slot;
      hint->block = block;
      hint->endpoint = e;
    }
  }
  const Hold hold = Pin(local, e, qpn, qp);
  if (!hold) return Status(ENOENT, "no QP with that number");
  return HostTarget(local, process_slot, qpn, std::move(owned), peer, e, hold);
}

bool HostTarget::Revoked(const PinnedPieces& remote) const {
  if (std::atomic_ref<uint32_t>(endpoint_->qp_num).load(std::memory_order_acquire) != qpn_) return true;
  for (size_t i = 0; i < remote.pin_count(); ++i)
    if (remote.pin(i).Withdrawn(local_->registry())) return true;
  return false;
}

Status HostTarget::CopyV(bool write, const iovec* local, size_t nl, const iovec* remote, size_t nr) const {
  std::shared_ptr<fabric::Peer> self;
  fabric::Peer* peer = peer_;
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
  // Either way in bounded chunks, stopping when the access is revoked (mapped_copy.h).
  Status s = MoveBounded(write, local, nl, remote);
  // Cut short because the QP itself was destroyed meanwhile (not a key withdrawn): a destroyed
  // QP answers nothing, as packets to a QP that no longer exists are discarded (IBA 9.6.1.1);
  // the requester's retries end in RETRY_EXC_ERR, as with a NIC -- not a remote access error.
  if (s.code() == ECANCELED && std::atomic_ref<uint32_t>(endpoint_->qp_num).load(std::memory_order_acquire) != qpn_)
    return Status(ESRCH, "the target QP was destroyed while it was accessed: it answers nothing (IBA 9.6.1.1)");
  return s;
}

void HostTarget::ForgetFaulted(bool write, const Status& s, fabric::BackingMaps& maps, const fabric::BackingWindow* window,
                               const MappedPieces* mapped) const {
  // IBA 9.7.5.2.4-like: the target's memory is not there; the initiator gets an error
  // completion, never a SIGBUS (issue 17 item 9). Map the file again next time.
  SV_LOG(kError, "RDMA %s at qp 0x%x of pid %d: %s", write ? "write" : "read", qpn_, peer_->process().token().pid(),
         s.rule().c_str());
  if (window != nullptr) maps.Forget(window);
  if (mapped != nullptr) mapped->Forget(maps);
}

Status HostTarget::MoveBounded(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const {
  fabric::BackingMaps& maps = fabric::BackingMaps::ForThisProcess();
  // One chunk from one piece into one piece of a shared backing (most small accesses): copied
  // straight, under the SIGBUS guard only if the file can shrink. Asking whether the access was
  // revoked first would not change what may happen: a withdrawal waits for the holds this
  // access has until it ends, however it ends.
  if (nl == 1 && local[0].iov_len <= kCopyChunkBytes) {
    uint8_t* at = nullptr;
    if (fabric::BorrowedWindow w = MappedPieces::MapSingle(local_->registry(), maps, peer_, remote, &at);
        w && remote.data()[0].iov_len == local[0].iov_len) {
      if (!w.get()->can_shrink()) {
        if (write)
          memmove(at, local[0].iov_base, local[0].iov_len);
        else
          memmove(local[0].iov_base, at, local[0].iov_len);
        return Status::Ok();
      }
      const iovec mapped{at, local[0].iov_len};
      Status s = CopyMapped(write, local, 1, &mapped, 1, /*guarded=*/true);
      if (s.code() == EFAULT) ForgetFaulted(write, s, maps, w.get());
      return s;
    }
  }
  auto revoked = [this, &remote] { return Revoked(remote); };
  if (MappedPieces mapped; mapped.Map(local_->registry(), maps, peer_, remote)) {
    Status s = CopyBounded(local, nl, mapped.data(), mapped.size(),
                           [write, guarded = mapped.guarded()](const iovec* l, size_t ln, const iovec* m, size_t mn) {
                             return CopyMapped(write, l, ln, m, mn, guarded);
                           },
                           revoked);
    if (s.code() == EFAULT) ForgetFaulted(write, s, maps, nullptr, &mapped);
    return s;
  }
  return CopyBounded(local, nl, remote.data(), remote.size(),
                     [this, write](const iovec* l, size_t ln, const iovec* r, size_t rn) {
                       return CopyV(write, l, ln, r, rn);
                     },
                     revoked);
}

std::atomic<uint64_t>& HostTarget::AtomicStripe(fabric::LocalProcess& local, uint32_t process_slot, uint64_t va) {
  const uint64_t stripe = (static_cast<uint64_t>(process_slot) * 0x9E3779B97F4A7C15ull) ^ (va >> 3);
  return local.registry().atomic_stripe(static_cast<uint32_t>(stripe ^ (stripe >> 29)));
}

bool HostTarget::ApplyAtomicWordGuarded(uint64_t* at, uint64_t (*op)(uint64_t, const void*), const void* arg,
                                        uint64_t* before) {
  struct Rmw {
    uint64_t* word;
    uint64_t (*op)(uint64_t, const void*);
    const void* arg;
    uint64_t value;
  } rmw{at, op, arg, 0};
  auto apply = [](void* p) {
    auto& m = *static_cast<Rmw*>(p);
    m.value = CompareAndSwapWord(m.word, m.op, m.arg);
  };
  if (!fabric::RunGuarded(apply, &rmw)) return false;
  *before = rmw.value;
  return true;
}

Result<uint64_t> HostTarget::AtomicUpdate(const PinnedPieces& remote, uint64_t (*op)(uint64_t, const void*),
                                          const void* arg) const {
  // IBV_ATOMIC_HCA: atomic against every other atomic through softverbs on this host. The lock
  // stripe is chosen by (process, address) so all initiators meet on the same word, whichever
  // way they reach it: a process_vm read-modify-write (private memory not moved, an initiator
  // that cannot map the backing) and a CPU atomic through a mapping agree because both hold it.
  const uint64_t va = reinterpret_cast<uint64_t>(remote.data()[0].iov_base);
  fabric::TokenLock lock(AtomicStripe(*local_, process_slot_, va), local_->token());
  // The word through a mapping of the target's shared backing, if it has one (the same lock):
  // through this thread's last window when the word's key is one plain key (nearly always).
  fabric::BackingMaps& maps = fabric::BackingMaps::ForThisProcess();
  uint8_t* at = nullptr;
  bool guarded = false;
  std::optional<MappedPieces> mapped;
  fabric::BorrowedWindow single = MappedPieces::MapSingle(local_->registry(), maps, peer_, remote, &at);
  if (single) {
    guarded = single.get()->can_shrink();
  } else if (mapped.emplace(); mapped->Map(local_->registry(), maps, peer_, remote)) {
    at = static_cast<uint8_t*>(mapped->data()[0].iov_base);
    guarded = mapped->guarded();
  }
  if (at != nullptr) {
    uint64_t before = 0;
    if (ApplyAtomicWord(reinterpret_cast<uint64_t*>(at), op, arg, guarded, &before)) return before;
    if (single)
      maps.Forget(single.get());
    else
      mapped->Forget(maps);
    SV_LOG(kError, "atomic at qp 0x%x of pid %d: the owner's file no longer holds the word (truncated under the "
           "registration)", qpn_, peer_->process().token().pid());
    return Status(EFAULT, "the owner's file no longer holds the registered word");
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
  if (void* p = peer_->AtMapped(ref)) return p;
  auto at = peer_->At(ref, local_->registry());
  return at.ok() ? at.value() : nullptr;
}

void HostTarget::Signal(int fd, uint64_t tag) const {
  if (peer_ == nullptr) return EventFd::SignalFd(fd);
  auto mine = peer_->process().BorrowFd(fd, tag);
  if (mine.ok()) return EventFd::SignalFd(mine.value());
  // Said once per process: without pidfd_getfd a peer's eventfd cannot be reached (docs/install.md).
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    SV_LOG(kError, "completion channel of pid %d not woken: %s", peer_->process().token().pid(),
           mine.status().rule().c_str());
}

}  // namespace softverbs::transport
