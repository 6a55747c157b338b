#include "transport/host/direct_route.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/env.h"
#include "base/log.h"
#include "base/prefetch.h"
#include "fabric/host/hazard_lines.h"
#include "fabric/host/shared_backing.h"
#include "fabric/host/token_lock.h"
#include "transport/codes.h"
#include "transport/host/mapped_copy.h"
#include "transport/responder.h"

namespace softverbs::transport {
namespace {

bool OneSidedOpcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaRead:
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      return true;
    default:
      return false;
  }
}

bool OneSided(const Request& r) {
  return r.qp_type == qp_type::kRc && !r.from_dci && !r.xrc && r.rkey != 0 && OneSidedOpcode(r.opcode);
}

// SOFTVERBS_ROUTE=0: nothing is kept (a comparison switch: docs/device.md).
bool RouteEnabled() {
  static const bool enabled = EnvOnUnlessZero("SOFTVERBS_ROUTE");
  return enabled;
}

}  // namespace

DirectRoute::Remote* DirectRoute::Find(uint32_t rkey) {
  if (rkey == 0) return nullptr;
  if (keys_[last_].key.key() == rkey) [[likely]] return &keys_[last_];  // (a WR's key is mostly the last one's)
  for (size_t i = 0; i < kKeys; ++i)
    if (keys_[i].key.key() == rkey) {
      last_ = i;
      return &keys_[i];
    }
  return nullptr;
}

// (inlined: one call per work request is what the route saves)
[[gnu::always_inline]] inline bool DirectRoute::TargetCurrent() {
  // The QP is the one found: its entry names the same process (the same incarnation of its
  // slot, alive) and block, and the endpoint there still has its number.
  const Target& t = target_;
  return t.entry->qp_num.load(std::memory_order_acquire) == t.qpn &&
         t.entry->process_slot.load(std::memory_order_relaxed) == t.process_slot && t.entry->block == t.block &&
         local_.registry().processes().slot(t.process_slot).owner.load(std::memory_order_acquire) == t.token &&
         std::atomic_ref<uint32_t>(t.endpoint->qp_num).load(std::memory_order_acquire) == t.qpn;
}

uint32_t DirectRoute::Admitted(Remote* key, uint64_t epoch) {
  // Nothing these rules read changed since they were found under `epoch`: every change to
  // them bumps it before anything waits for the accesses in flight, and this request
  // announced itself before reading it (fabric::HostRegistry::route_epoch).
  if (key->checked_epoch == epoch) [[likely]] return key->admitted;
  // Found now, after `epoch` was read: a change after that read bumps it again.
  key->checked_epoch = kUnchecked;
  if (!TargetCurrent() || !key->key.Current()) return 0;
  key->admitted = Responder::DirectAdmitted(key->target);
  key->checked_epoch = epoch;
  return key->admitted;
}

bool DirectRoute::Carry(const Request& r, Reply* reply) {
  if (target_.endpoint == nullptr || !OneSided(r) || r.local_count != 1 || r.local[0].iov_len != r.length) return false;
  const DirectRequest d{r.opcode, r.dest_qp, r.local[0].iov_base, r.length, r.remote_addr, r.rkey, r.compare_add, r.swap};
  return Carry(d, reply);
}

// ExecuteDirect's step is the usual way's chunk: both bound how long a withdrawal waits.
static_assert(Responder::kDirectMaxBytes == kCopyChunkBytes);

