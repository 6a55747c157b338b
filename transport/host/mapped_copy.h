// The byte mover for registrations whose memory is already shared (fabric/host/shared_backing.h):
// when every piece of the target's memory an access touches lies in a key marked kSharedBacking,
// the initiator maps the owner's file (fabric/host/backing_maps.h) and copies with memcpy
// instead of process_vm_writev/readv. Keys are resolved, checked and pinned exactly as for any
// access (ResolveKey); only the way the bytes move changes, and the pins are held around it, so
// once ibv_dereg_mr returns no access through the key touches the memory.
//
// Every copy of the same-host fabric, mapped or not, is bounded (CopyBounded): it moves at most
// kCopyChunkBytes at a time and checks between chunks that it may go on (the keys it holds are
// still published, the target QP still exists). A withdrawal waits for the pins of live
// initiators however long they take (fabric/host/pin_line.h), so a stopped initiator can never
// write after ibv_dereg_mr returned; the chunks make a running one let go within one chunk
// (issue 17 item 1, docs/data-path.md "Guarantees"). Mapped copies run under a SIGBUS guard
// (fabric/host/fault_guard.h): a file the owner truncated is an error, not a crash.
#pragma once

#include <sys/uio.h>

#include <memory>
#include <vector>

#include "base/inlined_vector.h"
#include "fabric/host/backing_maps.h"
#include "fabric/host/host_registry.h"
#include "transport/indirect_key.h"

namespace softverbs::transport {

// SOFTVERBS_PEER_MAP=0 turns the mapped path off: every copy to another process goes through
// process_vm_writev/readv.
bool PeerMapEnabled();

// The target's pieces as this process reaches them through mappings of their backings.
class MappedPieces {
 public:
  // Translates every piece of `remote` (pinned by it, in `peer`'s process); false -- and nothing
  // to use -- if one is not in a shared-backed key of that process or its backing cannot be
  // mapped with certainty (the caller then uses process_vm_writev/readv). `peer` null: the
  // memory is this process's own, reached directly anyway.
  bool Map(fabric::HostRegistry& registry, fabric::BackingMaps& maps, fabric::Peer* peer, const PinnedPieces& remote);
  const iovec* data() const { return pieces_.data(); }
  size_t size() const { return pieces_.size(); }
  // The commonest shape, one piece of `remote` in one plain shared-backed key, through this
  // thread's last window (no reference taken): the piece's address in `*at`; an empty borrow
  // if `remote` is not that (then Map).
  static fabric::BorrowedWindow MapSingle(fabric::HostRegistry& registry, fabric::BackingMaps& maps,
                                          fabric::Peer* peer, const PinnedPieces& remote, uint8_t** at);
  // Drops this access's windows from `maps` (a copy through them faulted: the file shrank).
  void Forget(fabric::BackingMaps& maps) const;
  // Whether a copy through these pieces must run under the SIGBUS guard: one of their files may
  // be truncated under the mapping (BackingWindow::can_shrink).
  bool guarded() const { return guarded_; }

 private:
  // `borrow`: the one window is this thread's last, used without a reference; false if the
  // access needs another or it is not that one. Otherwise every window is referenced.
  bool Translate(fabric::HostRegistry& registry, fabric::BackingMaps& maps, fabric::Peer& peer, uint64_t owner,
                 const PinnedPieces& remote, bool borrow);

  InlinedVector<iovec, 4> pieces_;
  // Kept while the pieces are used: one borrowed window, or references to every window.
  fabric::BorrowedWindow borrowed_;
  InlinedVector<std::shared_ptr<const fabric::BackingWindow>, 2> windows_;
  bool guarded_ = false;
};

// Copies `local` to (write) or from the mapped pieces `mapped`, in order; both describe the
// same number of bytes. `guarded` (MappedPieces::guarded): under the SIGBUS guard, EFAULT if the
// mapping faulted (the owner's file no longer holds the range), with the bytes before the fault
// copied.
Status CopyMapped(bool write, const iovec* local, size_t nl, const iovec* mapped, size_t nm, bool guarded = true);

// The most bytes one step of a copy moves before it checks again that it may go on: 256 KiB
// is ~10 us of memcpy, so a withdrawal waits at most that long for a running initiator, and the
// check (a load per key held) costs nothing next to it.
inline constexpr size_t kCopyChunkBytes = 256 * 1024;

// Copies between `local` and `remote` through `copy(lv, ln, rv, rn)` in chunks of at most
// kCopyChunkBytes and kMaxIov pieces a side; before each chunk (the first too) `revoked()` is
// asked, and ECANCELED is returned once it says so (the chunks before it stay copied).
template <typename Copy, typename Revoked>
Status CopyBounded(const iovec* local, size_t nl, const iovec* remote, size_t nr, Copy copy, Revoked revoked);

using ChunkCopyFn = Status (*)(void*, const iovec*, size_t, const iovec*, size_t);
using RevokedFn = bool (*)(void*);
Status CopyBoundedImpl(const iovec* local, size_t nl, const iovec* remote, size_t nr, ChunkCopyFn copy, void* cctx,
                       RevokedFn revoked, void* rctx);

template <typename Copy, typename Revoked>
Status CopyBounded(const iovec* local, size_t nl, const iovec* remote, size_t nr, Copy copy, Revoked revoked) {
  return CopyBoundedImpl(
      local, nl, remote, nr,
      [](void* c, const iovec* l, size_t ln, const iovec* r, size_t rn) {
        return (*static_cast<Copy*>(c))(l, ln, r, rn);
      },
      &copy, [](void* c) { return static_cast<bool>((*static_cast<Revoked*>(c))()); },
      &revoked);
}

}  // namespace softverbs::transport
