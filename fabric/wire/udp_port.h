// One process's membership of the per-user SO_REUSEPORT group on <local IP>:4791: the socket
// through which it sends and receives RoCEv2 datagrams (UDP payload = BTH onwards).
//
// The kernel steers each arriving datagram to the member that owns its BTH DestQP with a classic
// BPF program (steering_program.h) generated from the group's SteeringTable. Unprivileged: cBPF
// reuseport programs need no capability (net/core/filter.c sk_reuseport_attach_filter). Why this
// design, its stale-steering window and its one-user limit: fabric/wire/README.md.
//
// Not thread-safe: one thread at a time calls Send*/ReceiveBatch/Resteer on a port.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/wire/faults.h"
#include "fabric/wire/steering_table.h"
#include "fabric/wire/udp_address.h"

namespace softverbs::fabric::wire {

inline constexpr uint16_t kRoceV2Port = 4791;  // IANA "roce" (IBA Annex A17.2.1)

struct TxDatagram {
  const UdpAddress* dest = nullptr;
  uint16_t src_port = 0;            // 0: the port's own (4791); else sent from <local IP>:src_port
  std::span<const iovec> pieces;    // gathered into one datagram
};

struct RxDatagram {
  uint8_t* buf = nullptr;  // the caller's buffer...
  uint32_t capacity = 0;   // ...of this many bytes (a datagram that does not fit is dropped)
  uint32_t length = 0;     // out: the datagram's size
  // out: 0, or the size of each of the datagrams that UDP GRO joined into this one (all but the
  // last exactly this size; udp(7) UDP_GRO): the caller cuts them apart again.
  uint32_t segment = 0;
  UdpAddress source;       // out: who sent it
};

// A datagram that reached this member but whose DestQP `owner` (kNoMember: nobody) owns: steering
// was stale, or the QPN is unknown. The host layer forwards it to the owner (or drops it).
using MisdeliveredFn =
    std::function<void(std::span<const uint8_t> datagram, const UdpAddress& source, MemberId owner)>;

struct UdpPortOptions {
  UdpAddress local;                   // the advertised GID's IP (never a wildcard) and the port
  SteeringTable* steering = nullptr;  // the group's table (outlives the port); null: unsteered
  MemberId member = kNoMember;        // this member's name in `steering`
  MisdeliveredFn misdelivered;        // for datagrams another member owns; unset: they are dropped
  std::optional<std::string> faults;  // a fault spec (fault_spec.h); nullopt: SOFTVERBS_FAULTS
  // UDP_SEGMENT sends. Over IPv4 the kernel numbers the segments of one GSO send 0, 1, 2... (a
  // plain send on an unconnected DF socket carries ID 0), and RoCEv2's ICRC covers that field:
  // SendGso moves each segment's ICRC to its ID (rxe drops a packet whose ICRC does not match).
  bool gso = true;
  // UDP_GRO receives (unsteered members only: the kernel's steering program sees only the first
  // of the datagrams it would join). Callers then give ReceiveBatch slots of receive_bytes().
  bool gro = true;
};

struct UdpPortStats {
  uint64_t sent = 0, received = 0;      // datagrams through the socket
  uint64_t misdelivered = 0;            // handed to the Misdelivered hook (or dropped without one)
  uint64_t runts = 0, truncated = 0;    // dropped: shorter than a BTH / larger than the buffer
};

class UdpPort {
 public:
  // Joins the group (bind under the steering lock) and re-attaches the group's program. A port
  // taken by a socket this user cannot share gives EADDRINUSE naming the likely holder.
  static Result<std::unique_ptr<UdpPort>> Open(UdpPortOptions options);
  // Leaves the group and re-steers the members that remain.
  ~UdpPort();
  UdpPort(const UdpPort&) = delete;
  UdpPort& operator=(const UdpPort&) = delete;

  // Readable when ReceiveBatch has something to do: the socket itself, or, with faults
  // configured, an epoll fd over the socket and the timer of held (delayed, reordered) datagrams.
  int fd() const { return epoll_.valid() ? epoll_.get() : sock_.get(); }
  const UdpAddress& local() const { return local_; }
  const UdpPortStats& stats() const { return stats_; }
  const FaultInjector* faults() const { return faults_.get(); }
  // The receive buffer a slot needs: a jumbo frame's datagram, or with GRO the 64 KiB a joined
  // datagram can reach.
  uint32_t receive_bytes() const { return gro_ ? 65535 : 9216; }

  // Regenerates the group's program from the table and attaches it (after QPNs change owner).
  Status Resteer();

  // `wanted` if datagrams can leave from that source port (its sender socket is bound now), else
  // the port's own (taken by someone this user cannot share with; logged once).
  uint16_t UsableSourcePort(uint16_t wanted);
  Status Send(const UdpAddress& dest, uint16_t src_port, std::span<const iovec> pieces);
  // Sends a prefix of `batch` (sendmmsg; runs of equal-size datagrams to one destination as one
  // UDP_SEGMENT send); returns how many were sent (the rest: try again).
  // EAGAIN when the socket buffer is full, EMSGSIZE when a datagram exceeds the path MTU (DF).
  Result<size_t> SendBatch(std::span<const TxDatagram> batch);
  // Never blocks: fills the first n entries of `slots` (recvmmsg) with datagrams this member owns
  // and returns n (0: nothing pending). Entries may be permuted: buffers move with their datagrams.
  Result<size_t> ReceiveBatch(std::span<RxDatagram> slots);

 private:
  explicit UdpPort(UdpPortOptions options);
  Status Join();
  Status SetUpFaults(const FaultSpec& spec);
  Status AttachLocked(int fd);
  Result<int> SenderFor(uint16_t src_port);
  Result<size_t> SendRun(int fd, std::span<const TxDatagram> run);
  Result<size_t> SendGso(int fd, std::span<const TxDatagram> run);
  size_t GsoRunLength(std::span<const TxDatagram> b) const;
  Result<size_t> SendFaulty(std::span<const TxDatagram> batch);
  Status SendOne(const Datagram& dg);
  void ServiceFaults();
  void InjectReceived(const RxDatagram& d, uint64_t now);
  void ArmTimer();
  bool Accept(RxDatagram& d);
  size_t TakeReady(std::span<RxDatagram> slots);

  UdpAddress local_;
  SteeringTable* steering_;
  MemberId member_;
  MisdeliveredFn misdelivered_;
  UniqueFd sock_;
  std::map<uint16_t, UniqueFd> senders_;  // per source port other than local_'s
  std::unique_ptr<FaultInjector> faults_;
  UniqueFd timer_, epoll_;                // only with faults
  std::vector<Datagram> rx_ready_;        // fault path: received, released, not yet taken
  bool gso_ok_ = true;                    // UDP_SEGMENT works on this route
  bool gro_ = false;                      // UDP_GRO is on: datagrams may arrive joined
  UdpPortStats stats_;
};

// Applies the socket options a member needs (SO_REUSEPORT, IPv6: V6ONLY and UDP_NO_CHECK6_RX,
// DF) to a socket of `local`'s family; shared with the senders and with softverbs-relay.
Status ConfigureRoceSocket(int fd, const UdpAddress& local);

}  // namespace softverbs::fabric::wire