bool DirectRoute::Carry(const DirectRequest& r, Reply* reply) {
  // The line the access lands on (or reads), asked for first, where the key found last says it
  // is: a hint (base/prefetch.h), so a view no longer current costs a useless fetch and nothing
  // else. The peer of a ping-pong polls that very line, so its transfer is paid anyway; asked for
  // now, it overlaps the announcements and checks below instead of starting when the store
  // commits (issue 16: bench/ab.sh one way 81 -> 74 ns).
  if (const Remote& last = keys_[last_]; r.rkey != 0 && last.key.key() == r.rkey) {
    const KeyView& v = last.key.view();
    if (RangeWithin(v.iova, v.length, r.remote_addr, 1)) {
      const uint8_t* at = last.base + (r.remote_addr - v.iova);
      if (r.opcode == WrOpcode::kRdmaRead)
        PrefetchForRead(at);
      else
        PrefetchForWrite(at);  // (a WRITE's first line, an atomic's word)
    }
  }
  const Target& t = target_;
  if (t.endpoint == nullptr || r.dest_qp != t.qpn || !OneSidedOpcode(r.opcode)) return false;
  // (the common cases inline, here and below: one request after another to the same key under
  // the same epoch)
  Remote* key = r.rkey != 0 && keys_[last_].key.key() == r.rkey ? &keys_[last_] : Find(r.rkey);
  if (key == nullptr) return false;
  fabric::HazardLine* line = fabric::ThisThreadHazards(local_);
  if (line == nullptr) return false;
  // Held first, then checked (HostTarget::Pin's and KeyPin's order): ibv_destroy_qp clears the
  // endpoint's number, a withdrawal changes the key's entry, each with a full barrier, before
  // it waits for the announcements -- so either this sees the change or the owner waits. The
  // caller's lkey is announced in the same pass (one barrier for the three).
  std::atomic<uint32_t>* holds[3] = {};
  holds[0] = fabric::AnnounceUnfenced(*line, fabric::QpHazardValue(t.qpn));
  if (holds[0] != nullptr) holds[1] = fabric::AnnounceUnfenced(*line, key->key.hazard_value());
  if (holds[1] != nullptr && r.local_key != nullptr) holds[2] = fabric::AnnounceUnfenced(*line, r.local_key->hazard_value());
  bool done = false;
  key->faulted = false;
  if (holds[1] != nullptr && (r.local_key == nullptr || holds[2] != nullptr)) {
    fabric::HazardStoreLoadBarrier();
    const uint64_t epoch = local_.registry().route_epoch().load(std::memory_order_acquire);
    const uint32_t admitted = key->checked_epoch == epoch ? key->admitted : Admitted(key, epoch);
    const bool local_current = r.local_key == nullptr || *r.local_epoch == epoch || LocalCurrent(r, epoch);
    if (admitted != 0 && local_current && t.peer->AliveRecently()) {
      done = r.length <= Responder::kDirectMaxBytes ? Responder::ExecuteDirect(key->target, admitted, r, reply)
                                                    : MoveInSteps(*key, admitted, epoch, r, reply);
      // (the original value lands while the lkey is held: IBA 9.4.5's local buffer)
      if (done && r.local_key != nullptr && reply->code == ReplyCode::kAck &&
          (r.opcode == WrOpcode::kAtomicCmpSwp || r.opcode == WrOpcode::kAtomicFetchAdd))
        memcpy(r.local, &reply->original, 8);
    }
  }
  for (std::atomic<uint32_t>* h : {holds[2], holds[1]})
    if (h != nullptr) fabric::Retract(h);
  if (key->faulted) Faulted(r, key);  // (no longer holding the key: Faulted may wait on the cache)
  if (holds[0] != nullptr) fabric::Retract(holds[0]);
  return done;
}

bool DirectRoute::MoveInSteps(const Remote& key, uint32_t admitted, uint64_t epoch, const DirectRequest& r,
                              Reply* reply) {
  // The usual way's bound on a copy (transport/host/mapped_copy.h, kCopyChunkBytes): a
  // withdrawal or a destroy waits for this request's announcements at most one step. Between
  // steps the epoch is read again; once it moved the request stops, and false hands it to the
  // usual way, which checks and moves it again whole (a WRITE or READ may be executed again, as
  // an RC retry executes it, and one that fails may leave its target partly written).
  if (r.opcode != WrOpcode::kRdmaWrite && r.opcode != WrOpcode::kRdmaRead) return false;
  DirectRequest step = r;
  for (uint64_t at = 0; at < r.length; at += step.length) {
    if (at != 0 && local_.registry().route_epoch().load(std::memory_order_acquire) != epoch) return false;
    step.local = static_cast<uint8_t*>(r.local) + at;
    step.remote_addr = r.remote_addr + at;
    step.length = std::min<uint64_t>(Responder::kDirectMaxBytes, r.length - at);
    if (!Responder::ExecuteDirect(key.target, admitted, step, reply)) return false;
    if (reply->code != ReplyCode::kAck) return true;  // (the owner's file no longer held it: answered)
  }
  return true;
}

