// The wire fabric's process side (DESIGN.md section 6): this process's members of the per-user
// UDP 4791 groups of the host's addresses (fabric/wire/udp_port.h), the thread that receives
// RoCEv2 packets on them, and the send path the wire links use.
//
// A received request is executed by the same responder as on the host fabric
// (transport/responder.h), on the destination QP found in the host registry by the packet's
// DestQP -- in this process or in another process of the host, reached through the host fabric.
// So any member of a group may take any datagram: kernel steering by QPN (fabric/wire) only
// spares that hop, and correctness never depends on it. Only datagrams to this host's own
// addresses arrive here: a local QP is never reached by a packet meant for another host.
//
// No thread spins: the receive thread sleeps in epoll_wait until a datagram arrives.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/process_channel.h"
#include "fabric/packet/packet.h"
#include "fabric/packet/pcap.h"
#include "fabric/wire/udp_port.h"
#include "transport/wire/qp1.h"

namespace softverbs::transport {

using Gid16 = std::array<uint8_t, 16>;

// What the wire fabric saw, for `softverbs status` and the tests.
struct WireCounters {
  std::atomic<uint64_t> sent{0}, received{0};
  std::atomic<uint64_t> malformed{0};    // refused by the packet parser (length, opcode, pad...)
  std::atomic<uint64_t> icrc_errors{0};  // ICRC mismatch: dropped, as rxe and NICs do
  std::atomic<uint64_t> unknown_qp{0};   // DestQP names no QP of this host
  std::atomic<uint64_t> unsupported{0};  // a transport softverbs does not carry on the wire yet
  std::atomic<uint64_t> forwarded{0};    // a response for a QP of another process of this host,
                                         // forwarded to it (the kernel picked this member)
  std::atomic<uint64_t> misdelivered{0}; // a response no live requester of this host waits for
  std::atomic<uint64_t> acks_coalesced{0};  // ACKs not sent: a later ACK of the same batch covered them
  std::atomic<uint64_t> qp1_received{0};   // MADs handed to the QP1 handler
  std::atomic<uint64_t> qp1_refused{0};    // to QP1 with a non-UD opcode, wrong P_Key/Q_Key, or too long
  std::atomic<uint64_t> qp1_unhandled{0};  // to QP1 with no handler registered (like an unknown QP)
  std::atomic<uint64_t> qp1_sent{0};       // MADs sent from QP1
  std::atomic<uint64_t> qp1_forwarded{0};  // MADs handed to another process of this host (ForwardMad)
};

class WireLink;

class WireFabric {
 public:
  // This process's wire fabric (a child of fork() gets its own on first use).
  static WireFabric& Get(fabric::LocalProcess& local);

  // Receives on every routable address among `gids` (IPv4-mapped and global IPv6; loopback and
  // link-local addresses are this host's alone). Idempotent; an address whose port is taken by
  // another owner is skipped, and the reason logged once.
  void Listen(std::span<const Gid16> gids);
  // The UDP source port of QP `qpn`'s packets from `sgid`: one of 64 ports from 0xc000 chosen by
  // the QP number, as rxe spreads its QPs over 0xc000-0xffff (rxe_qp.c), so routers hashing the
  // 5-tuple spread the QPs (ECMP); 4791 if that port is unavailable. The ICRC covers it.
  uint16_t SourcePortFor(const Gid16& sgid, uint32_t qpn);
  // Sends one datagram (a built RoCEv2 packet) from `sgid`'s address to `dgid`'s port 4791.
  Status Send(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> pieces, uint16_t src_port = 0);
  // Sends `datagrams` (one built packet each, in order) from `sgid` to `dgid`: runs of equal
  // sizes leave in one UDP_SEGMENT system call (fabric/wire/udp_port.h). A full socket buffer is
  // waited for (a NIC's queue back-pressures its sender), up to a few milliseconds.
  Status SendBatch(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> datagrams, uint16_t src_port = 0);
  // The same for datagrams gathered from pieces (packet::BuildGathered): datagram i is the next
  // `piece_counts[i]` of `pieces`, so a payload goes from the application's memory to the kernel
  // without a copy of ours.
  Status SendGathered(const Gid16& sgid, const Gid16& dgid, std::span<const iovec> pieces,
                      std::span<const uint16_t> piece_counts, uint16_t src_port = 0);

  // The link of this process's RC QP `qpn` gets the responses addressed to it.
  void Register(uint32_t qpn, WireLink* link);
  void Unregister(uint32_t qpn, WireLink* link);

  // QP1 (transport/wire/qp1.h): datagrams to DestQP 1 go to `handler` (the CM agent) instead
  // of the host registry; nullptr withdraws it, waiting for a delivery in progress. One per
  // process; without one, QP1 datagrams are counted and dropped as for an unknown QP.
  void SetQp1Handler(Qp1Handler* handler);
  // Sends one 256-byte MAD from QP1 of `sgid` to QP1 of `dgid` (its port 4791), from UDP source
  // port 0xD872 as rxe's QP1 does (or the port's own if that one cannot be bound).
  Status SendMad(const Gid16& sgid, const Gid16& dgid, std::span<const uint8_t> mad);
  // A MAD this process received on QP1 that belongs to another process of the host (the kernel
  // hands a datagram to any member of the UDP 4791 group, and a peer's QP1 sends from one
  // source port, so one member may get all of a host's MADs): sent on through the host channel
  // to process slot `slot` -- or, with kEveryOtherProcess, to every other live process -- whose
  // handler gets it with `forwarded` set. EHOSTUNREACH when no live process took it.
  static constexpr uint32_t kEveryOtherProcess = ~0u;
  Status ForwardMad(uint32_t slot, const Gid16& sgid, const Gid16& dgid, std::span<const uint8_t> mad);

