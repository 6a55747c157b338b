// What the wire responder tests share (packet_responder_test.cc, rc_responder_test.cc,
// rc_responder_path_test.cc, rc_responder_rendezvous_test.cc): the QP their packets arrive at,
// the flows packets come in and responses leave on, and a message built into its packets by the
// wire's own builder.
#pragma once

#include <sys/uio.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "fabric/packet/ip_udp.h"
#include "transport/qp_endpoint.h"
#include "transport/request.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::core::wire_testing {

inline constexpr uint32_t kWireMtu = 256;

// QP 0x1234 of `type` in RTS, connected to QP 0x777 at a path MTU of kWireMtu bytes, of PD `pd`,
// its wire state ready; its queues and access are each test's.
inline void ConnectWireQp(transport::QpEndpoint& e, uint32_t type, uint64_t pd) {
  e.wire.lock.Init();
  e.state.store(transport::qp_state::kRts);
  e.qp_num = 0x1234;
  e.type = type;
  e.mtu = kWireMtu;
  e.dest_qp_num = 0x777;
  e.pd = pd;
  e.async_fd = -1;
}

// Requests come from 10.0.0.2 to 10.0.0.1 (source port 4791); responses go back.
inline fabric::packet::IpUdpInfo RequestFlow() {
  const uint8_t from[4] = {10, 0, 0, 2}, to[4] = {10, 0, 0, 1};
  return fabric::packet::IpUdpInfo::V4(from, to, 4791);
}
inline fabric::packet::IpUdpInfo ResponseFlow() {
  const uint8_t from[4] = {10, 0, 0, 1}, to[4] = {10, 0, 0, 2};
  return fabric::packet::IpUdpInfo::V4(from, to, 4791);
}

// A message of `op` to that QP at PSN `psn` of the one piece `piece` (which must outlive it);
// the rest (RETH, immediate) is the test's.
inline transport::Request MessageTo(uint32_t type, transport::WrOpcode op, const iovec* piece, uint32_t psn) {
  transport::Request r;
  r.qp_type = type;
  r.opcode = op;
  r.dest_qp = 0x1234;
  r.psn = psn;
  r.mtu = kWireMtu;
  r.local = piece;
  r.local_count = 1;
  r.length = piece->iov_len;
  return r;
}

// The packets of `r` on `flow`, as the wire's builder makes them (path MTU <= kWireMtu).
inline std::vector<std::vector<uint8_t>> BuildPackets(const transport::Request& r,
                                                      const fabric::packet::IpUdpInfo& flow) {
  std::vector<std::vector<uint8_t>> out;
  uint8_t buffer[512];
  EXPECT_TRUE(transport::BuildMessage(r, flow, buffer, [&](std::span<const uint8_t> p) {
                out.emplace_back(p.begin(), p.end());
                return Status::Ok();
              }).ok());
  return out;
}

}  // namespace softverbs::core::wire_testing