bool DirectRoute::LocalCurrent(const DirectRequest& r, uint64_t epoch) {
  // Admitted's reasoning for the caller's kept lkey: every change to its entry bumps the epoch.
  if (r.local_key == nullptr || *r.local_epoch == epoch) [[likely]] return true;
  *r.local_epoch = kUnchecked;
  if (!r.local_key->Current()) return false;
  *r.local_epoch = epoch;
  return true;
}

std::optional<HostTarget> DirectRoute::HeldTarget(const Request& r) {
  const Target& t = target_;
  if (t.endpoint == nullptr || r.dest_qp != t.qpn || r.xrc || r.qp_type == qp_type::kUd) return std::nullopt;
  fabric::HazardLine* line = fabric::ThisThreadHazards(local_);
  std::atomic<uint32_t>* hold = line != nullptr ? fabric::Announce(*line, fabric::QpHazardValue(t.qpn)) : nullptr;
  if (hold == nullptr) return std::nullopt;
  // (found current under the epoch read after the announcement: trusted, as Admitted's rules)
  const uint64_t epoch = local_.registry().route_epoch().load(std::memory_order_acquire);
  if (target_.checked_epoch != epoch) {
    target_.checked_epoch = kUnchecked;
    if (TargetCurrent()) target_.checked_epoch = epoch;
  }
  if (target_.checked_epoch != epoch || !t.peer->AliveRecently()) {
    fabric::Retract(hold);
    return std::nullopt;
  }
  // (the peer is kept alive by the route, which outlives the request: HostLink::Carry)
  return HostTarget(local_, t.process_slot, t.qpn, nullptr, t.peer.get(), t.endpoint, {nullptr, hold});
}

bool DirectRoute::Move(const void* ctx, bool write, uint8_t* at, void* local, size_t n) {
  // (a file that may shrink: a file that cannot has no `move`, ExecuteDirect copies itself)
  auto* key = static_cast<Remote*>(const_cast<void*>(ctx));
  const iovec l{local, n}, m{at, n};
  key->faulted = !CopyMapped(write, &l, 1, &m, 1, /*guarded=*/true).ok();
  return !key->faulted;
}

bool DirectRoute::Atomic(const void* ctx, uint64_t va, uint64_t* word, uint64_t (*op)(uint64_t, const void*),
                         const void* arg, uint64_t* before) {
  // IBV_ATOMIC_HCA: the same stripe lock as every other initiator of the word (HostTarget::AtomicUpdate).
  auto* key = static_cast<Remote*>(const_cast<void*>(ctx));
  const DirectRoute& route = *key->route;
  fabric::TokenLock lock(HostTarget::AtomicStripe(route.local_, route.target_.process_slot, va), route.local_.token());
  key->faulted = !HostTarget::ApplyAtomicWord(word, op, arg, key->guarded, before);
  return !key->faulted;
}

void DirectRoute::Faulted(const DirectRequest& r, Remote* key) {
  // As the usual way's HostTarget::ForgetFaulted: the initiator gets an error completion, never
  // a SIGBUS (issue 17 item 9), and the file is mapped again next time.
  SV_LOG(kError, "RDMA %s at qp 0x%x of pid %d: the owner's file no longer holds the registered range (truncated "
         "under the registration): SIGBUS caught", r.opcode == WrOpcode::kRdmaRead ? "read" : "write", target_.qpn,
         target_.peer->process().token().pid());
  fabric::BackingMaps::ForThisProcess().Forget(key->window.get());
  *key = Remote();
}

