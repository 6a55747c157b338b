#include "transport/host/mapped_copy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/env.h"
#include "fabric/host/fault_guard.h"
#include "fabric/host/shared_backing.h"
#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

// The pin of `remote` whose registration holds [addr, +length) of the owner's memory, trying
// `hint` first (most accesses have one key); npos if none.
size_t PinHolding(const PinnedPieces& remote, uint64_t addr, uint64_t length, size_t hint) {
  const size_t n = remote.pin_count();
  if (n == 1) {  // the common case: one key
    const KeyView& v = remote.pin(0).view();
    return !v.indirect() && RangeWithin(v.addr, v.length, addr, length) ? 0 : SIZE_MAX;
  }
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (hint + k) % n;
    const KeyView& v = remote.pin(i).view();
    if (v.indirect()) continue;  // its pieces are in the keys of its layout, pinned next to it
    if (RangeWithin(v.addr, v.length, addr, length)) return i;
  }
  return SIZE_MAX;
}

}  // namespace

// SOFTVERBS_PEER_MAP=0: this initiator never maps a peer's backing (process_vm_* for every
// access; a comparison switch, and how tests mix both paths on one target).
bool PeerMapEnabled() {
  static const bool enabled = EnvOnUnlessZero("SOFTVERBS_PEER_MAP");
  return enabled;
}

fabric::BorrowedWindow MappedPieces::MapSingle(fabric::HostRegistry& registry, fabric::BackingMaps& maps,
                                               fabric::Peer* peer, const PinnedPieces& remote, uint8_t** at) {
  // Translate's rules for its commonest shape, one piece in one plain key, in a straight line.
  if (peer == nullptr || remote.size() != 1 || remote.pin_count() != 1 || !PeerMapEnabled()) return {};
  const KeyView& v = remote.pin(0).view();
  const iovec& piece = remote.data()[0];
  const auto addr = reinterpret_cast<uint64_t>(piece.iov_base);
  if (v.indirect() || !(v.access & kSharedBacking) || !RangeWithin(v.addr, v.length, addr, piece.iov_len)) return {};
  // The pin keeps the key published, and the owner writes the record before publishing: it
  // describes this registration if it names this key.
  const fabric::BackingRecord& r = fabric::BackingOf(registry, KeySlot(v.key));
  if (r.key.load(std::memory_order_acquire) != v.key) return {};
  fabric::BorrowedWindow window = maps.Borrow(fabric::IdOf(peer->process().token().raw(), r), r.offset, v.length);
  if (window) *at = window.get()->base() + r.offset + (addr - v.addr);
  return window;
}

bool MappedPieces::Map(fabric::HostRegistry& registry, fabric::BackingMaps& maps, fabric::Peer* peer,
                       const PinnedPieces& remote) {
  if (peer == nullptr) return false;  // this process's own memory is reached by memcpy anyway
  if (!PeerMapEnabled()) return false;
  // Cheap refusal first: private memory (the common case) has no key marked kSharedBacking.
  bool any = false;
  for (size_t i = 0; i < remote.pin_count() && !any; ++i) any = (remote.pin(i).view().access & kSharedBacking) != 0;
  if (!any) return false;
  // Most accesses need one window, the one this thread used last: borrowed, no reference taken.
  // Anything else (a miss, a second window) takes references (Translate's shared mode).
  pieces_.clear();
  windows_.clear();
  uint8_t* at = nullptr;
  if ((borrowed_ = MapSingle(registry, maps, peer, remote, &at))) {
    guarded_ = borrowed_.get()->can_shrink();
    pieces_.push_back({at, remote.data()[0].iov_len});
    return true;
  }
  const uint64_t owner = peer->process().token().raw();
  return Translate(registry, maps, *peer, owner, remote, /*borrow=*/true) ||
         Translate(registry, maps, *peer, owner, remote, /*borrow=*/false);
}

bool MappedPieces::Translate(fabric::HostRegistry& registry, fabric::BackingMaps& maps, fabric::Peer& peer,
                             uint64_t owner, const PinnedPieces& remote, bool borrow) {
  pieces_.clear();
  windows_.clear();
  borrowed_ = fabric::BorrowedWindow();
  guarded_ = false;
  size_t hint = 0;
  size_t window_pin = SIZE_MAX;  // the pin whose window is the last one taken
  uint64_t window_start = 0;     // the file offset of that pin's first byte
  uint8_t* base = nullptr;       // that window's mapping
  for (size_t p = 0; p < remote.size(); ++p) {
    const iovec& piece = remote.data()[p];
    const auto addr = reinterpret_cast<uint64_t>(piece.iov_base);
    const size_t i = PinHolding(remote, addr, piece.iov_len, hint);
    if (i == SIZE_MAX) return false;
    hint = i;
    const KeyView& v = remote.pin(i).view();
    if (!(v.access & kSharedBacking)) return false;
    if (i != window_pin) {
      // The pin keeps the key published, and the owner writes the record before publishing:
      // it describes this registration if it names this key.
      const fabric::BackingRecord& r = fabric::BackingOf(registry, KeySlot(v.key));
      if (r.key.load(std::memory_order_acquire) != v.key) return false;
      const fabric::BackingWindow* window = nullptr;
      if (borrow) {
        if (borrowed_) return false;  // a second window: references (the caller tries again)
        borrowed_ = maps.Borrow(fabric::IdOf(owner, r), r.offset, v.length);
        window = borrowed_.get();
      } else if (auto got = maps.Get(peer.process(), fabric::IdOf(owner, r), r.offset, v.length); got.ok()) {
        windows_.push_back(std::move(got.value()));
        window = windows_.back().get();
      }
      if (window == nullptr) return false;
      guarded_ = guarded_ || window->can_shrink();
      base = window->base();
      window_pin = i;
      window_start = r.offset;
    }
    pieces_.push_back({base + window_start + (addr - v.addr), piece.iov_len});
  }
  return true;
}

