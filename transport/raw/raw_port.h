// A process's raw Ethernet port on one interface: its packet socket (fabric/raw), the flow
// table of its raw QPs, and the thread that receives frames and steers them. Shared by the
// process's raw QPs on that interface; the last one to let go stops the thread.
//
// Frames between QPs of this host (a NIC's loopback): a frame sent to the interface's own MAC
// address, or to a group (multicast/broadcast) address, is also steered to this process's rules
// directly, but not to the QPs of the sender's own context unless they allow self-loopback
// (mlx5 blocks loopback within a transport domain unless a TIR asks for it: RawSink); other
// processes of the namespace get a unicast frame to the interface's MAC through the kernel's
// copy of outgoing frames. On a loopback interface the kernel brings every sent frame back, and
// that copy is the only one (its sender unknown, so nothing is blocked there).
//
// No thread spins: the receive thread sleeps in poll() until frames arrive.
#pragma once

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "fabric/raw/interface.h"
#include "fabric/raw/packet_socket.h"
#include "transport/raw/egress_table.h"
#include "transport/raw/flow_table.h"

namespace softverbs::transport::raw {

struct RawCounters {
  std::atomic<uint64_t> sent{0}, received{0}, steered{0}, unsteered{0};
};

class RawPort {
 public:
  // This process's port on `itf` (opened on first use). EPERM without CAP_NET_RAW.
  static Result<std::shared_ptr<RawPort>> Get(const fabric::raw::Interface& itf);
  ~RawPort();

  const fabric::raw::Interface& interface() const { return interface_; }
  RawCounters& counters() { return counters_; }

  // A rule with `egress` goes to the transmit side (egress_table.h), the others steer receives.
  uint64_t AddRule(const FlowRule& rule, RawSink* sink);
  bool RemoveRule(uint64_t id);
  // Sends whole frames (sendmmsg); loops back those addressed to this port (see above).
  Status Send(std::span<const std::vector<uint8_t>> frames, const RawSink* from);

 private:
  RawPort(fabric::raw::Interface itf, fabric::raw::PacketSocket socket, UniqueFd stop);
  void Run();
  void Steer(std::span<const uint8_t> frame, FrameSource source, const RawSink* sender);
  // An ESP packet's delivery under a DECRYPT rule: checked and decrypted first (dropped if its ICV
  // fails or it has no room for IV, trailer and ICV).
  void DeliverDecrypted(const Delivery& d, std::span<const uint8_t> frame);
  bool AddressedHere(const fabric::raw::FrameView& v, bool group_too) const;

  const fabric::raw::Interface interface_;
  fabric::raw::PacketSocket socket_;
  UniqueFd stop_;  // eventfd: the thread ends
  std::shared_mutex mu_;  // the table: shared while steering, exclusive to change it
  FlowTable table_;
  EgressTable egress_;
  std::atomic<bool> has_egress_{false};  // Send copies frames through egress_ only when set
  RawCounters counters_;
  std::thread thread_;
};

}  // namespace softverbs::transport::raw