void DirectRoute::Learn(const Request& r, const PeerHint& hint) {
  // (the common case first: a SEND to the QP kept already teaches nothing)
  if (!OneSided(r) && target_.endpoint != nullptr && target_.qpn == r.dest_qp) return;
  // (XRC and UD targets differ per request, a DCI's too: never kept; own_qpn_: a QP of this process)
  if (r.xrc || r.from_dci || r.qp_type == qp_type::kUd || r.dest_qp == own_qpn_ || !RouteEnabled()) return;
  if ((target_.endpoint == nullptr || target_.qpn != r.dest_qp) && !LearnTarget(r.dest_qp, hint)) return;
  if (!OneSided(r) || !PeerMapEnabled()) return;
  if (refused_.key() == r.rkey && refused_.Current()) return;  // (a plain re-read: a memo only)
  // A key kept already but no longer current is read again in its place; a new one replaces
  // the oldest.
  Remote* slot = Find(r.rkey);
  if (slot == nullptr) {
    slot = &keys_[next_];
    next_ = (next_ + 1) % kKeys;
  }
  Remote learned;
  if (LearnKey(r.rkey, &learned)) {
    *slot = std::move(learned);
    Seal(slot);
    refused_.Forget();
  } else {
    *slot = Remote();
  }
}

bool DirectRoute::LearnTarget(uint32_t qpn, const PeerHint& hint) {
  // (what is kept stays until another QP is found: each use checks it anyway)
  fabric::HostRegistry& registry = local_.registry();
  // (HostTarget::Find's bounds: a number beyond the table's extent was never a QP)
  if (qpn < 0x100 || qpn - 0x100 >= registry.qps().extent()) return false;
  fabric::QpEntry& entry = fabric::EntryOf<fabric::QpEntry>(registry.qps().slot(qpn - 0x100));
  if (entry.qp_num.load(std::memory_order_acquire) != qpn) return false;
  Target t;
  t.qpn = qpn;
  t.entry = &entry;
  t.process_slot = entry.process_slot.load(std::memory_order_relaxed);
  t.block = entry.block;
  // This process's own QPs stay on the usual way (its copies of its own memory are system
  // calls there, which turn an unmapped page into an error).
  if (t.process_slot == local_.slot()) {
    own_qpn_ = qpn;
    return false;
  }
  t.token = registry.processes().slot(t.process_slot).owner.load(std::memory_order_acquire);
  if (hint.peer != nullptr && hint.token == t.token) {
    t.peer = hint.peer;
  } else {
    auto found = local_.PeerAt(t.process_slot);
    if (!found.ok()) return false;
    t.peer = std::move(found.value());
  }
  auto at = t.peer->At(t.block, registry);
  if (!at.ok()) return false;
  t.endpoint = static_cast<QpEndpoint*>(at.value());
  target_ = std::move(t);
  for (Remote& k : keys_) k = Remote();  // a key is kept for the QP it reached
  refused_.Forget();
  return true;
}

void DirectRoute::Seal(Remote* key) {
  const Target& t = target_;
  key->route = this;
  key->target = DirectTarget{t.endpoint,
                             t.process_slot,
                             &key->key.view(),
                             Responder::DirectGrants(*t.endpoint, t.process_slot, key->key.view()),
                             key->base,
                             key->guarded ? &DirectRoute::Move : nullptr,
                             &DirectRoute::Atomic,
                             key};
}

bool DirectRoute::LearnKey(uint32_t rkey, Remote* out) {
  fabric::HostRegistry& registry = local_.registry();
  HeldKey key;
  if (!key.Learn(registry, rkey)) return false;
  const KeyView& v = key.view();
  // Plain keys of the QP's process whose memory is a shared backing (MapSingle's shape).
  if (v.owner_process_slot() != target_.process_slot || v.indirect() || v.null_key() || v.on_demand() ||
      v.window() || !(v.access & kSharedBacking)) {
    refused_ = key;
    return false;
  }
  // The owner writes the record while the key is withdrawn, before it publishes it: read
  // between two reads of the same registration, it describes that registration.
  const fabric::BackingRecord& record = fabric::BackingOf(registry, KeySlot(v.key));
  if (record.key.load(std::memory_order_acquire) != v.key) return false;
  const fabric::BackingId id = fabric::IdOf(target_.peer->process().token().raw(), record);
  const uint64_t offset = record.offset;
  if (!key.Current()) return false;
  auto window = fabric::BackingMaps::ForThisProcess().Get(target_.peer->process(), id, offset, v.length);
  if (!window.ok()) {  // not mapped here: not asked again while the registration stays
    refused_ = key;
    return false;
  }
  out->guarded = window.value()->can_shrink();
  out->base = window.value()->base() + offset;
  out->window = std::move(window.value());
  out->key = key;
  return true;
}

}  // namespace softverbs::transport