  // Busy polling (docs/wire.md): handles what is pending on this process's ports without
  // blocking, in the caller's thread; ibv_poll_cq calls it on an empty CQ, so an application
  // that spins on its CQ takes its datagrams itself and the receive thread is not woken for
  // them. False if nothing was pending. SOFTVERBS_WIRE_POLL=0 turns it off.
  bool PollOnce();
  // This process's fabric once it has sent or received a datagram, else nullptr: one load, for
  // the empty-CQ path of processes that never touch the wire.
  static WireFabric* Receiving();

  const WireCounters& counters() const { return counters_; }
  // This process's report for `softverbs status`: the device's counters and each wire QP's.
  std::string Report();
  // The UDP port every member binds: 4791, or SOFTVERBS_ROCE_PORT (tests on one namespace).
  static uint16_t RocePort();

 private:
  struct Port {
    Gid16 gid{};
    std::mutex mu;  // UdpPort is used by one thread at a time: senders and the receive thread
    std::unique_ptr<fabric::wire::UdpPort> udp;
    // Receiving and handling: one thread at a time (the receive thread or a busy poller), so a
    // port's datagrams are handled in the order they arrived. Taken before `mu`.
    std::mutex rx_mu;
    std::vector<uint8_t> storage;  // the receive batch's buffers, under rx_mu
    // ACKs held until the receive batch ends, one per requester QP (the latest): under rx_mu.
    struct HeldAck {
      fabric::wire::UdpAddress to;
      uint32_t qpn = 0;
      uint8_t bytes[64];
      size_t length = 0;
    };
    std::vector<HeldAck> held_acks;
  };
  explicit WireFabric(fabric::LocalProcess& local);
  Port* Find(const Gid16& gid);
  // Sends `datagrams` (one packet each, in order) from `port`'s socket to `to` (a response goes
  // back to where its request came from), waiting out a full socket buffer for a while.
  Status SendDatagrams(Port& port, const fabric::wire::UdpAddress& to, std::span<const iovec> datagrams,
                       uint16_t src_port = 0);
  // The same with datagram i gathered from the next `counts[i]` pieces (empty: one piece each).
  Status SendDatagrams(Port& port, const fabric::wire::UdpAddress& to, std::span<const iovec> pieces,
                       std::span<const uint16_t> counts, uint16_t src_port);
  // Makes this fabric the one empty ibv_poll_cq calls drain (Receiving), once it carries traffic.
  void BusyPollFromNowOn();
  // SOFTVERBS_PCAP: records one packet of the flow src -> dst.
  void Record(const Gid16& src, const Gid16& dst, uint16_t src_port, std::span<const uint8_t> packet);
  void Record(const Gid16& src, const Gid16& dst, uint16_t src_port, std::span<const iovec> pieces);
  void Run();
  // Receives one batch on `port` and handles it; `wait`: for the port's receive lock (the
  // receive thread), else give up if another thread is receiving (a busy poller).
  size_t Drain(Port& port, bool wait);
  // ACK coalescing (under the port's rx_mu): holds `ack` for requester `to` in place of an older
  // one for the same QP; sends what is held (before any other response, and at a batch's end).
  void HoldAck(Port& port, const fabric::wire::UdpAddress& to, std::span<const uint8_t> ack);
  void SendHeldAcks(Port& port);
  // One received datagram, from `from` to this port's address.
  void Deliver(std::span<const uint8_t> datagram, const fabric::wire::UdpAddress& from, const Port& to);
  // A response for RC requester `qpn`: to its link here, or forwarded to its process.
  void DeliverResponse(const fabric::packet::ParsedPacket& p, std::span<const uint8_t> datagram,
                       uint32_t owner_slot);
  // A datagram to QP1 (already parsed, ICRC checked): to the handler, or counted and dropped.
  void DeliverQp1(const fabric::packet::ParsedPacket& p, const fabric::wire::UdpAddress& from, const Gid16& source,
                  const Gid16& local);
  // What arrived on this process's channel: forwarded responses, and questions.
  void ServeChannel();
  void DeliverForwardedMad(std::span<const uint8_t> body);  // a ChannelKind::kMad message

  fabric::LocalProcess& local_;
  const uint32_t generation_;  // the process incarnation (fork) this fabric belongs to
  std::mutex mu_;  // ports_
  std::vector<std::unique_ptr<Port>> ports_;
  std::vector<Gid16> refused_;  // addresses whose port could not be joined (explained once)
  std::mutex links_mu_;
  std::unordered_map<uint32_t, WireLink*> links_;  // RC requesters by QP number
  // Other processes of the host forward here, and `softverbs status` asks here (docs/wire.md).
  std::unique_ptr<fabric::ProcessChannel> channel_;
  std::mutex qp1_mu_;  // held while the handler runs, so withdrawing it waits for that
  Qp1Handler* qp1_handler_ = nullptr;
  std::atomic<uint32_t> qp1_psn_{0};  // QP1's send PSN (not checked on UD; rxe increments it)
  fabric::packet::PcapWriter* pcap_ = nullptr;  // SOFTVERBS_PCAP (capture.h): the process's file
  UniqueFd epoll_;
  std::thread thread_;
  std::atomic<int64_t> last_poll_ns_{0};  // the last busy poll (CLOCK_MONOTONIC; the thread watches it)
  WireCounters counters_;
};

// IPv4-mapped GIDs are IPv4 addresses; any other GID is an IPv6 address.
fabric::wire::UdpAddress AddressOfGid(const Gid16& gid, uint16_t port);
Gid16 GidOfAddress(const fabric::wire::UdpAddress& a);

}  // namespace softverbs::transport
