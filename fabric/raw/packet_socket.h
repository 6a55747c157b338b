// An AF_PACKET socket on one interface: whole Ethernet frames out and in, in batches
// (sendmmsg / recvmmsg). Opening one needs CAP_NET_RAW in the interface's network namespace
// (packet(7)); without it the kernel refuses with EPERM, and so does this.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs::fabric::raw {

// True if this process may open packet sockets: CAP_NET_RAW in its network namespace.
bool HaveNetRaw();

// sockaddr_ll.sll_pkttype of a received frame (packet(7)).
enum class PacketDirection : uint8_t { kHost = 0, kBroadcast = 1, kMulticast = 2, kOtherHost = 3, kOutgoing = 4 };

struct ReceivedFrame {
  std::span<const uint8_t> bytes;  // the whole frame, its 802.1Q tag put back where the kernel took it
  PacketDirection direction = PacketDirection::kHost;
};

class PacketSocket {
 public:
  static constexpr size_t kBatch = 32;
  static constexpr size_t kMaxFrame = 65536 + 4;  // a GSO-sized frame plus a re-inserted tag

  // A socket bound to interface `ifindex`, all protocols, non-blocking.
  static Result<PacketSocket> Open(int ifindex);
  PacketSocket(PacketSocket&&) noexcept = default;
  PacketSocket& operator=(PacketSocket&&) noexcept = default;

  int fd() const { return fd_.get(); }
  // Sends each frame (one gather list per frame) in as few system calls as the kernel takes.
  Status Send(std::span<const std::vector<iovec>> frames);
  // Reads up to kBatch frames without blocking; `on_frame` sees each. Returns how many.
  template <typename OnFrame>
  size_t Receive(OnFrame&& on_frame);

 private:
  PacketSocket() = default;
  // The batch read: fills frames_; returns the count.
  size_t ReceiveBatch();
  UniqueFd fd_;
  int ifindex_ = 0;
  std::vector<uint8_t> buffers_;  // kBatch * kMaxFrame
  std::vector<ReceivedFrame> frames_;
};

template <typename OnFrame>
size_t PacketSocket::Receive(OnFrame&& on_frame) {
  const size_t n = ReceiveBatch();
  for (size_t i = 0; i < n; ++i) on_frame(frames_[i]);
  return n;
}

}  // namespace softverbs::fabric::raw
