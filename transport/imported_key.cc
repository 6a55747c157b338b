#include "transport/imported_key.h"

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The rules of an access through an imported key (IBA 10.6.3.1), on a view of it.
Status CheckView(const KeyView& k, const ImportedAccess& a, uint64_t length) {
  if (k.owner_process_slot() == a.self_slot) return Invalid("a key of this process, not an imported one");
  if (k.pd != a.pd) return Status(EACCES, "not an MR of the QP's PD");
  if (k.indirect() || k.window() || k.null_key())
    return Status(EACCES, "a window, mkey or null MR key (only an MR is imported)");
  // ibv_reg_mr(3): a local write needs IBV_ACCESS_LOCAL_WRITE, whoever registered the MR.
  if (a.writes && (k.access & access_bit::kLocalWrite) == 0)
    return Status(EACCES, "the MR does not grant IBV_ACCESS_LOCAL_WRITE");
  if (!KeyCovers(k, a.addr, length))
    return Status(EACCES, "[" + Hex(a.addr) + ", +" + std::to_string(length) + ") leaves the MR [" + Hex(k.iova) +
                              ", +" + std::to_string(k.length) + ")");
  return Status::Ok();
}

// The lkeys this process holds imports of, and how many (process-local: a list of handles, as
// the importer's uverbs objects are).
struct HeldImports {
  std::mutex mu;
  std::unordered_map<uint32_t, uint32_t> count;
};
HeldImports& Held() {
  static HeldImports* held = new HeldImports;  // never destroyed: used until the process ends
  return *held;
}

uint64_t TotalOf(const iovec* bytes, size_t count) {
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += bytes[i].iov_len;
  return total;
}

}  // namespace

void LogImportedRefusal(const ImportedAccess& a, uint64_t length, const Status& s) {
  SV_LOG(kError,
         "qp 0x%x: local SGE [0x%llx, +%llu) through lkey 0x%x (imported, ibv_import_mr) %s: %s: "
         "IBV_WC_LOC_PROT_ERR",
         a.qp_num, static_cast<unsigned long long>(a.addr), static_cast<unsigned long long>(length), a.lkey,
         a.writes ? "written" : "read", s.rule().c_str());
}

void NoteImportedKey(uint32_t lkey) {
  std::lock_guard lock(Held().mu);
  ++Held().count[lkey];
}

void ForgetImportedKey(uint32_t lkey) {
  std::lock_guard lock(Held().mu);
  auto it = Held().count.find(lkey);
  if (it != Held().count.end() && --it->second == 0) Held().count.erase(it);
}

void ExplainMissingImport(fabric::HostRegistry& registry, const ImportedAccess& a, uint64_t length) {
  {
    std::lock_guard lock(Held().mu);
    if (Held().count.find(a.lkey) == Held().count.end()) return;
  }
  KeyView k;
  if (KeyPin::Peek(registry, a.lkey, &k)) return;  // it exists: refused for another reason
  LogImportedRefusal(a, length, Status(ENOENT, "no such key: the exporter deregistered the MR (or its process is "
                                               "gone)"));
}

bool IsImportedKey(fabric::HostRegistry& registry, uint32_t lkey, uint64_t pd, uint32_t self_slot) {
  KeyView k;
  return KeyPin::Peek(registry, lkey, &k) && k.owner_process_slot() != self_slot && k.pd == pd && !k.indirect() &&
         !k.window() && !k.null_key();
}

Status CheckImportedKey(fabric::HostRegistry& registry, const ImportedAccess& a, uint64_t length) {
  KeyView k;
  if (!KeyPin::Peek(registry, a.lkey, &k)) return Status(ENOENT, "no such key (deregistered by its owner?)");
  return CheckView(k, a, length);
}

Status MoveImportedKey(fabric::HostRegistry& registry, const ImportedPeerOf& peer_of, const ImportedAccess& a,
                       const iovec* bytes, size_t count) {
  const uint64_t length = TotalOf(bytes, count);
  // Pinned while the bytes move: the exporter's ibv_dereg_mr waits for this access, as for any.
  KeyPin pin = KeyPin::Acquire(registry, a.lkey);
  if (!pin) return Status(ENOENT, "no such key (deregistered by its owner, or its process is gone)");
  const KeyView& k = pin.view();
  SV_RETURN_IF_ERROR(CheckView(k, a, length));
  if (length == 0) return Status::Ok();
  const uint64_t host = k.addr + (a.addr - k.iova);
  if (!OnDemandPresent(registry, k, host, length, a.writes))
    return Status(EFAULT, "an on-demand page of the range is not mapped in the owner");
  auto peer = peer_of(k.owner_process_slot());
  if (!peer.ok()) return Status(ESRCH, "the MR's process is gone: " + peer.status().rule());
  fabric::PeerProcess& owner = peer.value()->process();
  if (!owner.IsAlive()) return Status(ESRCH, "the MR's process is gone");
  SV_RETURN_IF_ERROR(a.writes ? owner.Write(host, bytes, count) : owner.Read(host, bytes, count));
  // Read from a pid reused since the owner died mid-access: nothing read is the owner's.
  if (!owner.IsAlive()) return Status(ESRCH, "the MR's process died during the access");
  return Status::Ok();
}

bool ReadImportedKey(fabric::LocalProcess& local, const ImportedAccess& a, uint64_t length, uint8_t* to) {
  const iovec into{to, length};
  Status s = MoveImportedKey(local.registry(), [&local](uint32_t slot) { return local.PeerAt(slot); }, a, &into, 1);
  if (!s.ok()) LogImportedRefusal(a, length, s);
  return s.ok();
}

bool WriteImportedKey(fabric::LocalProcess& local, const ImportedAccess& a, const iovec* from, size_t count) {
  Status s = MoveImportedKey(local.registry(), [&local](uint32_t slot) { return local.PeerAt(slot); }, a, from, count);
  if (!s.ok()) LogImportedRefusal(a, TotalOf(from, count), s);
  return s.ok();
}

}  // namespace softverbs::transport
