#include "tools/cli/pcap_merge.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

namespace softverbs::cli {
namespace {

constexpr uint32_t kMergeMagicMicros = 0xa1b2c3d4;
constexpr uint32_t kMergeLinktypeRaw = 101;
constexpr size_t kMergeFileHeader = 24;
constexpr size_t kMergeRecordHeader = 16;
constexpr uint32_t kMergeMaxRecord = 1u << 20;  // far above any RoCEv2 packet: a corrupt length

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};
using MergeFile = std::unique_ptr<FILE, FileCloser>;

// One input and its next record (header + bytes), if any.
struct MergeInput {
  std::string path;
  MergeFile file;
  uint8_t header[kMergeRecordHeader] = {};
  std::vector<uint8_t> bytes;
  bool has = false;

  uint64_t when() const {
    uint32_t sec, usec;
    memcpy(&sec, header, 4);
    memcpy(&usec, header + 4, 4);
    return uint64_t{sec} * 1000000 + usec;
  }
  // Reads the next record; a truncated tail (a process killed mid-write) ends the input.
  void Next() {
    has = false;
    if (fread(header, 1, sizeof(header), file.get()) != sizeof(header)) return;
    uint32_t len;
    memcpy(&len, header + 8, 4);
    if (len > kMergeMaxRecord) return;
    bytes.resize(len);
    has = fread(bytes.data(), 1, len, file.get()) == len;
  }
};

Status MergeError(const std::string& what) {
  const int e = errno;
  return Status(e ? e : EIO, what + (e ? std::string(": ") + strerror(e) : std::string()));
}

}  // namespace

Status MergePcaps(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<MergeInput> in(inputs.size());
  uint8_t file_header[kMergeFileHeader] = {};
  uint32_t linktype = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in[i].path = inputs[i];
    in[i].file.reset(fopen(inputs[i].c_str(), "rbe"));
    if (!in[i].file) return MergeError("cannot read " + inputs[i]);
    uint8_t h[kMergeFileHeader];
    if (fread(h, 1, sizeof(h), in[i].file.get()) != sizeof(h)) continue;  // created, nothing written yet
    uint32_t magic, type;
    memcpy(&magic, h, 4);
    memcpy(&type, h + 20, 4);
    if (magic != kMergeMagicMicros) return Status(EINVAL, inputs[i] + ": not a little-endian microsecond pcap file");
    if (linktype != 0 && type != linktype)
      return Status(EINVAL, inputs[i] + ": link type " + std::to_string(type) + ", others " + std::to_string(linktype));
    if (linktype == 0) memcpy(file_header, h, sizeof(h));
    linktype = type;
    in[i].Next();
  }
  if (linktype == 0) {  // the header fabric/packet/pcap.cc writes
    const uint32_t words[] = {kMergeMagicMicros, 2 | (4u << 16), 0, 0, 0xffff + 40, kMergeLinktypeRaw};
    memcpy(file_header, words, sizeof(words));
  }
  MergeFile out(fopen(output.c_str(), "wbe"));
  if (!out) return MergeError("cannot create " + output);
  bool ok = fwrite(file_header, 1, sizeof(file_header), out.get()) == sizeof(file_header);
  for (;;) {
    MergeInput* earliest = nullptr;
    for (MergeInput& m : in)
      if (m.has && (earliest == nullptr || m.when() < earliest->when())) earliest = &m;
    if (earliest == nullptr) break;
    ok = ok && fwrite(earliest->header, 1, kMergeRecordHeader, out.get()) == kMergeRecordHeader;
    ok = ok && fwrite(earliest->bytes.data(), 1, earliest->bytes.size(), out.get()) == earliest->bytes.size();
    earliest->Next();
  }
  ok = fflush(out.get()) == 0 && ok;
  if (!ok) return MergeError("cannot write " + output);
  return Status::Ok();
}

}  // namespace softverbs::cli
