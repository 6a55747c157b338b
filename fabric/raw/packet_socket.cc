#include "fabric/raw/packet_socket.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace softverbs::fabric::raw {

bool HaveNetRaw() {
  // The kernel's own check (packet_create: ns_capable(net->user_ns, CAP_NET_RAW)); protocol 0
  // receives nothing.
  UniqueFd probe(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  return probe.valid();
}

Result<PacketSocket> PacketSocket::Open(int ifindex) {
  PacketSocket s;
  s.fd_.reset(socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL)));
  if (!s.fd_.valid()) {
    const int e = errno;
    if (e == EPERM || e == EACCES)
      return Status(EPERM, "a packet socket needs CAP_NET_RAW in this network namespace (packet(7))");
    return Status(e, std::string("socket(AF_PACKET) failed: ") + strerror(e));
  }
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = ifindex;
  if (bind(s.fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return Status(errno, std::string("bind(AF_PACKET) failed: ") + strerror(errno));
  // The kernel moves a received 802.1Q tag into metadata; the auxiliary data brings it back.
  int on = 1;
  setsockopt(s.fd_.get(), SOL_PACKET, PACKET_AUXDATA, &on, sizeof on);
  int buffer = 4 << 20;
  setsockopt(s.fd_.get(), SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  setsockopt(s.fd_.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  s.ifindex_ = ifindex;
  s.buffers_.resize(kBatch * kMaxFrame);
  s.frames_.resize(kBatch);
  return s;
}

Status PacketSocket::Send(std::span<const std::vector<iovec>> frames) {
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = ifindex_;
  to.sll_halen = 6;
  size_t done = 0;
  while (done < frames.size()) {
    mmsghdr msgs[kBatch];
    const size_t n = std::min(kBatch, frames.size() - done);
    for (size_t i = 0; i < n; ++i) {
      msgs[i] = {};
      msgs[i].msg_hdr.msg_name = &to;
      msgs[i].msg_hdr.msg_namelen = sizeof to;
      msgs[i].msg_hdr.msg_iov = const_cast<iovec*>(frames[done + i].data());
      msgs[i].msg_hdr.msg_iovlen = frames[done + i].size();
    }
    const int sent = sendmmsg(fd_.get(), msgs, static_cast<unsigned>(n), 0);
    if (sent < 0) {
      if (errno == EAGAIN || errno == ENOBUFS) {
        // The device queue is full: a NIC would wait for room too.
        pollfd p{fd_.get(), POLLOUT, 0};
        poll(&p, 1, 10);
        continue;
      }
      return Status(errno, std::string("sendmmsg(AF_PACKET) failed: ") + strerror(errno));
    }
    done += static_cast<size_t>(sent);
  }
  return Status::Ok();
}

size_t PacketSocket::ReceiveBatch() {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  sockaddr_ll from[kBatch];
  alignas(cmsghdr) uint8_t control[kBatch][CMSG_SPACE(sizeof(tpacket_auxdata))];
  for (size_t i = 0; i < kBatch; ++i) {
    // 4 bytes of headroom for a tag to put back.
    iov[i] = {buffers_.data() + i * kMaxFrame + 4, kMaxFrame - 4};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &from[i];
    msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    msgs[i].msg_hdr.msg_control = control[i];
    msgs[i].msg_hdr.msg_controllen = sizeof control[i];
  }
  const int n = recvmmsg(fd_.get(), msgs, kBatch, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  if (n <= 0) return 0;
  for (int i = 0; i < n; ++i) {
    uint8_t* data = static_cast<uint8_t*>(iov[i].iov_base);
    size_t len = std::min<size_t>(msgs[i].msg_len, iov[i].iov_len);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c != nullptr; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
      if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
      tpacket_auxdata aux;
      memcpy(&aux, CMSG_DATA(c), sizeof aux);
      if (!(aux.tp_status & TP_STATUS_VLAN_VALID) || len < 12) continue;
      // Put the tag back after the MAC addresses, as it was on the wire.
      memmove(data - 4, data, 12);
      data -= 4;
      const uint16_t tpid = (aux.tp_status & TP_STATUS_VLAN_TPID_VALID) ? aux.tp_vlan_tpid : 0x8100;
      const uint16_t tag[2] = {htons(tpid), htons(aux.tp_vlan_tci)};
      memcpy(data + 12, tag, 4);
      len += 4;
    }
    frames_[i].bytes = {data, len};
    frames_[i].direction = static_cast<PacketDirection>(from[i].sll_pkttype);
  }
  return static_cast<size_t>(n);
}

}  // namespace softverbs::fabric::raw
