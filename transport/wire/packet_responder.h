// The responder's packet front end on the wire (IBA 9.7.1, 9.8.3): puts the packets of a
// message in sequence and turns them into the responder's operations (transport/responder.h) --
// a SEND's receive WQE taken by its first packet and filled packet by packet, an RDMA WRITE's
// packets placed at their offsets of the RETH's range. Its state is the endpoint's WireReceive
// (transport/qp_endpoint.h), under the endpoint's lock, so any process of the host can take a
// QP's packets.
//
// UC today (IBA 9.8.3, as rxe's check_psn): a packet out of sequence drops the message in
// progress and everything up to the next FIRST or ONLY packet, which is accepted at any PSN; a
// receive WQE taken for a dropped message is kept for the next one. RC's acknowledgements,
// duplicates and NAKs come with the RC engine.
#pragma once

#include "fabric/packet/packet.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

class PacketResponder {
 public:
  // A UC packet for the QP `t` (already parsed and ICRC-checked).
  static void ReceiveUc(const TargetQp& t, const fabric::packet::ParsedPacket& p);
};

}  // namespace softverbs::transport
