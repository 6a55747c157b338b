#include "cm/id_state.h"

#include <array>
#include <cstddef>

namespace softverbs::cm {
namespace {

using S = IdState;
constexpr size_t kStates = static_cast<size_t>(S::kDisconnected) + 1;
constexpr size_t kVerbs = static_cast<size_t>(IdVerb::kCount);

constexpr uint32_t Bit(S s) { return 1u << static_cast<unsigned>(s); }

// Row per verb: the states it may be called in.
constexpr std::array<uint32_t, kVerbs> kTable = {
    // rdma_bind_addr(3): on a new identifier (the kernel's RDMA_CM_IDLE).
    Bit(S::kIdle),
    // rdma_resolve_addr(3): "If a source address is given, the rdma_cm_id is bound to that
    // address, the same as if rdma_bind_addr were called" - idle or bound.
    Bit(S::kIdle) | Bit(S::kBound),
    // rdma_resolve_route(3): "The destination address must have already been resolved".
    Bit(S::kAddrResolved),
    // rdma_listen(3): "Users must have bound the rdma_cm_id to a local address"; the kernel
    // binds an idle one to the wildcard itself.
    Bit(S::kIdle) | Bit(S::kBound),
    // rdma_connect(3): "Users must have resolved a route to the destination address".
    Bit(S::kRouteResolved),
    // rdma_accept(3) / rdma_reject(3): on the identifier of a connection request.
    Bit(S::kRequestReceived),
    Bit(S::kRequestReceived),
    // rdma_establish(3): after the connect response event.
    Bit(S::kConnectResponse),
    // rdma_disconnect(3): a connection being made or made; repeating it is harmless.
    Bit(S::kConnectResponse) | Bit(S::kAccepting) | Bit(S::kConnected) | Bit(S::kDisconnected),
    // rdma_notify(3): meaningful while the passive side waits for RTU, harmless once connected.
    Bit(S::kAccepting) | Bit(S::kConnected),
};

}  // namespace

const char* IdStateName(IdState state) {
  static constexpr std::array<const char*, kStates> kNames = {
      "idle",      "bound",    "address resolved", "route resolved",
      "listening", "connecting", "connect response", "request received",
      "accepting", "connected",  "disconnected"};
  return kNames[static_cast<size_t>(state)];
}

const char* IdVerbName(IdVerb verb) {
  static constexpr std::array<const char*, kVerbs> kNames = {
      "rdma_bind_addr", "rdma_resolve_addr", "rdma_resolve_route", "rdma_listen",
      "rdma_connect",   "rdma_accept",       "rdma_reject",        "rdma_establish",
      "rdma_disconnect", "rdma_notify"};
  return kNames[static_cast<size_t>(verb)];
}

bool Allowed(IdVerb verb, IdState state) {
  return (kTable[static_cast<size_t>(verb)] & Bit(state)) != 0;
}

}  // namespace softverbs::cm
