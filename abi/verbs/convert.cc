#include "abi/verbs/convert.h"

#include <cstring>

namespace softverbs::abi {

core::AddressVector ToCore(const ibv_ah_attr& a) {
  core::AddressVector av;
  memcpy(av.dgid.data(), a.grh.dgid.raw, 16);
  av.flow_label = a.grh.flow_label;
  av.sgid_index = a.grh.sgid_index;
  av.hop_limit = a.grh.hop_limit;
  av.traffic_class = a.grh.traffic_class;
  av.dlid = a.dlid;
  av.sl = a.sl;
  av.src_path_bits = a.src_path_bits;
  av.static_rate = a.static_rate;
  av.is_global = a.is_global != 0;
  av.port_num = a.port_num;
  return av;
}

ibv_ah_attr ToIbv(const core::AddressVector& av) {
  ibv_ah_attr a{};
  memcpy(a.grh.dgid.raw, av.dgid.data(), 16);
  a.grh.flow_label = av.flow_label;
  a.grh.sgid_index = av.sgid_index;
  a.grh.hop_limit = av.hop_limit;
  a.grh.traffic_class = av.traffic_class;
  a.dlid = av.dlid;
  a.sl = av.sl;
  a.src_path_bits = av.src_path_bits;
  a.static_rate = av.static_rate;
  a.is_global = av.is_global;
  a.port_num = av.port_num;
  return a;
}

core::QpCaps ToCore(const ibv_qp_cap& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

ibv_qp_cap ToIbv(const core::QpCaps& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

// The bytes of an enum field, never loaded as the enum: a field outside attr_mask may hold
// anything (ibv_xsrq_pingpong leaves them uninitialised), and loading a value that is no
// enumerator is undefined behaviour (UBSan: "invalid value for type 'ibv_mtu'"). The core's
// enums have a fixed underlying type: any value converts, and the modify table judges it.
template <typename E>
uint32_t EnumBytes(const E& field) {
  static_assert(sizeof(E) == sizeof(uint32_t));
  uint32_t v;
  memcpy(&v, &field, sizeof v);
  return v;
}

core::QpAttributes ToCore(const ibv_qp_attr& a) {
  core::QpAttributes q;
  q.qp_state = static_cast<core::QpState>(EnumBytes(a.qp_state));
  q.cur_qp_state = static_cast<core::QpState>(EnumBytes(a.cur_qp_state));
  q.path_mtu = static_cast<core::Mtu>(EnumBytes(a.path_mtu));
  q.path_mig_state = static_cast<core::MigState>(EnumBytes(a.path_mig_state));
  q.qkey = a.qkey;
  q.rq_psn = a.rq_psn;
  q.sq_psn = a.sq_psn;
  q.dest_qp_num = a.dest_qp_num;
  q.qp_access_flags = static_cast<uint32_t>(a.qp_access_flags);
  q.cap = ToCore(a.cap);
  q.ah_attr = ToCore(a.ah_attr);
  q.alt_ah_attr = ToCore(a.alt_ah_attr);
  q.pkey_index = a.pkey_index;
  q.alt_pkey_index = a.alt_pkey_index;
  q.en_sqd_async_notify = a.en_sqd_async_notify;
  q.sq_draining = a.sq_draining;
  q.max_rd_atomic = a.max_rd_atomic;
  q.max_dest_rd_atomic = a.max_dest_rd_atomic;
  q.min_rnr_timer = a.min_rnr_timer;
  q.port_num = a.port_num;
  q.timeout = a.timeout;
  q.retry_cnt = a.retry_cnt;
  q.rnr_retry = a.rnr_retry;
  q.alt_port_num = a.alt_port_num;
  q.alt_timeout = a.alt_timeout;
  q.rate_limit = a.rate_limit;
  return q;
}

ibv_qp_attr ToIbv(const core::QpAttributes& q) {
  ibv_qp_attr a{};
  a.qp_state = static_cast<ibv_qp_state>(q.qp_state);
  a.cur_qp_state = static_cast<ibv_qp_state>(q.cur_qp_state);
  a.path_mtu = static_cast<ibv_mtu>(q.path_mtu);
  a.path_mig_state = static_cast<ibv_mig_state>(q.path_mig_state);
  a.qkey = q.qkey;
  a.rq_psn = q.rq_psn;
  a.sq_psn = q.sq_psn;
  a.dest_qp_num = q.dest_qp_num;
  a.qp_access_flags = static_cast<int>(q.qp_access_flags);
  a.cap = ToIbv(q.cap);
  a.ah_attr = ToIbv(q.ah_attr);
  a.alt_ah_attr = ToIbv(q.alt_ah_attr);
  a.pkey_index = q.pkey_index;
  a.alt_pkey_index = q.alt_pkey_index;
  a.en_sqd_async_notify = q.en_sqd_async_notify;
  a.sq_draining = q.sq_draining;
  a.max_rd_atomic = q.max_rd_atomic;
  a.max_dest_rd_atomic = q.max_dest_rd_atomic;
  a.min_rnr_timer = q.min_rnr_timer;
  a.port_num = q.port_num;
  a.timeout = q.timeout;
  a.retry_cnt = q.retry_cnt;
  a.rnr_retry = q.rnr_retry;
  a.alt_port_num = q.alt_port_num;
  a.alt_timeout = q.alt_timeout;
  a.rate_limit = q.rate_limit;
  return a;
}

}  // namespace softverbs::abi
