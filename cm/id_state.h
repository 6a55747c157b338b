// The state machine of a communication identifier, in one table (id_state.cc): which verb is
// legal in which state, per rdma_cm(7) and the man page of each verb. A verb called in another
// state is refused with EINVAL before anything changes, as the kernel's rdma_cm does.
#pragma once

#include <cstdint>

namespace softverbs::cm {

enum class IdState : uint8_t {
  kIdle,              // created
  kBound,             // rdma_bind_addr
  kAddrResolved,      // rdma_resolve_addr (ADDR_RESOLVED queued)
  kRouteResolved,     // rdma_resolve_route (ROUTE_RESOLVED queued)
  kListening,         // rdma_listen
  kConnecting,        // REQ / SIDR_REQ sent, waiting for REP / REJ / SIDR_REP
  kConnectResponse,   // REP received, no QP on the id: waiting for rdma_establish
  kRequestReceived,   // passive: CONNECT_REQUEST delivered, waiting for accept / reject
  kAccepting,         // passive: REP sent, waiting for RTU
  kConnected,         // ESTABLISHED (UD: the remote QP is known)
  kDisconnected,      // DISCONNECTED / REJECTED / UNREACHABLE delivered: only destroy is left
};
const char* IdStateName(IdState state);

enum class IdVerb : uint8_t {
  kBindAddr,
  kResolveAddr,
  kResolveRoute,
  kListen,
  kConnect,
  kAccept,
  kReject,
  kEstablish,
  kDisconnect,
  kNotify,
  kCount,
};
const char* IdVerbName(IdVerb verb);

// Whether `verb` is legal in `state` (the table).
bool Allowed(IdVerb verb, IdState state);

}  // namespace softverbs::cm
