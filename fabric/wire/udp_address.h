// An IPv4 or IPv6 UDP endpoint (address + port), as the socket calls take it.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace softverbs::fabric::wire {

class UdpAddress {
 public:
  UdpAddress() = default;
  // "10.0.0.1" or "fd00::1" (no brackets, no scope: RoCE GIDs are global addresses).
  static Result<UdpAddress> Parse(const std::string& ip, uint16_t port);
  // From what recvmsg/getsockname filled in; empty if the family is neither.
  static UdpAddress FromSockaddr(const sockaddr* sa, socklen_t len);

  bool empty() const { return len_ == 0; }
  int family() const { return storage_.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  // 0.0.0.0 or ::, which a group member never binds (steering is per local IP).
  bool IsWildcard() const;
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t len() const { return len_; }
  // "10.0.0.1:4791", "[fd00::1]:4791".
  std::string ToString() const;
  std::string IpString() const;

  friend bool operator==(const UdpAddress& a, const UdpAddress& b);

 private:
  sockaddr_storage storage_{};
  socklen_t len_ = 0;
};

}  // namespace softverbs::fabric::wire
