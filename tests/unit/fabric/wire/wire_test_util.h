// Helpers shared by the wire tests: addresses, BTH-shaped datagrams, plain sockets, draining a port.
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/unique_fd.h"
#include "fabric/packet/icrc.h"
#include "fabric/packet/opcode.h"
#include "fabric/wire/udp_port.h"

namespace softverbs::fabric::wire::testing_util {

inline UdpAddress Addr(const std::string& ip, uint16_t port) {
  Result<UdpAddress> a = UdpAddress::Parse(ip, port);
  EXPECT_TRUE(a.ok()) << ip;
  return a.ok() ? a.value() : UdpAddress();
}

// A plain UDP socket bound to ip:port (0: any free port).
inline UniqueFd PlainSocket(const std::string& ip, uint16_t port = 0) {
  const UdpAddress a = Addr(ip, port);
  UniqueFd fd(socket(a.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (a.family() == AF_INET6) {
    int one = 1;
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  if (bind(fd.get(), a.sa(), a.len()) != 0) return UniqueFd();
  return fd;
}

inline uint16_t BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return UdpAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len).port();
}

// A port no socket on `ip` holds right now (the kernel's choice of a free ephemeral port).
inline uint16_t FreePort(const std::string& ip) {
  UniqueFd probe = PlainSocket(ip);
  return probe.valid() ? BoundPort(probe.get()) : 0;
}

// A BTH-shaped datagram: DestQP `qpn` in bytes 5..7, then `seq` (4 bytes), padded to `size`.
inline std::vector<uint8_t> Bth(uint32_t qpn, uint32_t seq, size_t size = 64) {
  std::vector<uint8_t> p(size, 0x5a);
  p[0] = 0x04;
  p[4] = 0;
  p[5] = static_cast<uint8_t>(qpn >> 16);
  p[6] = static_cast<uint8_t>(qpn >> 8);
  p[7] = static_cast<uint8_t>(qpn);
  for (int i = 0; i < 4; ++i) p[12 + i] = static_cast<uint8_t>(seq >> (8 * i));
  return p;
}
inline uint32_t QpnOf(const std::vector<uint8_t>& p) { return (uint32_t{p[5]} << 16) | (uint32_t{p[6]} << 8) | p[7]; }
inline uint32_t SeqOf(const std::vector<uint8_t>& p) {
  uint32_t s = 0;
  for (int i = 0; i < 4; ++i) s |= uint32_t{p[12 + i]} << (8 * i);
  return s;
}

inline bool SendTo(int fd, const UdpAddress& dest, const std::vector<uint8_t>& bytes) {
  return sendto(fd, bytes.data(), bytes.size(), 0, dest.sa(), dest.len()) == static_cast<ssize_t>(bytes.size());
}

struct Received {
  std::vector<uint8_t> bytes;
  UdpAddress source;
  bool joined = false;  // cut from a datagram that UDP GRO joined from several
};

// Receives from `port` until `want` datagrams came or nothing came for `quiet_ms` (a bound, not
// an assertion on time: a lost datagram ends the wait instead of hanging the test). Datagrams GRO
// joined are cut apart, as the wire fabric does.
inline std::vector<Received> Drain(UdpPort& port, size_t want, int quiet_ms = 2000) {
  std::vector<Received> got;
  const uint32_t bytes = port.receive_bytes();
  std::vector<std::vector<uint8_t>> bufs(16, std::vector<uint8_t>(bytes));
  std::vector<RxDatagram> slots(16);
  while (got.size() < want) {
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = RxDatagram{bufs[i].data(), bytes, 0, 0, {}};
    Result<size_t> n = port.ReceiveBatch(slots);
    EXPECT_TRUE(n.ok()) << n.status().rule();
    if (!n.ok()) break;
    for (size_t i = 0; i < *n; ++i) {
      const RxDatagram& d = slots[i];
      const uint32_t step = d.segment != 0 ? d.segment : d.length;
      for (uint32_t at = 0; at < d.length; at += step)
        got.push_back({std::vector<uint8_t>(d.buf + at, d.buf + at + std::min(step, d.length - at)), d.source,
                       d.segment != 0});
    }
    if (*n > 0 || got.size() >= want) continue;
    pollfd p{port.fd(), POLLIN, 0};
    if (poll(&p, 1, quiet_ms) <= 0) break;
  }
  return got;
}

// Over IPv4 a UDP GSO send moves segment k's ICRC (its last 4 bytes) to IPv4 ID k (udp_port.h):
// the ID that `got` carries `sent`'s ICRC for, if the rest of its bytes are `sent`'s; else nullopt.
inline std::optional<uint16_t> IcrcMovedTo(const std::vector<uint8_t>& got, const std::vector<uint8_t>& sent) {
  const size_t n = sent.size(), icrc = packet::kIcrcBytes;
  if (got.size() != n || n < 16 || !std::equal(got.begin(), got.end() - icrc, sent.begin())) return std::nullopt;
  const uint32_t diff = packet::LoadIcrc(&got[n - icrc]) ^ packet::LoadIcrc(&sent[n - icrc]);
  for (uint32_t k = 0; k < 64; ++k)
    if (packet::Ipv4IdIcrcEffect(static_cast<uint16_t>(k), n) == diff) return static_cast<uint16_t>(k);
  return std::nullopt;
}

}  // namespace softverbs::fabric::wire::testing_util
