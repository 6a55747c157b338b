#include "transport/indirect_key.h"

#include <new>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "fabric/host/process_token.h"

namespace softverbs::transport {

bool ComputeLayoutLengths(LayoutHeader& h, const LayoutEntry* entries) {
  uint64_t pattern = 0;
  for (uint32_t i = 0; i < h.entries; ++i) pattern += entries[i].count;  // <= 2^16 * 2^32: no overflow
  h.pattern_length = pattern;
  if (pattern != 0 && h.repeat_count > UINT64_MAX / pattern) return false;
  h.total_length = pattern * h.repeat_count;
  return true;
}

const std::vector<PinnedPieces::SigLanding> PinnedPieces::kNoLandings;

uint8_t* PinnedPieces::Hold(size_t n) {
  std::vector<std::unique_ptr<uint8_t[]>>& held = Rare().held;
  held.push_back(std::unique_ptr<uint8_t[]>(new (std::nothrow) uint8_t[n]));
  return held.back().get();
}

const KeyPin* PinnedPieces::Find(uint32_t key) const {
  for (const KeyPin& p : pins_)
    if (p.view().key == key) return &p;
  return nullptr;
}

void PinnedPieces::Clear() {
  pieces_.clear();
  pins_.clear();
  rare_.reset();
}

bool ResolveHeldKey(fabric::HostRegistry& registry, const HeldKey& held, uint32_t key, uint64_t addr,
                    uint64_t length, const KeyRule& rule, PinnedPieces* out) {
  void* at = nullptr;
  if (held.key() != key || key == 0) return false;
  std::atomic<uint32_t>* hazard = HoldHeldKey(KeyHazards(registry), held, key, addr, length, rule, &at);
  if (hazard == nullptr) return false;
  out->Add({at, length});
  out->Keep(KeyPin::Announced(hazard, held.view()));
  return true;
}

void LearnPlainKey(fabric::HostRegistry& registry, uint32_t key, HeldKey* held) {
  if (!held->Learn(registry, key)) return;
  const KeyView& k = held->view();
  if (k.indirect() || k.null_key() || k.on_demand() || k.window()) held->Forget();
}

bool AddNullPieces(const KeyView& k, uint64_t use, const KeyRule& rule, PinnedPieces* out) {
  if (rule.remote) return false;  // ibv_alloc_null_mr(3): "the MR is not exposed as an rkey"
  const uint64_t chunk = rule.writes ? k.addr + kNullChunk : k.addr;
  for (uint64_t left = use; left > 0;) {
    const uint64_t n = std::min(left, kNullChunk);
    out->Add({reinterpret_cast<void*>(chunk), n});
    left -= n;
  }
  return true;
}

bool ResolveIndirect(fabric::HostRegistry& registry, const KeyView& k, const void* layout, uint64_t addr,
                     uint64_t length, uint64_t use, const KeyRule& rule, PinnedPieces* out) {
  // The key is pinned: its owner cannot rewrite the layout until the pin is released.
  LayoutHeader h;
  memcpy(&h, layout, sizeof h);
  const LayoutEntry* entries = LayoutEntries(layout);
  // A key with a signature is reached through its memory view only (signature_access.h): its
  // accesses convert bytes between the domains.
  const bool signature = LayoutSignature(const_cast<void*>(layout))->config.active != 0;
  if (signature && !rule.memory_view) return false;
  // Beyond the layout's end is out of the key's bounds, like any key (IBA 10.6.3.1 / 9.7.5.1.3).
  if ((!signature && h.total_length != k.length) || !RangeWithin(0, h.total_length, addr, length)) return false;
  bool ok = true;
  // Each piece is checked against its underlying key, which
  // this access pins once however many pieces use it.
  WalkLayout(h, entries, addr, use, [&](uint32_t i, uint64_t piece_addr, uint64_t piece_length) {
    if (!ok) return;
    const uint32_t lkey = entries[i].lkey;
    const KeyPin* pin = out->Find(lkey);
    if (pin == nullptr) {
      KeyPin p = KeyPin::Acquire(registry, lkey);
      if (!p) {
        ok = false;
        return;
      }
      out->Keep(std::move(p));
      pin = out->Find(lkey);
    }
    // The underlying MR is the owner's, in the mkey's PD, direct (no nesting), writable if the
    // access writes, and holds the piece.
    const KeyView& u = pin->view();
    if (u.indirect() || u.window() || u.null_key() || u.owner_process_slot() != rule.owner_slot || u.pd != rule.pd ||
        (rule.writes && !(u.access & 1u /* IBV_ACCESS_LOCAL_WRITE */)) || !KeyCovers(u, piece_addr, piece_length) ||
        !OnDemandPresent(registry, u, u.addr + (piece_addr - u.iova), piece_length, rule.writes)) {
      ok = false;
      return;
    }
    out->Add({reinterpret_cast<void*>(u.addr + (piece_addr - u.iova)), piece_length});
  });
  return ok;
}

Status CopyInChunksImpl(const iovec* local, size_t nl, const iovec* remote, size_t nr,
                        Status (*copy)(void*, const iovec*, size_t, const iovec*, size_t), void* ctx) {
  // Two cursors in step: each chunk takes up to kMaxIov pieces of either side, cut where the
  // shorter side runs out.
  std::vector<iovec> lv, rv;
  size_t li = 0, lo = 0, ri = 0, ro = 0;
  while (li < nl && ri < nr) {
    lv.clear();
    rv.clear();
    while (li < nl && ri < nr && lv.size() < kMaxIov && rv.size() < kMaxIov) {
      const size_t n = std::min(local[li].iov_len - lo, remote[ri].iov_len - ro);
      auto append = [](std::vector<iovec>& v, const iovec& base, size_t off, size_t len) {
        uint8_t* p = static_cast<uint8_t*>(base.iov_base) + off;
        if (!v.empty() && static_cast<uint8_t*>(v.back().iov_base) + v.back().iov_len == p)
          v.back().iov_len += len;
        else
          v.push_back({p, len});
      };
      append(lv, local[li], lo, n);
      append(rv, remote[ri], ro, n);
      lo += n;
      ro += n;
      if (lo == local[li].iov_len) ++li, lo = 0;
      if (ro == remote[ri].iov_len) ++ri, ro = 0;
    }
    SV_RETURN_IF_ERROR(copy(ctx, lv.data(), lv.size(), rv.data(), rv.size()));
  }
  return Status::Ok();
}

// --- the owner's side ------------------------------------------------------------------------

namespace {

// This process's indirect keys by key: a UMR names its mkey by key, and the send queue that
// executes it finds the mkey here (or learns it was destroyed).
struct MkeyDirectory {
  std::mutex mu;
  std::unordered_map<uint32_t, std::weak_ptr<IndirectKey>> keys;
};
MkeyDirectory& Keys() {
  static MkeyDirectory* d = new MkeyDirectory;  // never destroyed: mkeys may outlive static destructors
  return *d;
}

}  // namespace

Result<std::shared_ptr<IndirectKey>> IndirectKey::Create(fabric::LocalProcess& local, uint64_t pd,
                                                         uint32_t max_entries) {
  auto block = local.Allocate(LayoutBytes(max_entries));
  if (!block.ok()) return Status(ENOMEM, "no shared memory for the mkey's layout: " + block.status().rule());
  auto key = AllocateKey(local.registry());
  if (!key.ok()) {
    local.Free(*block, LayoutBytes(max_entries));
    return key.status();
  }
  new (LayoutSignature(local.At(*block))) SigState();  // no signature until a UMR sets one
  std::shared_ptr<IndirectKey> k(new IndirectKey(local, pd, max_entries, key->slot, key->key, *block));
  // Not published until its first UMR: until then every access through it fails.
  std::lock_guard lock(Keys().mu);
  Keys().keys[key->key] = k;
  return k;
}

IndirectKey::~IndirectKey() {
  {
    std::lock_guard lock(Keys().mu);
    Keys().keys.erase(key_);
  }
  fabric::HostRegistry& registry = local_.registry();
  WithdrawKey(registry, slot_);
  registry.keys().Free(slot_, fabric::ProcessToken::Self());
  local_.Free(block_, LayoutBytes(max_entries_));
}

std::shared_ptr<IndirectKey> IndirectKey::Find(uint32_t key) {
  std::lock_guard lock(Keys().mu);
  auto it = Keys().keys.find(key);
  return it == Keys().keys.end() ? nullptr : it->second.lock();
}

void IndirectKey::Configure(const UmrRequest& req, const LayoutEntry* entries, const SigConfig* sig) {
  std::lock_guard lock(mu_);
  // Accesses through the old layout finish before it changes (as ibv_rereg_mr).
  WithdrawKey(local_.registry(), slot_);
  void* block = local_.At(block_);
  auto* base = static_cast<uint8_t*>(block);
  SigState* state = LayoutSignature(block);
  LayoutHeader h;
  if (req.set & kUmrSetLayout) {
    h.entries = req.entries;
    h.repeat_count = req.repeat_count;
    ComputeLayoutLengths(h, entries);
    memcpy(base, &h, sizeof h);
    memcpy(const_cast<LayoutEntry*>(LayoutEntries(block)), entries, req.entries * sizeof(LayoutEntry));
    has_layout_ = true;
  } else if (has_layout_) {
    memcpy(&h, base, sizeof h);  // the layout stays (mlx5dv_wr_mkey_configure(3))
  } else {
    memcpy(base, &h, sizeof h);  // no layout yet: the key covers nothing
  }
  if (req.set & kUmrResetSignature) state->config = SigConfig{};
  if ((req.set & kUmrSetSignature) && sig != nullptr) state->config = *sig;
  if (req.set & kUmrSetAccess) access_ = req.access;
  // The key's length is what its accesses address: the wire view of a signature key.
  const uint64_t length =
      state->config.active ? SigGeometryOf(state->config).WireLength(h.total_length) : h.total_length;
  const uint64_t ref = static_cast<uint64_t>(block_.segment) << 32 | block_.offset;
  PublishKey(local_.registry(), slot_, KeyView{key_, access_ | kIndirectKey, pd_, ref, length, 0, local_.slot()});
}

SigError IndirectKey::TakeSigError() {
  std::lock_guard lock(mu_);
  return SigTakeError(LayoutSignature(local_.At(block_))->error);
}

}  // namespace softverbs::transport
