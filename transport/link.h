// The interface between the transport's roles and a fabric (DESIGN.md section 6, "one transport,
// two fabrics"): a requester hands each message to a Link, which carries it to the responder of
// the destination QP and brings its Reply back for the completer. The same host's link runs the
// responder at once in the requester's thread (transport/host/host_link.h); the wire's sends
// RoCEv2 packets. A role never knows which one it talks to.
#pragma once

#include <cstdint>
#include <span>

#include "transport/request.h"

namespace softverbs::transport {

// Where a link reports what arrives after Carry returned kPending (the wire's acknowledgements
// and responses, from its receive thread). Replies come in the order the requests were carried.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void OnReply(uint64_t ticket, const Reply& reply) = 0;
  // RDMA READ response bytes for [offset, +size) of the request's local buffers.
  virtual void OnResponseData(uint64_t ticket, uint64_t offset, std::span<const uint8_t> bytes) = 0;
};

class Link {
 public:
  virtual ~Link() = default;
  // Where replies to kPending go (the requester, for its life).
  virtual void Attach(ReplySink*) {}
  // Carries `r` to QP `r.dest_qp` and returns its responder's reply, or kPending.
  virtual Reply Carry(const Request& r) = 0;
  // Executes `r` at once if this link reaches its destination without its usual machinery (a
  // route kept since an earlier request: transport/host/direct_route.h), with the reply in
  // `reply`; false: nothing was done, and Carry decides. Such a request is answered kAck, or a
  // NAK it cannot retry (never kPending, kRnr or kNoAnswer).
  virtual bool CarryDirect(const DirectRequest&, Reply*) { return false; }
  // UD to a multicast group (r.addressing->dgid, r.dest_qp the multicast QPN): to every QP
  // attached to the group, each with its own Q_Key check and receive WQE (IBA 10.5), except
  // `skip_qp` (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB; 0: none). The sender learns nothing.
  virtual void CarryMulticast(const Request& r, uint32_t skip_qp) = 0;
};

// Which link a requester uses for a destination: a GID of this host is reached through the
// same-host fabric, any other through the wire (DESIGN.md section 6: a work request never
// reaches a local QP merely because it carries the same QP number).
struct Links {
  Link* host = nullptr;
  Link* wire = nullptr;
  Link& For(bool destination_on_host) const { return destination_on_host ? *host : *wire; }
};

}  // namespace softverbs::transport
