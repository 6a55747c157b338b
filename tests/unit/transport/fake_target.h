// A fake fabric for the responder's tests: the target QP's endpoint in plain memory, its queues
// in this process's arena, bytes moved with memcpy, so each rule is seen without any fabric's
// mechanism.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "fabric/host/host_directory.h"
#include "transport/indirect_key.h"
#include "transport/target_qp.h"

namespace softverbs::transport {

// The fake fabric: the target QP's endpoint in plain memory, its queues in this process's arena.
class FakeTarget final : public TargetQp {
 public:
  explicit FakeTarget(fabric::LocalProcess& local) : local_(local) {}
  QpEndpoint& endpoint() const override { return e_; }
  uint32_t process_slot() const override { return local_.slot() + slot_offset; }
  fabric::HostRegistry& registry() const override { return local_.registry(); }
  void* Resolve(fabric::SharedRef ref) const override { return local_.At(ref); }
  Status Move(bool write, const iovec* local, size_t nl, const PinnedPieces& remote) const override {
    ++moves;
    std::vector<uint8_t> bytes;
    const iovec* from = write ? local : remote.data();
    const size_t nf = write ? nl : remote.size();
    for (size_t i = 0; i < nf; ++i)
      bytes.insert(bytes.end(), static_cast<uint8_t*>(from[i].iov_base), static_cast<uint8_t*>(from[i].iov_base) + from[i].iov_len);
    const iovec* to = write ? remote.data() : local;
    const size_t nt = write ? remote.size() : nl;
    size_t at = 0;
    for (size_t i = 0; i < nt && at < bytes.size(); ++i) {
      const size_t n = std::min(to[i].iov_len, bytes.size() - at);
      memcpy(to[i].iov_base, bytes.data() + at, n);
      at += n;
    }
    return Status::Ok();
  }
  Result<uint64_t> AtomicUpdate(const PinnedPieces& remote, uint64_t (*op)(uint64_t, const void*),
                                const void* arg) const override {
    auto* word = static_cast<uint64_t*>(remote.data()[0].iov_base);
    const uint64_t before = *word;
    *word = op(before, arg);
    return before;
  }
  void Signal(int, uint64_t) const override { ++signals; }
  bool IsAlive() const override { return alive; }
  bool LandsInCompletion() const override { return lands; }
  ReceiveKeys* receive_keys() const override { return keys; }

  mutable QpEndpoint e_{};
  mutable int moves = 0;
  mutable int signals = 0;
  bool alive = true;
  bool lands = false;
  ReceiveKeys* keys = nullptr;  // the sender's kept receive keys (transport/receive_keys.h), if any
  uint32_t slot_offset = 0;  // > 0: the target is another process's QP (this one's keys are imports for it)

 private:
  fabric::LocalProcess& local_;
};

}  // namespace softverbs::transport
