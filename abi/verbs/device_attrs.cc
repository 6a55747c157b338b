#include "abi/verbs/device_attrs.h"

#include <cstring>

#include "base/clock.h"
#include "core/device.h"
#include "core/device_limits.h"
#include "core/wq.h"
#include "fabric/host/host_registry.h"

namespace softverbs::abi {

using core::DeviceLimits;

ibv_device_attr DeviceAttr() {
  const core::DeviceIdentity& id = core::Identity();
  ibv_device_attr a{};
  snprintf(a.fw_ver, sizeof(a.fw_ver), "%s", id.fw_ver.c_str());
  memcpy(&a.node_guid, id.node_guid.data(), 8);
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = DeviceLimits::kMaxMrSize;
  a.page_size_cap = DeviceLimits::kPageSizeCap;
  a.vendor_id = id.vendor_id;
  a.vendor_part_id = id.vendor_part_id;
  a.hw_ver = id.hw_ver;
  a.max_qp = DeviceLimits::kMaxQp;
  a.max_qp_wr = DeviceLimits::kMaxQpWr;
  // What softverbs0 really does: RNR NAKs, cur_qp_state in modify, SRQ resize, solicited-only
  // CQ arming, XRC (same host: docs/support-matrix.md), automatic path migration (core/path_migration.h).
  // Not claimed: port events (the port never changes state), QP resize.
  // Memory windows of type 1 and 2 (type 2 checks QP and PD: 2B), with local and remote
  // invalidation -- the user-visible half of the memory management extensions.
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_CURR_QP_STATE_MOD | IBV_DEVICE_SRQ_RESIZE |
                       IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_MEM_WINDOW |
                       IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_XRC |
                       IBV_DEVICE_AUTO_PATH_MIG |
                       // Raw packet QPs (core/raw_qp.h): checksum offload, flow steering.
                       IBV_DEVICE_RAW_IP_CSUM | IBV_DEVICE_MANAGED_FLOW_STEERING;
  a.max_sge = DeviceLimits::kMaxSge;
  a.max_sge_rd = DeviceLimits::kMaxSgeRd;
  a.max_cq = DeviceLimits::kMaxCq;
  a.max_cqe = DeviceLimits::kMaxCqe;
  a.max_mr = DeviceLimits::kMaxMr;
  a.max_pd = DeviceLimits::kMaxPd;
  a.max_qp_rd_atom = DeviceLimits::kMaxQpRdAtom;
  a.max_res_rd_atom = DeviceLimits::kMaxQpRdAtom * DeviceLimits::kMaxQp;
  a.max_qp_init_rd_atom = DeviceLimits::kMaxQpInitRdAtom;
  a.atomic_cap = IBV_ATOMIC_HCA;  // atomic against every other atomic through softverbs0
  a.max_mw = DeviceLimits::kMaxMw;  // windows and MRs share the host key table
  // Multicast attachments share one host table (transport/mcast_table.h): each bound is its size.
  a.max_mcast_grp = static_cast<int>(fabric::HostRegistry::kMcastSlots);
  a.max_mcast_qp_attach = static_cast<int>(fabric::HostRegistry::kMcastSlots);
  a.max_total_mcast_qp_attach = static_cast<int>(fabric::HostRegistry::kMcastSlots);
  a.max_ah = DeviceLimits::kMaxAh;
  a.max_srq = DeviceLimits::kMaxSrq;
  a.max_srq_wr = DeviceLimits::kMaxSrqWr;
  a.max_srq_sge = DeviceLimits::kMaxSrqSge;
  a.max_pkeys = DeviceLimits::kPkeyTableLen;
  a.local_ca_ack_delay = 0;
  a.phys_port_cnt = DeviceLimits::kPortCount;
  return a;
}

ibv_device_attr_ex DeviceAttrEx() {
  ibv_device_attr_ex ex{};
  ex.orig_attr = DeviceAttr();
  // Completion timestamps count the device clock (base/clock.h): 64 bits of nanoseconds,
  // hca_core_clock in kHz (ibv_query_device_ex(3)).
  ex.completion_timestamp_mask = ~0ull;
  ex.hca_core_clock = kDeviceClockKhz;
  // Raw packet QPs: checksums both ways, VLAN stripping, FCS scattering (core/raw_qp.h).
  ex.raw_packet_caps = IBV_RAW_PACKET_CAP_CVLAN_STRIPPING | IBV_RAW_PACKET_CAP_SCATTER_FCS |
                       IBV_RAW_PACKET_CAP_IP_CSUM;
  // RSS on raw packet QPs (core/wq.h): Toeplitz over IPv4/IPv6 addresses and TCP/UDP ports, of
  // the outer headers or (IBV_RX_HASH_INNER, with mlx5dv tunnel offloads) of VXLAN's inner ones.
  ex.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
  ex.rss_caps.max_rwq_indirection_tables = 1024;
  ex.rss_caps.max_rwq_indirection_table_size = 1u << core::kMaxLogIndTableSize;
  ex.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  ex.rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
                                    IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                    IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP | IBV_RX_HASH_IPSEC_SPI |
                                    IBV_RX_HASH_INNER;
  ex.max_wq_type_rq = DeviceLimits::kMaxQp;
  // TSO on raw packet QPs (transport/raw/tso.h).
  ex.tso_caps.max_tso = DeviceLimits::kMaxTso;
  ex.tso_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
  // ODP (core/mr.h): nothing is ever pinned, every access finds its pages through the one key
  // rule, for every opcode each transport has; implicit ODP covers the whole address space.
  constexpr uint32_t kMessages = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
  ex.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  ex.odp_caps.per_transport_caps.rc_odp_caps = kMessages | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                               IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  ex.odp_caps.per_transport_caps.uc_odp_caps = kMessages | IBV_ODP_SUPPORT_WRITE;  // UC: no READ, atomics, SRQ
  ex.odp_caps.per_transport_caps.ud_odp_caps = kMessages | IBV_ODP_SUPPORT_SRQ_RECV;
  ex.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                    IBV_ODP_SUPPORT_SRQ_RECV;
  // Device memory (core/dm.h): the largest one allocation.
  ex.max_dm_size = DeviceLimits::kMaxDmSize;
  // Packet pacing (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit): the requester's token bucket
  // (transport/pacer.h) paces the send queues of RC, UC and UD QPs, and a raw packet QP's frames
  // (transport/raw/paced_send_queue.h).
  ex.packet_pacing_caps.qp_rate_limit_min = DeviceLimits::kPacingMinKbps;
  ex.packet_pacing_caps.qp_rate_limit_max = DeviceLimits::kPacingMaxKbps;
  ex.packet_pacing_caps.supported_qpts =
      (1u << IBV_QPT_RC) | (1u << IBV_QPT_UC) | (1u << IBV_QPT_UD) | (1u << IBV_QPT_RAW_PACKET);
  // Tag matching on RC (transport/tag_matcher.h), with mlx5's shapes: one SGE per tag, list
  // operations bounded as a send queue, a 64-byte rendezvous header.
  ex.tm_caps.max_rndv_hdr_size = DeviceLimits::kMaxRndvHdrSize;
  ex.tm_caps.max_num_tags = DeviceLimits::kMaxTmTags;
  ex.tm_caps.flags = IBV_TM_CAP_RC;
  ex.tm_caps.max_ops = DeviceLimits::kMaxQpWr;
  ex.tm_caps.max_sge = 1;
  // CQ moderation (ibv_modify_cq, core/cq_moderation.h), with mlx5's limits.
  ex.cq_mod_caps.max_cq_count = DeviceLimits::kMaxCqModCount;
  ex.cq_mod_caps.max_cq_period = DeviceLimits::kMaxCqModPeriodUs;
  ex.phys_port_cnt_ex = DeviceLimits::kPortCount;
  return ex;
}

ibv_port_attr PortAttr() {
  ibv_port_attr p{};
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = static_cast<ibv_mtu>(DeviceLimits::kMaxMtu);
  p.active_mtu = static_cast<ibv_mtu>(core::ActiveMtu());  // from the netdevs, as rxe
  p.gid_tbl_len = static_cast<int>(DeviceLimits::kGidTableLen);
  p.port_cap_flags = DeviceLimits::kPortCapFlags;
  static_assert(DeviceLimits::kPortCapFlags == (IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS));
  p.max_msg_sz = DeviceLimits::kMaxMsgSize;
  p.pkey_tbl_len = DeviceLimits::kPkeyTableLen;
  p.lid = 0;  // Ethernet: no LIDs
  p.sm_lid = 0;
  p.lmc = 0;
  p.max_vl_num = 1;
  p.active_width = DeviceLimits::kActiveWidth;
  p.active_speed = DeviceLimits::kActiveSpeed;
  p.phys_state = DeviceLimits::kPhysStateLinkUp;
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  return p;
}

}  // namespace softverbs::abi
