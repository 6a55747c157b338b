#include "transport/responder_signature.h"

#include <cstring>
#include <vector>

#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

using access_bit::kLocalWrite;

// The bytes of `v` (n pieces of this process) from byte `skip` on, `length` of them.
std::vector<uint8_t> Flatten(const iovec* v, size_t n, uint64_t skip, uint64_t length) {
  std::vector<uint8_t> out(length);
  uint64_t done = 0;
  for (size_t i = 0; i < n && done < length; ++i) {
    uint64_t len = v[i].iov_len;
    const auto* p = static_cast<const uint8_t*>(v[i].iov_base);
    if (skip >= len) {
      skip -= len;
      continue;
    }
    const uint64_t take = std::min(len - skip, length - done);
    memcpy(out.data() + done, p + skip, take);
    done += take;
    skip = 0;
  }
  out.resize(done);
  return out;
}

// Copies `bytes` out to the n pieces of this process `v`.
void Spread(const uint8_t* bytes, uint64_t length, const iovec* v, size_t n) {
  for (size_t i = 0; i < n && length > 0; ++i) {
    const uint64_t take = std::min<uint64_t>(v[i].iov_len, length);
    memcpy(v[i].iov_base, bytes, take);
    bytes += take;
    length -= take;
  }
}

}  // namespace

SigAccessResult ResponderSigRdma(const TargetQp& t, const Request& r, bool write, uint32_t access) {
  const QpEndpoint& e = t.endpoint();
  if (!(e.access & access)) return SigAccessResult::kRefused;  // the QP's rights first (IBA 10.6.3)
  const KeyRule rule{t.process_slot(), e.pd, access, write, /*remote=*/true, e.qp_num};
  auto at = [&t](fabric::SharedRef ref) { return t.Resolve(ref); };
  auto move = [&t](bool w, uint8_t* buffer, uint64_t n, const PinnedPieces& pieces) {
    const iovec local{buffer, n};
    return t.Move(w, &local, 1, pieces).ok();
  };
  std::vector<uint8_t> wire = write ? Flatten(r.local, r.local_count, 0, r.length) : std::vector<uint8_t>(r.length);
  if (wire.size() != r.length) return SigAccessResult::kRefused;
  const SigAccessResult result = SigAccess(t.registry(), r.rkey, r.remote_addr, r.length, rule, at, move, write,
                                           wire.data());
  if (result == SigAccessResult::kDone && !write) Spread(wire.data(), wire.size(), r.local, r.local_count);
  return result;
}

bool ResponderIsSigKey(const TargetQp& t, uint32_t lkey) {
  KeyView k;
  if (!KeyPin::Peek(t.registry(), lkey, &k) || !k.indirect()) return false;
  KeyPin pin = KeyPin::Acquire(t.registry(), lkey);
  if (!pin || !pin.view().indirect()) return false;
  void* layout = t.Resolve(pin.view().layout());
  return layout != nullptr && LayoutSignature(layout)->config.active != 0;
}

bool ResponderSigReceive(const TargetQp& t, const TakenWqe& w, const iovec* gather, size_t n, uint64_t need) {
  const QpEndpoint& e = t.endpoint();
  const KeyRule rule{t.process_slot(), e.pd, kLocalWrite, true};
  auto at = [&t](fabric::SharedRef ref) { return t.Resolve(ref); };
  auto move = [&t](bool write, uint8_t* buffer, uint64_t len, const PinnedPieces& pieces) {
    const iovec local{buffer, len};
    return t.Move(write, &local, 1, pieces).ok();
  };
  std::vector<uint8_t> msg = Flatten(gather, n, 0, need);
  if (msg.size() != need) return false;
  uint64_t done = 0;
  for (uint32_t i = 0; i < w.num_sge && done < need; ++i) {
    const RecvSge& s = w.sge[i];
    const uint64_t take = std::min<uint64_t>(s.length, need - done);
    if (take == 0) continue;
    const SigAccessResult sig = SigAccess(t.registry(), s.lkey, s.addr, take, rule, at, move, true, msg.data() + done);
    if (sig == SigAccessResult::kRefused) return false;
    if (sig == SigAccessResult::kNotSignature) {
      PinnedPieces pieces;
      if (!ResolveKey(t.registry(), s.lkey, s.addr, s.length, take, rule, at, &pieces) ||
          !move(true, msg.data() + done, take, pieces))
        return false;
    }
    done += take;
  }
  return done == need;
}

}  // namespace softverbs::transport
