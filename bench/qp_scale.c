/* Many RC QPs in one process: create <n> QPs (default 10000; send/recv depth <depth>, default
 * 64, one SGE, one shared CQ), then connect them in pairs (QP 2k <-> QP 2k+1: INIT, RTR, RTS),
 * then prove two pairs (the first and the last) carry an RDMA WRITE, then destroy all.
 * Prints key=value lines: times, and host memory per QP from the VmRSS delta (/proc/self/status)
 * between "device, PD and CQ open" and "all QPs connected".
 * Usage: qp_scale [n] [depth]. Build: cc -O2 qp_scale.c -libverbs */
#include "qp_util.h"

static void write_check(struct ibv_qp *from, struct ibv_cq *cq, struct ibv_mr *mr, int k) {
  uint64_t *buf = mr->addr;
  buf[0] = 0x5eed0000u + k; /* source */
  buf[1] = 0;               /* target */
  struct ibv_sge sge = {.addr = (uintptr_t)&buf[0], .length = 8, .lkey = mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = k;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uintptr_t)&buf[1];
  wr.wr.rdma.rkey = mr->rkey;
  if (ibv_post_send(from, &wr, &bad)) bench_die("ibv_post_send (RDMA WRITE check)");
  struct ibv_wc wc;
  double t0 = bench_now();
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
    if (bench_now() - t0 > 5) bench_die("RDMA WRITE check: no completion within 5 s");
  if (n < 0 || wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "error: RDMA WRITE check: %s\n", n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
    exit(1);
  }
  if (buf[1] != buf[0]) bench_die("RDMA WRITE check: data did not land");
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10000;
  int depth = argc > 2 ? atoi(argv[2]) : 64;
  if (n < 2 || n % 2) bench_die("n must be even and >= 2");

  struct ibv_context *ctx = bench_open_device();
  struct bench_path path = bench_query_path(ctx);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 4096, NULL, NULL, 0) : NULL;
  if (!cq) bench_die("ibv_alloc_pd / ibv_create_cq");
  static uint64_t check_buf[512] __attribute__((aligned(4096)));
  struct ibv_mr *mr = ibv_reg_mr(pd, check_buf, sizeof check_buf,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) bench_die("ibv_reg_mr");
  struct ibv_qp **qps = calloc(n, sizeof *qps);
  if (!qps) bench_die("calloc");
  for (int i = 0; i < n; i++) qps[i] = NULL; /* touch the array before the baseline */

  long rss0 = bench_vmrss_kb();
  double t0 = bench_now();
  for (int i = 0; i < n; i++) {
    qps[i] = bench_create_rc_qp(pd, cq, depth);
    if (!qps[i]) {
      fprintf(stderr, "error: ibv_create_qp failed at QP %d of %d\n", i, n);
      return 1;
    }
  }
  double t1 = bench_now();
  long rss_created = bench_vmrss_kb();
  for (int i = 0; i < n; i++)
    if (bench_to_init(qps[i])) bench_die("modify to INIT");
  for (int i = 0; i < n; i++) {
    if (bench_to_rtr(qps[i], &path, qps[i ^ 1]->qp_num)) {
      fprintf(stderr, "error: modify to RTR failed at QP %d\n", i);
      return 1;
    }
    if (bench_to_rts(qps[i])) {
      fprintf(stderr, "error: modify to RTS failed at QP %d\n", i);
      return 1;
    }
  }
  double t2 = bench_now();
  long rss1 = bench_vmrss_kb();

  write_check(qps[0], cq, mr, 0);
  write_check(qps[n - 1], cq, mr, n - 1);

  double t3 = bench_now();
  for (int i = 0; i < n; i++)
    if (ibv_destroy_qp(qps[i])) bench_die("ibv_destroy_qp");
  double t4 = bench_now();

  printf("qps=%d\ndepth=%d\n", n, depth);
  printf("create_s=%.4f\nconnect_s=%.4f\ntotal_s=%.4f\ndestroy_s=%.4f\n", t1 - t0, t2 - t1, t2 - t0,
         t4 - t3);
  printf("rss_before_kb=%ld\nrss_created_kb=%ld\nrss_connected_kb=%ld\n", rss0, rss_created, rss1);
  printf("bytes_per_qp=%.0f\n", (rss1 - rss0) * 1024.0 / n);
  printf("write_check=ok\n");
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  free(qps);
  return 0;
}
