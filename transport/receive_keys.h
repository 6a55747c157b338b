// The lkeys of receive WQEs a sender checked last, kept across messages (issue 16: resolving a
// receive buffer's key per message cost ~140 instructions of a same-host SEND). A sender to one
// QP finds the same few buffers' keys in WQE after WQE, as a requester its own lkeys
// (Requester::KeepLocalKey): the view is read once with its seqlock count (HeldKey) and re-used
// while the count and the key are unchanged -- exactly the view a fresh read would give -- so
// every rule the responder applies to it (KeyAdmits, KeyCovers, the owner's process, ODP
// presence) decides as before. A key withdrawn, re-registered or invalidated changes the count
// or the key: a miss, read again the usual way.
//
// Used by one link at a time (under its requester's lock, as the PeerHint that holds it).
#pragma once

#include <cstdint>

#include "fabric/host/host_registry.h"
#include "transport/key_table.h"

namespace softverbs::transport {

class ReceiveKeys {
 public:
  // KeyPin::Peek's answer for `key` in `registry` (nullptr: none), from a kept view when it is
  // current: the registration `key` names now, not pinned (for checks whose access happens
  // later under a pin of its own, or a check of its own: a landed message is written by the
  // owner's poll). The view stays valid until the next call.
  const KeyView* Peek(fabric::HostRegistry& registry, uint32_t key) {
    const HeldKey& held = held_[held_[0].key() == key ? 0 : 1];
    if (held.key() == key && key != 0 && registry_ == &registry && held.Current()) [[likely]]
      return &held.view();
    return PeekSlow(registry, key);
  }
  // Reads of the key table (misses) so far: for tests.
  uint64_t reads() const { return reads_; }

 private:
  const KeyView* PeekSlow(fabric::HostRegistry& registry, uint32_t key);

  fabric::HostRegistry* registry_ = nullptr;
  HeldKey held_[2];
  uint32_t next_ = 0;  // the slot a new key takes (the older one)
  uint64_t reads_ = 0;
};

}  // namespace softverbs::transport
