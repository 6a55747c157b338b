// The RC responder's packet front end on the wire (IBA 9.7.4-9.7.5; rxe's rxe_resp.c): checks each
// request packet's PSN against the one expected, answers a gap with one PSN sequence NAK, a
// duplicate with a re-ACK or a replayed READ response / atomic result, and hands packets in
// sequence to the responder (transport/responder.h) -- SENDs into the receive WQE their first
// packet took, RDMA WRITEs at their offsets, READs and atomics executed and answered. ACKs go out
// for packets that ask (AckReq), NAKs with the syndrome of what went wrong (IBA table 44).
// State: the endpoint's WireReceive, under its lock (transport/qp_endpoint.h).
#pragma once

#include <sys/uio.h>

#include <functional>
#include <span>

#include "base/status.h"
#include "fabric/packet/packet.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

// Where the responder's packets go: built for `flow` (this host's address to the requester's),
// sent by `send` (datagrams, one built packet each, in order: a READ response's packets leave
// in batches).
struct ResponsePath {
  fabric::packet::IpUdpInfo flow;
  // Sends datagrams in order: datagram i is the next counts[i] of `pieces` (counts empty: one
  // piece each), as WireFabric::SendGathered.
  std::function<Status(std::span<const iovec> pieces, std::span<const uint16_t> counts)> send;
  // Optional: takes a plain ACK that may be held and replaced by a later ACK of the same QP until
  // the receive batch ends (ACK coalescing: an ACK acknowledges every request up to its PSN, IBA
  // 9.7.5.1.1). NAKs, RNR NAKs, READ responses and atomic ACKs always go through `send`.
  std::function<void(std::span<const uint8_t>)> coalesce_ack;
};

class RcResponder {
 public:
  // An RC request packet for the QP `t` (parsed and ICRC-checked).
  static void Receive(const TargetQp& t, const fabric::packet::ParsedPacket& p, const ResponsePath& path);
};

}  // namespace softverbs::transport
