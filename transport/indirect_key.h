// Indirect keys (mlx5dv indirect mkeys, mlx5dv_create_mkey(3)): a key whose bytes are not one
// range of the owner's memory but a layout over other keys, configured by a UMR work request
// (mlx5dv_wr_mr_list / mlx5dv_wr_mr_interleaved, mlx5dv_wr_post(3)).
//
// The owner keeps the layout in its shared arena and publishes the key in the host key table
// with kIndirectKey in its access bits and the layout's SharedRef in its address (key_table.h);
// an initiator in any process pins the key, reads the layout and walks the byte range it
// accesses into pieces of the underlying keys, each pinned and checked like a direct access.
// Reconfiguring withdraws the key first (waiting for the accesses in flight), rewrites the
// layout, then publishes it again -- as ibv_rereg_mr does -- so a layout never changes under an
// access.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/inlined_vector.h"
#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "transport/key_table.h"
#include "transport/signature_key.h"
#include "transport/work_request.h"

namespace softverbs::transport {

// One entry of a layout. MR_LIST: an SGE (count = its length, skip = 0). INTERLEAVED: an
// mlx5dv_mr_interleaved (bytes_count, bytes_skip). `addr` is in the underlying key's address
// space, as in an ibv_sge.
struct LayoutEntry {
  uint64_t addr = 0;
  uint32_t count = 0;
  uint32_t skip = 0;
  uint32_t lkey = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(LayoutEntry) == 24);

// The layout in the owner's arena: the header, its signature (signature_key.h), then `entries`
// LayoutEntry.
// mlx5dv_wr_post(3): "The data as described by struct mlx5dv_mr_interleaved will hold real data
// defined by bytes_count and then a padding of bytes_skip ... This single layout representation
// is repeated by repeat_count". So repetition r of entry i starts at addr_i + r * (count_i +
// skip_i). MR_LIST is the same with repeat_count 1: "the concatenation of the SGEs".
struct LayoutHeader {
  uint32_t entries = 0;
  uint32_t repeat_count = 0;
  uint64_t pattern_length = 0;  // sum of the entries' counts: one repetition
  uint64_t total_length = 0;    // pattern_length * repeat_count
};
static_assert(sizeof(LayoutHeader) == 24);

// Bytes a layout of `max_entries` entries occupies in the arena.
inline size_t LayoutBytes(uint32_t max_entries) {
  return sizeof(LayoutHeader) + sizeof(SigState) + max_entries * sizeof(LayoutEntry);
}
// The parts of a layout block.
inline SigState* LayoutSignature(void* block) {
  return reinterpret_cast<SigState*>(static_cast<uint8_t*>(block) + sizeof(LayoutHeader));
}
inline const LayoutEntry* LayoutEntries(const void* block) {
  return reinterpret_cast<const LayoutEntry*>(static_cast<const uint8_t*>(block) + sizeof(LayoutHeader) +
                                              sizeof(SigState));
}

// Fills `h`'s lengths from its entries and repeat count; false if they overflow 64 bits.
bool ComputeLayoutLengths(LayoutHeader& h, const LayoutEntry* entries);

// Walks [offset, +length) of the layout (offset is zero-based: "The mkey should be used in a
// zero-based mode. The addr field in its ibv_sge is an offset in the total data",
// mlx5dv_wr_post(3)). Calls piece(entry_index, addr_in_underlying_key, piece_length) in order;
// false (calling nothing) if the range ends beyond the layout. Zero-length entries are skipped.
template <typename Piece>
bool WalkLayout(const LayoutHeader& h, const LayoutEntry* entries, uint64_t offset, uint64_t length, Piece&& piece) {
  if (!RangeWithin(0, h.total_length, offset, length)) return false;
  if (length == 0) return true;
  uint64_t rep = offset / h.pattern_length;
  uint64_t within = offset % h.pattern_length;
  uint32_t i = 0;
  while (within >= entries[i].count) within -= entries[i++].count;  // the entry holding `offset`
  while (length > 0) {
    const LayoutEntry& e = entries[i];
    const uint64_t take = std::min<uint64_t>(e.count - within, length);
    if (take > 0) piece(i, e.addr + rep * (static_cast<uint64_t>(e.count) + e.skip) + within, take);
    length -= take;
    within = 0;
    if (++i == h.entries) i = 0, ++rep;
  }
  return true;
}

// The pieces of an access in the owner's memory and the pins that keep them valid: room for
// kMaxSge of each inline (the direct-key case), growing on the heap for indirect keys.
class PinnedPieces {
 public:
  void Add(iovec piece) { pieces_.push_back(piece); }
  void Keep(KeyPin&& pin) { pins_.push_back(std::move(pin)); }
  // `n` bytes this list owns until cleared (nullptr if there is no memory for them): a piece
  // copied from another process's memory (transport/imported_key.h), the wire view of a
  // signature key (signature_access.h).
  uint8_t* Hold(size_t n);
  // A pin this list holds on `key`, or nullptr.
  const KeyPin* Find(uint32_t key) const;
  const iovec* data() const { return pieces_.data(); }
  size_t size() const { return pieces_.size(); }
  // The pins held, in the order kept (transport/host/mapped_copy.h finds each piece's key by them).
  size_t pin_count() const { return pins_.size(); }
  const KeyPin& pin(size_t i) const { return pins_.data()[i]; }
  void Clear();
  // A bounce that stands for [addr, +length) of signature mkey `lkey` in a write into this
  // process (an RDMA READ's local SGE): converted into the mkey once the bytes are there.
  struct SigLanding {
    uint32_t lkey;
    uint64_t addr;
    uint64_t length;
    uint8_t* bytes;
  };
  void AddSigLanding(const SigLanding& l) { Rare().landings.push_back(l); }
  const std::vector<SigLanding>& sig_landings() const { return rare_ ? rare_->landings : kNoLandings; }
  // The same for [addr, +length) of an lkey imported from another process (imported_key.h):
  // the bytes are written there once the READ or atomic is answered.
  void AddImportedLanding(const SigLanding& l) { Rare().imported.push_back(l); }
  const std::vector<SigLanding>& imported_landings() const { return rare_ ? rare_->imported : kNoLandings; }
  // Neither kind of landing (nearly every access): one load.
  bool no_landings() const { return rare_ == nullptr || (rare_->landings.empty() && rare_->imported.empty()); }

