#include "transport/receive_keys.h"

namespace softverbs::transport {

const KeyView* ReceiveKeys::PeekSlow(fabric::HostRegistry& registry, uint32_t key) {
  ++reads_;
  if (registry_ != &registry) {  // (one link, one registry: defensive)
    held_[0].Forget();
    held_[1].Forget();
    registry_ = &registry;
  }
  HeldKey* slot = held_[0].key() == key ? &held_[0] : held_[1].key() == key ? &held_[1] : nullptr;
  if (slot == nullptr) {  // a new key takes the place of the older one
    slot = &held_[next_];
    next_ ^= 1;
  }
  // One read answers this peek and is kept: whatever the key's kind, the caller decides from
  // the view as from a fresh read (an indirect key's layout is read when it is scattered for
  // real; an ODP key's pages are looked up at every access).
  return slot->Learn(registry, key) ? &slot->view() : nullptr;
}

}  // namespace softverbs::transport
