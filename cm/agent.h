// The process's CM agent (docs/cm.md, "Across hosts"): what the QP1 handler hands every received
// CM MAD to. It decodes the MAD and finds the identifier it belongs to -- a REQ / SIDR_REQ the
// listener of its service ID (port space, port, then the IP CM header's destination address),
// every other MAD the connection whose comm ID the MAD's "remote" field holds -- and answers
// what the kernel's CM answers without an identifier: REJ 8 for a REQ nobody listens to,
// SIDR_REP "unsupported" for such a SIDR_REQ, DREP for a DREQ of an unknown connection. What it
// cannot place is counted and logged.
//
// Comm IDs: the high half names the process (its host registry slot once attached to the wire,
// random before), the low half counts; docs/cm.md says what a host-wide space still lacks.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/event_fd.h"
#include "base/status.h"
#include "cm/mad.h"
#include "cm/mad_conduit.h"

namespace softverbs::cm {

// The IBA CM's timers as the kernel's cm.c computes them (docs/cm.md "Timers"):
// cm_convert_to_ms(x) = 1 << max(x - 8, 0) ms.
constexpr int CmConvertToMs(int iba_timeout) { return 1 << (iba_timeout > 8 ? iba_timeout - 8 : 0); }
inline constexpr int kPacketLifeTime = 18;     // CMA_IBOE_PACKET_LIFETIME
inline constexpr int kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT
inline constexpr int kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
// A REQ / REP / DREQ waits this long for its answer before it is sent again (cm.c:
// cm_convert_to_ms(plt) * 2 + cm_convert_to_ms(remote_cm_response_timeout)) = 6144 ms.
inline constexpr int kMadRetryMs = 2 * CmConvertToMs(kPacketLifeTime) + CmConvertToMs(kCmResponseTimeout);
// The QP's ACK timeout on RoCE: cm_ack_timeout(rxe's ca_ack_delay 15, plt 18) = 19 (2.1 s).
inline constexpr uint8_t kMadAckTimeout = 19;

// A listener's queue of the REQ / SIDR_REQ MADs the agent found for it; readable while not empty.
class MadInbox {
 public:
  struct Received {
    mad::Mad mad;
    Gid sgid{};  // the requester's GID (the datagram's IP source)
    Gid dgid{};  // the local GID it arrived on
    uint32_t comm_id = 0;  // the local comm ID the agent reserved for the connection it starts
  };
  static Result<std::unique_ptr<MadInbox>> Create();
  void Push(Received r);
  bool Pop(Received* r);
  int fd() const { return ready_.fd(); }

 private:
  explicit MadInbox(EventFd ready) : ready_(std::move(ready)) {}
  std::mutex mu_;
  std::deque<Received> queue_;
  EventFd ready_;
};

class Agent {
 public:
  Agent();
  // The process's agent (abi/rdmacm binds its sender to the wire and feeds it QP1's MADs).
  static Agent& Get();

  // How MADs leave (WireFabric::SendMad through libibverbs); until set, there is no MAD path.
  void SetSender(MadSender send);
  // How a MAD that reached this process but is another's goes on to that process of the host
  // (WireFabric::ForwardMad: by process slot, or kEveryOtherProcess); until set, such MADs are
  // dropped and counted `unowned`.
  static constexpr uint32_t kEveryOtherProcess = ~0u;
  using MadForwarder =
      std::function<Status(uint32_t slot, const Gid& sgid, const Gid& dgid, std::span<const uint8_t> mad)>;
  void SetForwarder(MadForwarder forward);
  bool has_sender() const;
  // A sender for conduits: forwards to the one set (never takes the dispatch lock).
  MadSender Sender();
  // Where established connections leave their DREQ for the process's end (abi/rdmacm binds it
  // to the wire's guard); conduits get them through LastWords().
  void SetLastWords(LastWordsHooks hooks);
  LastWordsHooks LastWords();

  // A fresh local comm ID / TID high part (cm.c cm_form_tid: (hi_tid << 32) | comm ID): the
  // process's high half above a 16-bit counter that never yields 0.
  uint32_t NewCommId();
  // Ties the high half to this process's slot in the host registry (12 bits, unique among the
  // host's live processes, above 4 random bits that tell a recycled slot's IDs apart), so two
  // live processes of the host never hand out the same comm ID (docs/cm.md, Limits).
  void SetProcessSlot(uint32_t slot);
  uint32_t hi_tid() const { return hi_tid_; }

