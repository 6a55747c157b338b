// What the wire says for a process that dies (docs/cm.md, "A peer that dies"). The kernel's CM
// outlives a process: when it exits or is killed, the kernel destroys its identifiers, and each
// established connection sends its peer a DREQ (cm.c cm_destroy_id), so the peer gets
// RDMA_CM_EVENT_DISCONNECTED. softverbs' CM lives in the process. So a process with connections
// on the wire hands, for each, the MAD to send in its stead to a small guard process
// (`softverbs-cm-guard`, next to the libraries): armed while the connection is established,
// disarmed when it ends. The guard holds one end of a socket pair; when the process is gone (its
// end closes, whatever killed it) the guard sends every MAD still armed, then exits.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs::transport {

// One message of the socket pair (SOCK_SEQPACKET: one record per message).
struct LastWordsRecord {
  static constexpr uint32_t kMagic = 0x53564c57;  // "SVLW"
  static constexpr uint32_t kArm = 1, kDisarm = 2;
  uint32_t magic = kMagic;
  uint32_t op = kArm;
  uint64_t token = 0;    // the arming side's name for it (the connection's local comm ID)
  uint8_t sgid[16]{};    // from: a GID of this host
  uint8_t dgid[16]{};    // to: the peer's GID (its QP1)
  uint8_t mad[256]{};    // the MAD (IBA 13.4.1: 256 bytes)
};

// The guard's book: what is armed now.
class LastWordsBook {
 public:
  // Applies one record; EINVAL for a malformed one (wrong size or magic, unknown op).
  Status Apply(std::span<const uint8_t> message);
  const std::map<uint64_t, LastWordsRecord>& armed() const { return armed_; }

 private:
  std::map<uint64_t, LastWordsRecord> armed_;
};

// Sends `r`'s MAD from QP1 of its sgid to QP1 of its dgid at UDP port `dst_port` (4791 but in
// tests), from an ephemeral source port: the datagram WireFabric::SendMad would send, ICRC
// included.
Status SendLastWords(const LastWordsRecord& r, uint16_t dst_port);

// The process's side: starts the guard on first use. Calls are cheap (one send(2) each), any
// thread. A child of fork() starts its own guard on its first Arm (its parent's is not its).
class LastWords {
 public:
  static LastWords& Get();
  // `guard`: the guard program's path.
  explicit LastWords(std::string guard);

  void Arm(uint64_t token, std::span<const uint8_t, 16> sgid, std::span<const uint8_t, 16> dgid,
           std::span<const uint8_t> mad);
  void Disarm(uint64_t token);

  // Whether a guard listens to this process (started by an Arm, and not lost since).
  bool started() const;

 private:
  Status StartLocked();
  void SendLocked(const LastWordsRecord& r);

  const std::string guard_;
  mutable std::mutex mu_;
  UniqueFd fd_;          // our end of the pair, under mu_
  bool failed_ = false;  // the guard could not be started or is gone: said once, not tried again
};

}  // namespace softverbs::transport