 private:
  // What signature and imported keys need, made on their first use: the list of an ordinary
  // access is then two inline vectors and a null pointer to make and drop.
  struct RareParts {
    std::vector<std::unique_ptr<uint8_t[]>> held;
    std::vector<SigLanding> landings;
    std::vector<SigLanding> imported;
  };
  static const std::vector<SigLanding> kNoLandings;
  RareParts& Rare() {
    if (!rare_) rare_ = std::make_unique<RareParts>();
    return *rare_;
  }

  // Made and dropped per work request: most have one or two SGEs, so the first few live here
  // (constructing and destroying kMaxSge of each cost more than an 8-byte message's copy).
  InlinedVector<iovec, 4> pieces_;
  InlinedVector<KeyPin, 4> pins_;
  std::unique_ptr<RareParts> rare_;
};

// What an access through a key must satisfy (IBA 10.6.3): the key belongs to `owner_slot`'s
// process and to PD `pd`, and grants `access` (ibv_access_flags; 0 for a local read). `writes`:
// the bytes are written, so each underlying MR of an indirect key must grant LOCAL_WRITE too.
// `remote`: an rkey arriving at QP `qp_num` -- only such accesses may use a memory window.
// `memory_view`: the access addresses a signature key's memory domain (signature_access.h);
// otherwise a key with a signature admits no access here (its bytes need converting).
struct KeyRule {
  uint32_t owner_slot = 0;
  uint64_t pd = 0;
  uint32_t access = 0;
  bool writes = false;
  bool remote = false;
  uint32_t qp_num = 0;
  bool memory_view = false;
};

// The owner, PD and access checks of `rule` on key `k` (bounds: KeyCovers).
inline bool KeyAdmits(const KeyView& k, const KeyRule& rule) {
  if (k.owner_process_slot() != rule.owner_slot || (k.access & rule.access) != rule.access) return false;
  // A null MR's lkey is the device's (mlx5_alloc_null_mr hands out its one null mkey whatever
  // the PD): any QP of the process may name it; never as an R_Key (ibv_alloc_null_mr(3)).
  if (k.null_key()) return !rule.remote;
  if (k.window()) {
    // IBA 10.6.7: a window's R_Key is for remote access only; a type 2 window's only through
    // the QP it was bound to (10.6.7.2.2), a type 1 window's through any QP of its PD.
    if (!rule.remote) return false;
    return k.qp_bound() ? k.bound_qpn() == rule.qp_num : k.pd == rule.pd;
  }
  return k.pd == rule.pd;
}

// Resolves [addr, +length) of `key` under `rule` and appends the first `use` bytes of it
// (use <= length) to `out` as pieces of the owner's memory, with their pins. `layout_at` gives
// this process's address of a block of the owner's arena (TargetQp::Resolve, or LocalProcess::At
// for the owner itself). False if any rule is broken or the range leaves the key.
template <typename LayoutAt>
bool ResolveKey(fabric::HostRegistry& registry, uint32_t key, uint64_t addr, uint64_t length, uint64_t use,
                const KeyRule& rule, LayoutAt&& layout_at, PinnedPieces* out);

// The indirect half of ResolveKey: `pin` holds an indirect key, `layout` its layout block.
bool ResolveIndirect(fabric::HostRegistry& registry, const KeyView& k, const void* layout, uint64_t addr,
                     uint64_t length, uint64_t use, const KeyRule& rule, PinnedPieces* out);

// The null half of ResolveKey (ibv_alloc_null_mr(3)): any range, local only ("only the lkey is
// valid"); reads come from the owner's zero chunk, writes go to its discard chunk, in pieces of
// at most kNullChunk. False for a remote access.
bool AddNullPieces(const KeyView& k, uint64_t use, const KeyRule& rule, PinnedPieces* out);

template <typename LayoutAt>
bool ResolveKey(fabric::HostRegistry& registry, uint32_t key, uint64_t addr, uint64_t length, uint64_t use,
                const KeyRule& rule, LayoutAt&& layout_at, PinnedPieces* out) {
  KeyPin pin = KeyPin::Acquire(registry, key);
  if (!pin) return false;
  const KeyView& k = pin.view();
  if (!KeyAdmits(k, rule)) return false;
  if (k.null_key()) {
    if (!AddNullPieces(k, use, rule, out)) return false;
  } else if (k.indirect()) {
    const void* layout = layout_at(k.layout());
    if (layout == nullptr || !ResolveIndirect(registry, k, layout, addr, length, use, rule, out)) return false;
  } else {
    if (!KeyCovers(k, addr, length)) return false;
    const uint64_t host = k.addr + (addr - k.iova);
    if (!OnDemandPresent(registry, k, host, use, rule.writes)) return false;
    if (use > 0) out->Add({reinterpret_cast<void*>(host), use});
  }
  out->Keep(std::move(pin));
  return true;
}

// ResolveKey for a plain key kept across accesses (`held`, learned by LearnPlainKey): announced
// in this thread's hazard line, found current, then ResolveKey's rules (KeyAdmits, KeyCovers);
// its piece and pin appended to `out`. False -- nothing held or added -- when `held` is not
// `key`, has changed, or a rule refuses: ResolveKey then decides, as for any access.
bool ResolveHeldKey(fabric::HostRegistry& registry, const HeldKey& held, uint32_t key, uint64_t addr,
                    uint64_t length, const KeyRule& rule, PinnedPieces* out);
// Where [addr, +length) of `key` is in this process by `held`'s view, if `held` is `key` and
// covers it (KeyCovers); nullptr otherwise. The view as kept: the caller holds the key and
// finds it current before it touches the bytes (HoldAdmittedKey, or a link that announces it:
// DirectRequest::local_key).
inline void* HeldKeyAddress(const HeldKey& held, uint32_t key, uint64_t addr, uint64_t length) {
  const KeyView& k = held.view();
  if (held.key() != key || key == 0 || !KeyCovers(k, addr, length)) return nullptr;
  return reinterpret_cast<void*>(k.addr + (addr - k.iova));
}
// ResolveHeldKey without a pin list, announced in `line` (this thread's: KeyHazards or
// fabric::ThisThreadHazards): where [addr, +length) is in this process (`*at`) and the hazard
// entry that holds the key until fabric::Retract; nullptr when ResolveHeldKey would be false.
// HoldAdmittedKey is HoldHeldKey for a caller that found KeyAdmits true of held.view() under its
// rule already (the view does not change while Current holds): announced, found current,
// KeyCovers. (inline: once per work request of the requester's lane)
inline std::atomic<uint32_t>* HoldAdmittedKey(fabric::HazardLine* line, const HeldKey& held, uint32_t key,
                                              uint64_t addr, uint64_t length, void** at) {
  void* where = HeldKeyAddress(held, key, addr, length);
  if (where == nullptr || line == nullptr) return nullptr;
  std::atomic<uint32_t>* hazard = fabric::Announce(*line, held.hazard_value());
  if (hazard == nullptr) return nullptr;
  if (!held.Current()) {
    fabric::Retract(hazard);
    return nullptr;
  }
  *at = where;
  return hazard;
}
inline std::atomic<uint32_t>* HoldHeldKey(fabric::HazardLine* line, const HeldKey& held, uint32_t key, uint64_t addr,
                                          uint64_t length, const KeyRule& rule, void** at) {
  return KeyAdmits(held.view(), rule) ? HoldAdmittedKey(line, held, key, addr, length, at) : nullptr;
}
// Keeps `key` in `held` if it names a plain registration now -- not indirect, null, on demand
// or a window, the keys whose accesses need more than the view (ResolveKey) -- else empties it.
void LearnPlainKey(fabric::HostRegistry& registry, uint32_t key, HeldKey* held);

// Copies between `local` and `remote` pieces through `copy(lv, ln, rv, rn)` in chunks of at most
// kMaxIov pieces a side (process_vm_writev/readv take at most IOV_MAX).
inline constexpr size_t kMaxIov = 1024;
template <typename Copy>
Status CopyInChunks(const iovec* local, size_t nl, const iovec* remote, size_t nr, Copy&& copy);
Status CopyInChunksImpl(const iovec* local, size_t nl, const iovec* remote, size_t nr,
                        Status (*copy)(void*, const iovec*, size_t, const iovec*, size_t), void* ctx);
template <typename Copy>
Status CopyInChunks(const iovec* local, size_t nl, const iovec* remote, size_t nr, Copy&& copy) {
  if (nl <= kMaxIov && nr <= kMaxIov) return copy(local, nl, remote, nr);
  return CopyInChunksImpl(local, nl, remote, nr,
                          [](void* c, const iovec* l, size_t ln, const iovec* r, size_t rn) {
                            return (*static_cast<Copy*>(c))(l, ln, r, rn);
                          },
                          &copy);
}

// The owner's side of one indirect mkey: its key slot, its layout block, its configuration.
class IndirectKey {
 public:
  // A new unconfigured key of PD `pd` (host id) with room for `max_entries` layout entries;
  // registered in this process's directory (Find) until destroyed.
  static Result<std::shared_ptr<IndirectKey>> Create(fabric::LocalProcess& local, uint64_t pd, uint32_t max_entries);
  ~IndirectKey();
  IndirectKey(const IndirectKey&) = delete;
  IndirectKey& operator=(const IndirectKey&) = delete;

