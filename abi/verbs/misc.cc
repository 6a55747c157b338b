// The small exported helpers: enum strings, rate conversions, kernel-struct marshalling, sysfs
// access and fork support.
#include <fcntl.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "base/log.h"
#include "fabric/raw/neighbour.h"

using namespace softverbs;
using namespace softverbs::abi;

namespace {

template <size_t N>
const char* Lookup(const char* const (&names)[N], int value, const char* unknown) {
  return value >= 0 && static_cast<size_t>(value) < N && names[value] ? names[value] : unknown;
}

// ibv_rate <-> multiples of 2.5 Gb/s and Mb/s (IBA 14.2.5.6). A rate with no exact multiple of
// 2.5 Gb/s (the FDR/EDR/HDR encodings) has mult 0 and converts to -1 / IBV_RATE_MAX, as rdma-core.
struct RateRow {
  ibv_rate rate;
  int mult;
  int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},      {IBV_RATE_5_GBPS, 2, 5000},        {IBV_RATE_10_GBPS, 4, 10000},
    {IBV_RATE_20_GBPS, 8, 20000},      {IBV_RATE_30_GBPS, 12, 30000},     {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},     {IBV_RATE_80_GBPS, 32, 80000},     {IBV_RATE_120_GBPS, 48, 120000},
    {IBV_RATE_14_GBPS, 0, 14062},      {IBV_RATE_56_GBPS, 0, 56250},      {IBV_RATE_112_GBPS, 0, 112500},
    {IBV_RATE_168_GBPS, 0, 168750},    {IBV_RATE_25_GBPS, 0, 25781},      {IBV_RATE_100_GBPS, 0, 103125},
    {IBV_RATE_200_GBPS, 0, 206250},    {IBV_RATE_300_GBPS, 0, 309375},    {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},     {IBV_RATE_400_GBPS, 160, 425000},  {IBV_RATE_600_GBPS, 240, 637500},
    {IBV_RATE_800_GBPS, 320, 850000},  {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

SV_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kNames[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
                                       "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP",
                                       "unspecified"};
  return Lookup(kNames, node_type, "unknown");
}

SV_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {"no state change (NOP)", "down", "init", "armed", "active",
                                       "active deferred"};
  return Lookup(kNames, port_state, "unknown");
}

SV_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
      "local access violation work queue error", "communication established", "send queue drained",
      "path migrated", "path migration request error", "local catastrophic error", "port active",
      "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
      "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
      "WQ fatal"};
  return Lookup(kNames, event, "unknown");
}

SV_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "Work Request Flushed Error", "memory management operation error",
      "bad response error", "local access error", "remote invalid request error", "remote access error",
      "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
      "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error",
      "TM error", "TM rendezvous error"};
  return Lookup(kNames, status, "unknown");
}

SV_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  for (const RateRow& r : kRates)
    if (r.rate == rate && r.mult != 0) return r.mult;
  return -1;
}

SV_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const RateRow& r : kRates)
    if (r.mult == mult && r.mult != 0) return r.rate;
  return IBV_RATE_MAX;
}

SV_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  for (const RateRow& r : kRates)
    if (r.rate == rate) return r.mbps;
  return -1;
}

SV_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const RateRow& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

// ----- Kernel ABI marshalling (used by connection managers that talk to the kernel's ucma).
static void CopyAhFromKern(ibv_ah_attr* dst, const ib_uverbs_ah_attr* src) {
  memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

SV_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) { CopyAhFromKern(dst, src); }

SV_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = static_cast<int>(src->qp_access_flags);
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  CopyAhFromKern(&dst->ah_attr, &src->ah_attr);
  CopyAhFromKern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

SV_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
  memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<int>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->reversible = static_cast<int>(src->reversible);
  dst->mtu = static_cast<uint8_t>(src->mtu);
  dst->pkey = src->pkey;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->numb_path = src->numb_path;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

SV_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
  memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<__u32>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->reversible = static_cast<__u32>(src->reversible);
  dst->mtu = src->mtu;
  dst->pkey = src->pkey;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->numb_path = src->numb_path;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

// ----- sysfs: softverbs0 has no sysfs entries, but the helpers read real files for callers that
// use them on other paths.
SV_EXPORT int ibv_get_sysfs_path(char* path, size_t len) {
  const char* env = getenv("SYSFS_PATH");
  int n = snprintf(path, len, "%s", env && *env ? env : "/sys");
  while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
  return 0;
}

SV_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size);
  close(fd);
  if (n <= 0) return -1;
  if (static_cast<size_t>(n) == size) --n;
  buf[n] = '\0';
  if (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
  return static_cast<int>(n);
}

// ----- fork(): softverbs pins no pages and remaps nothing, so a child never loses memory that a
// registration depends on; fork support is "unneeded" as on kernels with copy-on-fork pinning.
SV_EXPORT int ibv_fork_init(void) { return 0; }
SV_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
SV_EXPORT int ibv_dontfork_range(void*, size_t) { return 0; }
SV_EXPORT int ibv_dofork_range(void*, size_t) { return 0; }

// Providers are kernel-device drivers; softverbs is its own device and loads none. rdma-core
// keeps this symbol only for old provider binaries: a hidden version, bound here the same way.
extern "C" __attribute__((visibility("default"))) void sv_ibv_register_driver(const char* name, void*) {
  SV_LOG(kInfo, "ibv_register_driver(%s): ignored, softverbs loads no providers", name ? name : "?");
}
__asm__(".symver sv_ibv_register_driver, ibv_register_driver@IBVERBS_1.1");

// libibverbs verbs.c: an ibv_query_gid failure is returned as is (-1, errno set); every later
// failure as a negative errno (-EINVAL for addresses it cannot use, -EHOSTUNREACH when the
// neighbour does not resolve within its 3 s, NEIGH_GET_DEFAULT_TIMEOUT_MS).
SV_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr, uint8_t* eth_mac, uint16_t* vid) {
  const char* verb = "ibv_resolve_eth_l2_from_gid";
  if (context == nullptr || attr == nullptr || eth_mac == nullptr)
    return ReturnNegErrno(verb, "", Invalid("context, ah_attr and eth_mac are required"));
  // attr->is_global is not looked at: libibverbs reads attr->grh whatever it says.
  ibv_gid sgid;
  if (int err = ibv_query_gid(context, attr->port_num, attr->grh.sgid_index, &sgid); err != 0) return err;
  fabric::raw::GidBytes src, dst;
  memcpy(src.data(), sgid.raw, 16);
  memcpy(dst.data(), attr->grh.dgid.raw, 16);
  Result<fabric::raw::L2Address> l2 = fabric::raw::ResolveL2(src, dst, std::chrono::milliseconds(3000));
  if (!l2.ok()) return ReturnNegErrno(verb, "sgid_index " + std::to_string(attr->grh.sgid_index), l2.status());
  memcpy(eth_mac, l2->mac.data(), 6);
  if (vid != nullptr) *vid = l2->vid;
  return 0;
}
