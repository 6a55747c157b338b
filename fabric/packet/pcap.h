// A capture file writer for RoCEv2 packets (classic pcap, LINKTYPE_RAW = 101: each record is an
// IPv4 or IPv6 packet). The wire fabric only sees UDP payloads; each record gets the IP and UDP
// headers Linux would have put around it (ip_udp.h), so Wireshark/tshark dissect the record as
// UDP port 4791 -> InfiniBand (RRoCE). It backs SOFTVERBS_PCAP=<file>.
//
// This is the packet folder's only I/O: appending to a file it was asked to open.
#pragma once

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "base/status.h"
#include "fabric/packet/ip_udp.h"

namespace softverbs::fabric::packet {

inline constexpr uint32_t kLinktypeRaw = 101;  // tcpdump.org link-layer header types

class PcapWriter {
 public:
  // Creates (truncates) `path` and writes the pcap file header.
  static Result<std::unique_ptr<PcapWriter>> Open(const std::string& path);
  ~PcapWriter();  // flushes and closes
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Appends one packet, stamped now (CLOCK_REALTIME). Safe from any thread; records never
  // interleave.
  Status Append(const IpUdpInfo& flow, std::span<const uint8_t> udp_payload);
  Status Append(const IpUdpInfo& flow, std::span<const uint8_t> udp_payload, timespec when);
  // Flushes buffered records to the file.
  Status Flush();
  // Flushes and closes; later appends fail. Returns the first write error, if any.
  Status Close();

 private:
  explicit PcapWriter(FILE* file) : file_(file) {}
  Status WriteLocked(const void* data, size_t len);

  std::mutex mu_;
  FILE* file_;  // null once closed
};

}  // namespace softverbs::fabric::packet
