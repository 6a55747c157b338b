// An access through a signature mkey (signature_key.h) by the transport roles: the key is
// pinned and checked like any key (owner, PD, access, bounds of its wire view), then the bytes
// are converted between the wire view and the memory domain. The memory is reached through the
// key's memory view (KeyRule::memory_view) with the caller's way of moving bytes: memcpy for
// this process's keys, the target's Move for a responder.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/indirect_key.h"

namespace softverbs::transport {

enum class SigAccessResult : uint8_t {
  kNotSignature,  // not a key with a signature: the caller resolves it as usual
  kDone,          // converted (an integrity error, if any, is kept in the mkey)
  kRefused,       // a key rule is broken or the memory could not be reached
};

// `move(write, buffer, n, pieces)`: copies n bytes between this process's `buffer` and the
// owner's `pieces` (write: into the pieces); true on success.
template <typename LayoutAt, typename Move>
struct SigAccessContext {
  fabric::HostRegistry& registry;
  uint32_t key;
  KeyRule rule;
  LayoutAt& layout_at;
  Move& move;

  static bool Read(void* c, uint64_t offset, uint64_t n, uint8_t* dst) {
    auto& self = *static_cast<SigAccessContext*>(c);
    PinnedPieces pieces;
    return ResolveKey(self.registry, self.key, offset, n, n, self.rule, self.layout_at, &pieces) &&
           self.move(false, dst, n, pieces);
  }
  static bool Write(void* c, uint64_t offset, uint64_t n, const uint8_t* src) {
    auto& self = *static_cast<SigAccessContext*>(c);
    PinnedPieces pieces;
    return ResolveKey(self.registry, self.key, offset, n, n, self.rule, self.layout_at, &pieces) &&
           self.move(true, const_cast<uint8_t*>(src), n, pieces);
  }
};

// Gathers (`scatter` false: wire bytes [addr, +n) of the key into `buffer`) or scatters (`buffer`
// lands at wire offset addr) through `key` under `rule`. `check_failed`, when given, is set if a
// block's check failed in this access (signature pipelining stops the send queue there).
template <typename LayoutAt, typename Move>
SigAccessResult SigAccess(fabric::HostRegistry& registry, uint32_t key, uint64_t addr, uint64_t n, const KeyRule& rule,
                          LayoutAt&& layout_at, Move&& move, bool scatter, uint8_t* buffer,
                          bool* check_failed = nullptr) {
  KeyView peek;
  if (!KeyPin::Peek(registry, key, &peek) || !peek.indirect()) return SigAccessResult::kNotSignature;
  KeyPin pin = KeyPin::Acquire(registry, key);  // the layout and signature stay while pinned
  if (!pin || !pin.view().indirect()) return SigAccessResult::kNotSignature;
  const KeyView& k = pin.view();
  void* layout = const_cast<void*>(static_cast<const void*>(layout_at(k.layout())));
  if (layout == nullptr) return SigAccessResult::kNotSignature;
  SigState* state = LayoutSignature(layout);
  if (!state->config.active) return SigAccessResult::kNotSignature;
  if (!KeyAdmits(k, rule) || !KeyCovers(k, addr, n)) return SigAccessResult::kRefused;
  LayoutHeader h;
  memcpy(&h, layout, sizeof h);
  KeyRule memory_rule = rule;
  memory_rule.memory_view = true;
  SigAccessContext<std::remove_reference_t<LayoutAt>, std::remove_reference_t<Move>> ctx{
      registry, key, memory_rule, layout_at, move};
  SigError error;
  const bool ok =
      scatter ? SigScatter(state->config, h.total_length, addr, buffer, n, decltype(ctx)::Write, &ctx, &error)
              : SigGather(state->config, h.total_length, addr, n, decltype(ctx)::Read, &ctx, buffer, &error);
  if (!ok) return SigAccessResult::kRefused;
  if (check_failed != nullptr && error.kind != SigErrorKind::kNone) *check_failed = true;
  SigRecordError(state->error, error);
  return SigAccessResult::kDone;
}

// The mover for keys of this process: the pieces are this process's memory.
inline bool SigMoveLocal(bool write, uint8_t* buffer, uint64_t n, const PinnedPieces& pieces) {
  uint64_t done = 0;
  for (size_t i = 0; i < pieces.size() && done < n; ++i) {
    const iovec& p = pieces.data()[i];
    if (write)
      memcpy(p.iov_base, buffer + done, p.iov_len);
    else
      memcpy(buffer + done, p.iov_base, p.iov_len);
    done += p.iov_len;
  }
  return done == n;
}

}  // namespace softverbs::transport
