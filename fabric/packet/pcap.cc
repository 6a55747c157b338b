#include "fabric/packet/pcap.h"

#include <cerrno>
#include <cstring>

namespace softverbs::fabric::packet {
namespace {

constexpr uint32_t kPcapMagicMicros = 0xa1b2c3d4;  // written in host order: readers detect it
constexpr uint32_t kSnapLen = 0xffff + kIpv6HeaderBytes;

struct FileHeader {
  uint32_t magic;
  uint16_t version_major;
  uint16_t version_minor;
  int32_t thiszone;
  uint32_t sigfigs;
  uint32_t snaplen;
  uint32_t linktype;
};

struct RecordHeader {
  uint32_t ts_sec;
  uint32_t ts_usec;
  uint32_t incl_len;
  uint32_t orig_len;
};

Status Errno(const std::string& what) {
  int e = errno;
  return Status(e ? e : EIO, what + ": " + strerror(e));
}

}  // namespace

Result<std::unique_ptr<PcapWriter>> PcapWriter::Open(const std::string& path) {
  FILE* f = fopen(path.c_str(), "wbe");
  if (f == nullptr) return Errno("pcap: cannot create " + path);
  std::unique_ptr<PcapWriter> w(new PcapWriter(f));
  FileHeader h{kPcapMagicMicros, 2, 4, 0, 0, kSnapLen, kLinktypeRaw};
  std::lock_guard lock(w->mu_);
  SV_RETURN_IF_ERROR(w->WriteLocked(&h, sizeof(h)));
  return w;
}

PcapWriter::~PcapWriter() { (void)Close(); }

Status PcapWriter::WriteLocked(const void* data, size_t len) {
  if (file_ == nullptr) return Invalid("pcap: the capture file is closed");
  if (fwrite(data, 1, len, file_) != len) return Errno("pcap: write failed");
  return Status::Ok();
}

Status PcapWriter::Append(const IpUdpInfo& flow, std::span<const uint8_t> udp_payload) {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return Append(flow, udp_payload, now);
}

Status PcapWriter::Append(const IpUdpInfo& flow, std::span<const uint8_t> udp_payload,
                          timespec when) {
  if (udp_payload.size() > 0xffff - kUdpHeaderBytes)
    return Invalid("pcap: a UDP payload larger than a datagram");
  uint8_t headers[kMaxIpUdpHeaderBytes];
  size_t n = WriteIpUdpHeaders(flow, udp_payload.size(), /*checksums=*/true, udp_payload.data(),
                               headers);
  uint32_t len = static_cast<uint32_t>(n + udp_payload.size());
  RecordHeader r{static_cast<uint32_t>(when.tv_sec), static_cast<uint32_t>(when.tv_nsec / 1000),
                 len, len};
  std::lock_guard lock(mu_);
  SV_RETURN_IF_ERROR(WriteLocked(&r, sizeof(r)));
  SV_RETURN_IF_ERROR(WriteLocked(headers, n));
  return WriteLocked(udp_payload.data(), udp_payload.size());
}

Status PcapWriter::Flush() {
  std::lock_guard lock(mu_);
  if (file_ == nullptr) return Invalid("pcap: the capture file is closed");
  if (fflush(file_) != 0) return Errno("pcap: flush failed");
  return Status::Ok();
}

Status PcapWriter::Close() {
  std::lock_guard lock(mu_);
  if (file_ == nullptr) return Status::Ok();
  bool failed = fflush(file_) != 0 || ferror(file_);
  Status flush_status = failed ? Errno("pcap: flush failed") : Status::Ok();
  int rc = fclose(file_);
  file_ = nullptr;
  if (!flush_status.ok()) return flush_status;
  if (rc != 0) return Errno("pcap: close failed");
  return Status::Ok();
}

}  // namespace softverbs::fabric::packet
