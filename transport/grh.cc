#include "transport/grh.h"

#include <arpa/inet.h>

#include <cstring>

namespace softverbs::transport {

bool IsIpv4MappedGid(const uint8_t gid[16]) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(gid, kPrefix, 12) == 0;
}

uint8_t RoceL3Type(const uint8_t grh[kGrhBytes]) {
  static const uint8_t kZero[20] = {};
  return memcmp(grh, kZero, 20) == 0 && grh[20] == 0x45 ? 2 : 1;
}

void BuildGrh(uint8_t out[kGrhBytes], const Addressing& a, uint32_t payload) {
  memset(out, 0, kGrhBytes);
  // The UDP payload after the IP header: UDP (8) + BTH (12) + DETH (8) + the message + ICRC (4).
  const uint32_t udp_bytes = 8 + 12 + 8 + payload + 4;
  if (IsIpv4MappedGid(a.sgid) && IsIpv4MappedGid(a.dgid)) {
    uint8_t* ip = out + 20;
    ip[0] = 0x45;
    ip[1] = a.traffic_class;
    const uint16_t total = htons(static_cast<uint16_t>(20 + udp_bytes));
    memcpy(ip + 2, &total, 2);
    ip[8] = a.hop_limit ? a.hop_limit : 64;
    ip[9] = 17;  // UDP
    memcpy(ip + 12, a.sgid + 12, 4);
    memcpy(ip + 16, a.dgid + 12, 4);
    return;
  }
  const uint32_t vtf = htonl(6u << 28 | static_cast<uint32_t>(a.traffic_class) << 20 | (a.flow_label & 0xfffff));
  memcpy(out, &vtf, 4);
  const uint16_t len = htons(static_cast<uint16_t>(udp_bytes));
  memcpy(out + 4, &len, 2);
  out[6] = 17;  // next header: UDP
  out[7] = a.hop_limit;
  memcpy(out + 8, a.sgid, 16);
  memcpy(out + 24, a.dgid, 16);
}

}  // namespace softverbs::transport
