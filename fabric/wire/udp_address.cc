#include "fabric/wire/udp_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace softverbs::fabric::wire {

Result<UdpAddress> UdpAddress::Parse(const std::string& ip, uint16_t port) {
  UdpAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage_);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage_);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len_ = sizeof(sockaddr_in);
    return a;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.len_ = sizeof(sockaddr_in6);
    return a;
  }
  return Invalid("'" + ip + "' is neither an IPv4 nor an IPv6 address");
}

UdpAddress UdpAddress::FromSockaddr(const sockaddr* sa, socklen_t len) {
  UdpAddress a;
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    memcpy(&a.storage_, sa, sizeof(sockaddr_in));
    a.len_ = sizeof(sockaddr_in);
  } else if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    memcpy(&a.storage_, sa, sizeof(sockaddr_in6));
    a.len_ = sizeof(sockaddr_in6);
  }
  return a;
}

uint16_t UdpAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

void UdpAddress::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = htons(port);
}

bool UdpAddress::IsWildcard() const {
  if (family() == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (family() == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  return false;
}

std::string UdpAddress::IpString() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, buf, sizeof(buf));
  if (family() == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, buf, sizeof(buf));
  return buf;
}

std::string UdpAddress::ToString() const {
  // Appended, not `"[" + std::string`: at -O3 (Release) GCC 12 warns of an impossible overlap
  // in that operator+ (-Wrestrict, a known false positive of GCC 12).
  std::string out;
  if (family() == AF_INET6) out += '[';
  out += IpString();
  if (family() == AF_INET6) out += ']';
  out += ':';
  out += std::to_string(port());
  return out;
}

bool operator==(const UdpAddress& a, const UdpAddress& b) {
  if (a.len_ != b.len_ || a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b.storage_);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b.storage_);
    return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
  }
  return a.len_ == 0;
}

}  // namespace softverbs::fabric::wire
