#include "core/mkey.h"

#include <cerrno>
#include <cstring>

#include "base/strings.h"
#include "core/context.h"
#include "core/types.h"
#include "transport/key_table.h"

namespace softverbs::core {

Result<std::unique_ptr<Mkey>> Mkey::Create(Pd& pd, uint32_t max_entries, bool signature) {
  if (max_entries == 0) return Invalid("max_entries is 0");
  const uint32_t rounded = (max_entries + 3) & ~3u;
  if (rounded > kMaxEntries)
    return Invalid("max_entries " + std::to_string(max_entries) + " exceeds " + std::to_string(kMaxEntries));
  auto key = transport::IndirectKey::Create(pd.context().local(), pd.host_id(), rounded);
  if (!key.ok()) return key.status();
  pd.users().Acquire();
  return std::unique_ptr<Mkey>(new Mkey(pd, std::move(key.value()), signature));
}

Mkey::~Mkey() {
  key_.reset();  // withdrawn and freed (a UMR still queued for it fails: transport/send_queue.cc)
  pd_->users().Release();
}

Status Mkey::CheckAccess(uint32_t access) const {
  // The access flags an mkey takes: what an MR grants the data path (ibv_reg_mr(3)), nothing else
  // (mlx5's setter refuses any other bit with EINVAL).
  constexpr uint32_t kKnown = access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  if (access & ~kKnown)
    return Invalid("access_flags " + Hex(access & ~kKnown) +
                   ": an mkey takes LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC only");
  // ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
  // IBV_ACCESS_LOCAL_WRITE must be set too."
  if ((access & (access::kRemoteWrite | access::kRemoteAtomic)) && !(access & access::kLocalWrite))
    return Invalid("access_flags REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE (ibv_reg_mr(3))");
  return Status::Ok();
}

Status Mkey::CheckLayout(const UmrSpec& spec) const {
  const bool interleaved = spec.interleaved;
  const size_t n = spec.entries.size();
  if (n == 0) return Invalid(interleaved ? "num_interleaved is 0" : "num_sges is 0");
  // mlx5dv_wr_post(3): "As one entry will be consumed for strided header, the mkey should be
  // created with one more entry than the required num_interleaved." mlx5 refuses a layout
  // beyond the mkey's entries with ENOMEM (mlx5_send_wr_set_mkey_layout).
  const size_t needed = interleaved ? n + 1 : n;
  if (needed > max_entries())
    return Status(ENOMEM, std::string(interleaved ? "num_interleaved " : "num_sges ") + std::to_string(n) +
                              " needs " + std::to_string(needed) + " entries; the mkey has max_entries " +
                              std::to_string(max_entries()));
  if (interleaved && spec.repeat_count == 0) return Invalid("repeat_count is 0");
  fabric::HostRegistry& registry = pd_->context().registry();
  for (size_t i = 0; i < n; ++i) {
    const transport::LayoutEntry& e = spec.entries[i];
    const std::string which = "entry " + std::to_string(i) + " (lkey " + Hex(e.lkey) + ")";
    transport::KeyView k;
    if (!transport::KeyPin::Peek(registry, e.lkey, &k)) return Invalid(which + " names no memory region");
    if (k.indirect()) return Invalid(which + " is an indirect mkey: layouts point at MRs");
    if (k.window()) return Invalid(which + " is a memory window: layouts point at MRs");
    if (k.null_key()) return Invalid(which + " is a null MR: layouts point at MRs with memory");
    if (k.owner_process_slot() != pd_->context().local().slot() || k.pd != pd_->host_id())
      return Invalid(which + " is not an MR of the mkey's PD");
    // The last byte the entry reaches: repetition repeat_count - 1 at addr + r * (count + skip).
    const uint64_t reps = interleaved ? spec.repeat_count : 1;
    const uint64_t span = (reps - 1) * (static_cast<uint64_t>(e.count) + e.skip) + e.count;
    if (!transport::KeyCovers(k, e.addr, span))
      return Invalid(which + " reaches [" + Hex(e.addr) + ", +" + std::to_string(span) + ") outside its MR");
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> Mkey::BuildUmr(const Pd& qp_pd, const UmrSpec& spec) const {
  if (&qp_pd != pd_) return Invalid("the mkey's PD is not the QP's PD");
  transport::UmrRequest req;
  req.mkey = key();
  req.set = 0;
  if (spec.set_access) {
    SV_RETURN_IF_ERROR(CheckAccess(spec.access));
    req.set |= transport::kUmrSetAccess;
    req.access = spec.access;
  }
  const size_t n = spec.set_layout ? spec.entries.size() : 0;
  if (spec.set_layout) {
    SV_RETURN_IF_ERROR(CheckLayout(spec));
    req.set |= transport::kUmrSetLayout;
    req.repeat_count = spec.interleaved ? spec.repeat_count : 1;
    req.entries = static_cast<uint32_t>(n);
    transport::LayoutHeader h;
    h.entries = req.entries;
    h.repeat_count = req.repeat_count;
    if (!transport::ComputeLayoutLengths(h, spec.entries.data())) return Invalid("the layout's total length overflows");
  }
  transport::SigConfig sig;
  if (spec.set_sig) {
    // mlx5_send_wr_set_mkey_sig_block: EINVAL on an mkey without a signature context.
    if (!signature_)
      return Invalid("the mkey was created without MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE "
                     "(mlx5dv_wr_set_mkey_sig_block(3))");
    auto config = SigConfigOf(spec.sig);
    if (!config.ok()) return config.status();
    sig = *config;
    req.set |= transport::kUmrSetSignature;
  }
  if (spec.reset_sig && signature_) req.set |= transport::kUmrResetSignature;
  const size_t entry_bytes = n * sizeof(transport::LayoutEntry);
  std::vector<uint8_t> payload(sizeof req + entry_bytes + (spec.set_sig ? sizeof sig : 0));
  memcpy(payload.data(), &req, sizeof req);
  if (n) memcpy(payload.data() + sizeof req, spec.entries.data(), entry_bytes);
  if (spec.set_sig) memcpy(payload.data() + sizeof req + entry_bytes, static_cast<const void*>(&sig), sizeof sig);
  return payload;
}

}  // namespace softverbs::core
