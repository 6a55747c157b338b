// The wire fabric's Link (transport/link.h): carries a requester's messages to another host as
// RoCEv2 packets (DESIGN.md section 6). UD datagrams and UC messages go out and complete at once
// (the requester learns nothing of their fate, IBA 9.6, 9.8). RC messages are in flight until
// the responder's acknowledgement, NAK, READ response or atomic acknowledgement arrives (the
// receive thread hands them to OnResponse); this link matches them to its messages by PSN and
// reports each message's reply, in order, to the requester (ReplySink), which owns the retry
// policy and carries messages again after a timeout, an RNR NAK or a sequence NAK.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>

#include "fabric/packet/packet.h"
#include "transport/link.h"
#include "transport/wire/wire_fabric.h"

namespace softverbs::transport {

// What a QP's requester saw on the wire (`softverbs status`).
struct WireRequesterCounters {
  std::atomic<uint64_t> packets{0};        // request packets sent, retransmissions included
  std::atomic<uint64_t> retransmitted{0};  // RC: packets sent again (timeout, RNR, sequence NAK)
  std::atomic<uint64_t> acks{0};           // RC: ACKs received
  std::atomic<uint64_t> read_responses{0}; // RC: READ response packets received
  std::atomic<uint64_t> atomic_acks{0};    // RC: atomic ACKs received
  std::atomic<uint64_t> naks_sequence{0};  // RC: PSN sequence error NAKs received
  std::atomic<uint64_t> naks_rnr{0};       // RC: RNR NAKs received
  std::atomic<uint64_t> naks_error{0};     // RC: invalid request / remote access / operational
};

class WireLink final : public Link {
 public:
  explicit WireLink(WireFabric& fabric) : fabric_(fabric) {}
  ~WireLink() override;
  // nullptr: no response reaches the requester any more (its QP is being destroyed); the receive
  // thread is not in OnResponse once this returns.
  void Attach(ReplySink* sink) override;
  Reply Carry(const Request& r) override;
  // Multicast does not leave the host (docs/cm.md): nothing to carry.
  void CarryMulticast(const Request&, uint32_t) override {}
  // A response packet (ACKNOWLEDGE, ATOMIC ACKNOWLEDGE, RDMA READ response) for this link's QP.
  void OnResponse(const fabric::packet::ParsedPacket& p);
  // The QP this link carries for (0 before its first message) and what it counted.
  uint32_t qpn() const { return qpn_; }
  const WireRequesterCounters& counters() const { return counters_; }

 private:
  // An RC message carried and not answered yet.
  struct Outstanding {
    uint64_t ticket = 0;
    uint32_t first_psn = 0;
    uint32_t last_psn = 0;
    WrOpcode opcode = WrOpcode::kSend;
    uint32_t mtu = 4096;
    uint32_t next_response = 0;  // READ: the PSN of the response packet expected next
    uint32_t next_send = 0;      // SEND/WRITE carried in parts: the PSN after the last one sent
  };
  struct Event {
    uint64_t ticket;
    Reply reply;
  };
  Status SendRc(const Request& r, const fabric::packet::IpUdpInfo& flow);
  // An RC/UC SEND or WRITE, cut into packets by the path MTU and sent in batches.
  Status SendMessage(const Request& r, const fabric::packet::IpUdpInfo& flow, const Gid16& sgid, const Gid16& dgid);
  // Completes (as acknowledged) the SENDs and WRITEs that end before `psn`; false if a READ or
  // atomic still waits for its own response before it.
  bool AcknowledgeBefore(uint32_t psn, std::vector<Event>* events);
  // The packets of the front SEND or WRITE before `psn`, if `psn` falls inside it (else 0).
  uint32_t FrontPacketsBefore(uint32_t psn) const;
  void Count(uint8_t opcode, uint8_t syndrome);

  WireFabric& fabric_;
  ReplySink* sink_ = nullptr;
  uint32_t qpn_ = 0;  // registered with the fabric on the first RC message
  std::mutex mu_;
  std::deque<Outstanding> outstanding_;
  // The last PSN sequence NAK taken, and the message it named: the responder NAKs a gap once
  // (until a packet in sequence arrives), so one not beyond it is a duplicate or a late copy.
  uint64_t nak_ticket_ = 0;
  uint32_t nak_psn_ = 0;
  // The READ asked for again because a response overtook the one expected: until one of its
  // responses arrives in order, later gaps are stragglers of the earlier attempts (rxe's
  // started_retry), left to the ACK timeout.
  uint64_t read_retry_ticket_ = 0;
  std::atomic<bool> explained_{false};
  uint16_t src_port_ = 0;  // this QP's UDP source port from src_port_gid_ (WireFabric::SourcePortFor)
  Gid16 src_port_gid_{};
  uint32_t next_psn_ = 0;  // RC: the PSN after the last one sent (tells retransmissions apart)
  bool sent_any_ = false;
  WireRequesterCounters counters_;
};

}  // namespace softverbs::transport
