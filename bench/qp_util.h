/* Helpers shared by the QP benchmarks (qp_lifecycle.c, qp_scale.c): open softverbs0 (or the
 * device named by $BENCH_DEVICE), and move an RC QP RESET→INIT→RTR→RTS towards a peer QPN over
 * GID index 1 (::ffff:127.0.0.1; RoCE needs the GRH). Plain rdma-core API, nothing softverbs-specific. */
#ifndef BENCH_QP_UTIL_H
#define BENCH_QP_UTIL_H

#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_PORT 1
#define BENCH_GID_INDEX 1

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void bench_die(const char *what) {
  fprintf(stderr, "error: %s\n", what);
  exit(1);
}

/* Current resident set size in KiB, from /proc/self/status. */
static inline long bench_vmrss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

static inline struct ibv_context *bench_open_device(void) {
  const char *want = getenv("BENCH_DEVICE");
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  struct ibv_context *ctx = NULL;
  if (!want) want = "softverbs0";
  for (int i = 0; list && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), want) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!ctx) {
    fprintf(stderr, "error: device %s not found (is LD_LIBRARY_PATH the softverbs build/lib?)\n", want);
    exit(1);
  }
  return ctx;
}

struct bench_path {
  union ibv_gid gid;
  enum ibv_mtu mtu;
};

static inline struct bench_path bench_query_path(struct ibv_context *ctx) {
  struct bench_path p;
  struct ibv_port_attr pa;
  if (ibv_query_port(ctx, BENCH_PORT, &pa)) bench_die("ibv_query_port");
  if (ibv_query_gid(ctx, BENCH_PORT, BENCH_GID_INDEX, &p.gid)) bench_die("ibv_query_gid");
  p.mtu = pa.active_mtu;
  return p;
}

static inline struct ibv_qp *bench_create_rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, int depth) {
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = depth;
  ia.cap.max_recv_wr = depth;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &ia);
}

static inline int bench_to_init(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = BENCH_PORT;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static inline int bench_to_rtr(struct ibv_qp *qp, const struct bench_path *p, uint32_t dest_qpn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p->mtu;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = p->gid;
  a.ah_attr.grh.sgid_index = BENCH_GID_INDEX;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = BENCH_PORT;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static inline int bench_to_rts(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

#endif