  // Listeners: `addr` is the bound address's GID, all zero for a wildcard.
  void AddListener(uint16_t port_space, uint16_t port, const Gid& addr, MadInbox* inbox);
  void RemoveListener(MadInbox* inbox);
  // Connections by our comm ID; `remote_*` (0 while unknown) recognise a REQ sent again.
  void AddConnection(uint32_t local_comm_id, MadConduit* conduit, uint32_t remote_comm_id = 0,
                     uint64_t remote_guid = 0);
  void RemoveConnection(uint32_t local_comm_id);

  // One MAD received on QP1 from `sgid` on local GID `dgid` (the wire's receive thread);
  // `forwarded`: handed over by the process of the host that received it (never forwarded again).
  void OnMad(std::span<const uint8_t> bytes, const Gid& sgid, const Gid& dgid, bool forwarded = false);

  // Per CM attribute (REQ 0x10 .. APR 0x1A, IBA table 99): MADs received, sent (copies
  // included), resent (a copy of one sent before: same attribute and TID, IBA 12.6.1), dropped
  // (undecodable, refused by its connection, or no connection of this process).
  static constexpr uint16_t kFirstAttr = 0x10, kAttrCount = 11;
  using ByType = std::array<std::atomic<uint64_t>, kAttrCount>;
  struct Counters {
    std::atomic<uint64_t> received{0}, refused{0}, dispatched{0}, answered{0}, unowned{0};
    std::atomic<uint64_t> forwarded{0};  // handed to another process of the host (SetForwarder)
    std::atomic<uint64_t> mra_sent{0};  // for a REQ still in a listener's queue (also in answered)
    ByType received_by_type{}, sent_by_type{}, resent_by_type{}, dropped_by_type{};
  };
  const Counters& counters() const { return counters_; }
  // The counters by type as `softverbs status` shows them: "  cm received REQ=1 MRA=0 ...\n",
  // then sent, resent, dropped (tools/cli/status.cc parses them; docs/device.md).
  std::string Report() const;

 private:
  struct Listener {
    uint16_t port_space, port;
    Gid addr;
    MadInbox* inbox;
  };
  struct Connection {
    MadConduit* conduit;  // nullptr: a REQ handed to a listener, its identifier not made yet
    uint32_t remote_comm_id;
    uint64_t remote_guid;
  };
  // Under mu_.
  void OnRequest(const mad::Mad& m, std::span<const uint8_t> bytes, const Gid& sgid, const Gid& dgid, bool forwarded);
  // Hands `bytes` to process slot `slot` (or every other one); false if no forwarder or nobody took it.
  bool Forward(uint32_t slot, std::span<const uint8_t> bytes, const Gid& sgid, const Gid& dgid);
  void Answer(const mad::Mad& m, const Gid& sgid, const Gid& dgid);     // sends `m` back
  // Whether an identifier of this host (any process of this user) holds `port` of `address`.
  static bool BoundOnThisHost(const Gid& address, uint16_t port);
  Status Send(const Gid& sgid, const Gid& dgid, std::span<const uint8_t> mad);
  void CountByType(ByType& counters, std::span<const uint8_t> mad);

  mutable std::mutex send_mu_;
  MadSender send_;  // under send_mu_
  MadForwarder forward_;  // under send_mu_
  LastWordsHooks last_words_;  // under send_mu_
  std::deque<std::pair<uint16_t, uint64_t>> recent_;  // (attribute, TID) of MADs sent, under send_mu_
  std::mutex mu_;   // the tables; held while a MAD is delivered
  std::vector<Listener> listeners_;
  std::map<uint32_t, Connection> connections_;
  uint32_t hi_tid_;
  std::atomic<uint32_t> comm_base_;  // the process's high 16 bits of every comm ID
  std::atomic<uint32_t> slot_{kEveryOtherProcess};  // SetProcessSlot's; none yet: kEveryOtherProcess
  std::atomic<uint32_t> next_{1};
  Counters counters_;
};

}  // namespace softverbs::cm
