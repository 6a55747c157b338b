#include "transport/host/registration_backing.h"

#include "fabric/host/private_share.h"
#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

bool KeysTouch(void* registry, uint64_t lo, uint64_t hi) {
  return OwnKeysTouch(*static_cast<fabric::HostRegistry*>(registry), lo, hi);
}

}  // namespace

std::optional<fabric::SharedBacking> RegistrationBacking(fabric::HostRegistry& registry, uint64_t addr,
                                                         uint64_t length) {
  // Moves first: a registration inside pages already moved shares the move (and holds it).
  if (auto moved = fabric::SharePrivate(addr, length, KeysTouch, &registry)) return moved;
  return fabric::FindSharedBacking(addr, length);
}

void RetryMovesBack() { fabric::RetryMovesBack(); }

}  // namespace softverbs::transport
