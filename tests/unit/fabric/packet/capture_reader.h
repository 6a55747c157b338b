// Test helper: reads the RoCEv2 packets of a classic pcap file (Ethernet or LINKTYPE_RAW), with
// the flow (addresses, ports, IPv4 ID, ...) taken from each packet's own IP and UDP headers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/packet/ip_udp.h"

namespace softverbs::fabric::packet::testing {

struct CapturedPacket {
  IpUdpInfo flow;
  std::vector<uint8_t> ip_udp;       // the IP + UDP headers as captured
  std::vector<uint8_t> udp_payload;  // BTH ... ICRC
};

inline std::string DataDir() { return std::string(SV_UNIT_TEST_DIR) + "/fabric/packet/data/"; }

inline std::vector<uint8_t> ReadFile(const std::string& path) {
  std::vector<uint8_t> bytes;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return bytes;
  uint8_t buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  fclose(f);
  return bytes;
}

inline uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// Fills `pkt` from an IP packet; false if it is not UDP to port 4791 or is malformed.
inline bool FromIpPacket(const uint8_t* ip, size_t len, CapturedPacket* pkt) {
  IpUdpInfo& f = pkt->flow;
  size_t ihl;
  if (len >= 20 && ip[0] >> 4 == 4) {
    ihl = (ip[0] & 0xf) * 4u;
    if (ip[9] != 17 || len < ihl + 8) return false;
    f.ipv6 = false;
    f.traffic_class = ip[1];
    f.ip_id = Be16(ip + 4);
    f.dont_fragment = ip[6] & 0x40;
    f.hop_limit = ip[8];
    memcpy(f.src.data(), ip + 12, 4);
    memcpy(f.dst.data(), ip + 16, 4);
  } else if (len >= 48 && ip[0] >> 4 == 6) {
    ihl = 40;
    if (ip[6] != 17) return false;
    f.ipv6 = true;
    f.traffic_class = static_cast<uint8_t>((ip[0] & 0xf) << 4 | ip[1] >> 4);
    f.flow_label = (ip[1] & 0xfu) << 16 | Be16(ip + 2);
    f.hop_limit = ip[7];
    memcpy(f.src.data(), ip + 8, 16);
    memcpy(f.dst.data(), ip + 24, 16);
  } else {
    return false;
  }
  const uint8_t* udp = ip + ihl;
  f.src_port = Be16(udp);
  f.dst_port = Be16(udp + 2);
  size_t udp_len = Be16(udp + 4);
  if (f.dst_port != kRoceV2Port || udp_len < 8 || ihl + udp_len > len) return false;
  pkt->ip_udp.assign(ip, udp + 8);
  pkt->udp_payload.assign(udp + 8, udp + udp_len);
  return true;
}

// All RoCEv2 packets of the file, in order. Empty if the file cannot be read.
inline std::vector<CapturedPacket> ReadCapture(const std::string& path) {
  std::vector<CapturedPacket> out;
  std::vector<uint8_t> file = ReadFile(path);
  if (file.size() < 24 || (Le32(file.data()) != 0xa1b2c3d4 && Le32(file.data()) != 0xa1b23c4d))
    return out;
  uint32_t linktype = Le32(file.data() + 20);
  for (size_t off = 24; off + 16 <= file.size();) {
    uint32_t incl = Le32(file.data() + off + 8);
    off += 16;
    if (off + incl > file.size()) break;
    const uint8_t* frame = file.data() + off;
    off += incl;
    size_t skip = 0;
    if (linktype == 1) {  // Ethernet II, IPv4 or IPv6 ethertype
      if (incl < 14) continue;
      uint16_t type = Be16(frame + 12);
      if (type != 0x0800 && type != 0x86dd) continue;
      skip = 14;
    } else if (linktype != 101) {
      continue;
    }
    CapturedPacket pkt;
    if (FromIpPacket(frame + skip, incl - skip, &pkt)) out.push_back(std::move(pkt));
  }
  return out;
}

// The five rxe captures and the number of RoCEv2 packets their .txt decodes list.
struct CaptureFile {
  const char* name;
  size_t packets;
};
inline constexpr CaptureFile kCaptures[] = {
    {"g2h_rc_ud.pcap", 15},
    {"rxe_rc_pingpong.pcap", 18},
    {"rxe_rping_cm.pcap", 29},
    {"rxe_ud_pingpong.pcap", 4},
    {"rxe_write_read_atomic.pcap", 40},
};

inline std::vector<CapturedPacket> AllCapturedPackets() {
  std::vector<CapturedPacket> all;
  for (const CaptureFile& c : kCaptures) {
    auto pkts = ReadCapture(DataDir() + c.name);
    all.insert(all.end(), pkts.begin(), pkts.end());
  }
  return all;
}

}  // namespace softverbs::fabric::packet::testing