void MappedPieces::Forget(fabric::BackingMaps& maps) const {
  if (borrowed_) maps.Forget(borrowed_.get());
  for (const auto& w : windows_) maps.Forget(w.get());
}

namespace {

struct MappedCopy {
  bool write;
  const iovec* local;
  size_t nl;
  const iovec* mapped;
  size_t nm;
};

// The guarded part: plain pointers and memmove only (a fault jumps out of it).
void CopyMappedUnguarded(void* arg) {
  const auto& c = *static_cast<const MappedCopy*>(arg);
  // Walk both lists in step, copying the overlap of the current pieces. memmove: a buffer of
  // the initiator may be a mapping of the same file.
  size_t li = 0, lo = 0, mi = 0, mo = 0;
  while (li < c.nl && mi < c.nm) {
    const size_t n = std::min(c.local[li].iov_len - lo, c.mapped[mi].iov_len - mo);
    auto* l = static_cast<uint8_t*>(c.local[li].iov_base) + lo;
    auto* m = static_cast<uint8_t*>(c.mapped[mi].iov_base) + mo;
    if (c.write)
      memmove(m, l, n);
    else
      memmove(l, m, n);
    lo += n;
    mo += n;
    if (lo == c.local[li].iov_len) ++li, lo = 0;
    if (mo == c.mapped[mi].iov_len) ++mi, mo = 0;
  }
}

}  // namespace

Status CopyMapped(bool write, const iovec* local, size_t nl, const iovec* mapped, size_t nm, bool guarded) {
  MappedCopy c{write, local, nl, mapped, nm};
  if (!guarded) {  // files that cannot shrink: no fault to catch
    CopyMappedUnguarded(&c);
    return Status::Ok();
  }
  if (fabric::RunGuarded(CopyMappedUnguarded, &c)) return Status::Ok();
  return Status(EFAULT, "the owner's file no longer holds the registered range (truncated under the "
                        "registration): SIGBUS caught in the copy");
}

Status CopyBoundedImpl(const iovec* local, size_t nl, const iovec* remote, size_t nr, ChunkCopyFn copy, void* cctx,
                       RevokedFn revoked, void* rctx) {
  // (Made only when it happens: a Status carries its rule as a string, and building one per
  // access was a heap allocation per work request.)
  auto cancelled = [] {
    return Status(ECANCELED, "the access was revoked while it copied (a key it uses was withdrawn, or the target QP "
                             "destroyed)");
  };
  if (revoked(rctx)) return cancelled();
  size_t total = 0;
  for (size_t i = 0; i < nr; ++i) total += remote[i].iov_len;
  if (total <= kCopyChunkBytes && nl <= kMaxIov && nr <= kMaxIov) return copy(cctx, local, nl, remote, nr);
  // Two cursors in step: each chunk takes up to kMaxIov pieces of either side and at most
  // kCopyChunkBytes, cut where the shorter side runs out.
  std::vector<iovec> lv, rv;
  size_t li = 0, lo = 0, ri = 0, ro = 0;
  for (bool first = true; li < nl && ri < nr; first = false) {
    if (!first && revoked(rctx)) return cancelled();
    lv.clear();
    rv.clear();
    size_t bytes = 0;
    while (li < nl && ri < nr && lv.size() < kMaxIov && rv.size() < kMaxIov && bytes < kCopyChunkBytes) {
      const size_t n = std::min({local[li].iov_len - lo, remote[ri].iov_len - ro, kCopyChunkBytes - bytes});
      auto append = [](std::vector<iovec>& v, const iovec& base, size_t off, size_t len) {
        uint8_t* p = static_cast<uint8_t*>(base.iov_base) + off;
        if (!v.empty() && static_cast<uint8_t*>(v.back().iov_base) + v.back().iov_len == p)
          v.back().iov_len += len;
        else
          v.push_back({p, len});
      };
      if (n > 0) {
        append(lv, local[li], lo, n);
        append(rv, remote[ri], ro, n);
      }
      bytes += n;
      lo += n;
      ro += n;
      if (lo == local[li].iov_len) ++li, lo = 0;
      if (ro == remote[ri].iov_len) ++ri, ro = 0;
    }
    if (!lv.empty()) SV_RETURN_IF_ERROR(copy(cctx, lv.data(), lv.size(), rv.data(), rv.size()));
  }
  return Status::Ok();
}

}  // namespace softverbs::transport
