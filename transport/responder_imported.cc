#include "transport/responder_imported.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "transport/codes.h"
#include "transport/imported_key.h"
#include "transport/indirect_key.h"
#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

// [offset, +length) of the gather list, as pieces of it.
std::vector<iovec> Slice(const iovec* v, size_t count, uint64_t offset, uint64_t length) {
  std::vector<iovec> out;
  for (size_t i = 0; i < count && length > 0; ++i) {
    if (offset >= v[i].iov_len) {
      offset -= v[i].iov_len;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(v[i].iov_len - offset, length);
    out.push_back({static_cast<uint8_t*>(v[i].iov_base) + offset, n});
    length -= n;
    offset = 0;
  }
  return out;
}

// One SGE's `part` of the message into [addr, +take) of imported `lkey`; the whole SGE (`room`
// bytes from addr) must lie in the MR, as for any receive.
Status LandImported(const TargetQp& t, uint32_t lkey, uint64_t addr, uint64_t room, const std::vector<iovec>& part) {
  const QpEndpoint& e = t.endpoint();
  const ImportedAccess a{lkey, e.pd, t.process_slot(), e.qp_num, addr, true};
  if (Status s = CheckImportedKey(t.registry(), a, room); !s.ok()) {
    LogImportedRefusal(a, room, s);
    return s;
  }
  auto local = fabric::LocalProcess::Get();
  if (!local.ok()) return local.status();
  if (!WriteImportedKey(*local.value(), a, part.data(), part.size()))
    return Status(EACCES, "the imported MR refused the write");
  return Status::Ok();
}

}  // namespace

bool ResponderIsImportedKey(const TargetQp& t, uint32_t lkey) {
  return IsImportedKey(t.registry(), lkey, t.endpoint().pd, t.process_slot());
}

Status ResponderImportedReceive(const TargetQp& t, const TakenWqe& w, uint64_t skip, const iovec* gather,
                                size_t count, uint64_t need) {
  const KeyRule rule{t.process_slot(), t.endpoint().pd, access_bit::kLocalWrite, true};
  auto at = [&t](fabric::SharedRef ref) { return t.Resolve(ref); };
  uint64_t done = 0;
  for (uint32_t i = 0; i < w.num_sge && done < need; ++i) {
    const RecvSge& s = w.sge[i];
    if (skip >= s.length) {
      skip -= s.length;
      continue;
    }
    const uint64_t start = std::exchange(skip, 0);
    const uint64_t take = std::min<uint64_t>(s.length - start, need - done);
    const std::vector<iovec> part = Slice(gather, count, done, take);
    PinnedPieces pieces;
    if (ResolveKey(t.registry(), s.lkey, s.addr + start, s.length - start, take, rule, at, &pieces)) {
      SV_RETURN_IF_ERROR(t.Move(true, part.data(), part.size(), pieces));
    } else if (ResponderIsImportedKey(t, s.lkey)) {
      SV_RETURN_IF_ERROR(LandImported(t, s.lkey, s.addr + start, s.length - start, part));
    } else {
      return Status(EACCES, "an SGE's lkey refuses the receive");
    }
    done += take;
  }
  return done == need ? Status::Ok() : Status(EINVAL, "the WQE is too small");
}

}  // namespace softverbs::transport