  // The indirect key of this process that `key` names, or nullptr.
  static std::shared_ptr<IndirectKey> Find(uint32_t key);

  // Executes a UMR: withdraws the key (waiting for accesses in flight), applies what `req.set`
  // names -- the access flags, the layout (`entries`, req.entries of them), the signature
  // (`sig`) -- keeping the rest of the previous configuration, and publishes the key again. The
  // caller checked the entries.
  void Configure(const struct UmrRequest& req, const LayoutEntry* entries, const SigConfig* sig);

  // The first signature error since the last call, cleared (mlx5dv_mkey_check(3)).
  SigError TakeSigError();

  uint32_t key() const { return key_; }
  uint64_t pd() const { return pd_; }
  uint32_t max_entries() const { return max_entries_; }

 private:
  IndirectKey(fabric::LocalProcess& local, uint64_t pd, uint32_t max_entries, uint32_t slot, uint32_t key,
              fabric::SharedRef block)
      : local_(local), pd_(pd), max_entries_(max_entries), slot_(slot), key_(key), block_(block) {}
  fabric::LocalProcess& local_;
  uint64_t pd_;
  uint32_t max_entries_;
  uint32_t slot_;
  uint32_t key_;
  fabric::SharedRef block_;
  std::mutex mu_;            // UMRs of several QPs may configure one mkey
  uint32_t access_ = 0;      // the access flags of the last UMR that set them
  bool has_layout_ = false;  // a UMR set a layout (until then the key covers 0 bytes)
};

// The UMR work request's payload (SendWr::inline_data of a kDriver1 WR): a header naming the
// mkey, its access flags and repeat count, then the entries. Built by the mlx5dv builders,
// executed in order by the send queue.
// mlx5dv_wr_mkey_configure(3): a configuration WR changes only what its setters name ("If the
// MKEY is configured, the setter overrides the previous value"); mlx5dv_wr_mr_list /
// _interleaved set both.
inline constexpr uint32_t kUmrSetAccess = 1u << 0;
inline constexpr uint32_t kUmrSetLayout = 1u << 1;
// mlx5dv_wr_set_mkey_sig_block: a SigConfig follows the entries. MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR
// (kUmrResetSignature): the signature is cleared first.
inline constexpr uint32_t kUmrSetSignature = 1u << 2;
inline constexpr uint32_t kUmrResetSignature = 1u << 3;
struct UmrRequest {
  uint32_t mkey = 0;
  uint32_t access = 0;
  uint32_t repeat_count = 0;
  uint32_t entries = 0;
  uint32_t set = kUmrSetAccess | kUmrSetLayout;
  uint32_t reserved = 0;
};

}  // namespace softverbs::transport
