/* QP lifecycle rate on one core: create an RC QP, INIT, RTR (towards a peer QP of the same
 * process), RTS, destroy — repeated for <seconds> (default 2) after a warm-up, pinned to the CPU
 * the program starts on. Prints key=value lines: the rate (timed in batches of 256 with no
 * clock read inside) and, from a shorter second pass, the mean time of each verb.
 * Usage: qp_lifecycle [seconds]. Build: cc -O2 qp_lifecycle.c -libverbs */
#include "qp_util.h"

#include <sched.h>

/* One create→INIT→RTR→RTS→destroy; adds each verb's time to acc[0..4] when acc is given. */
static void lifecycle(struct ibv_pd *pd, struct ibv_cq *cq, const struct bench_path *path,
                      uint32_t peer_qpn, double *acc) {
  double t[6];
  if (acc) t[0] = bench_now();
  struct ibv_qp *qp = bench_create_rc_qp(pd, cq, 64);
  if (!qp) bench_die("ibv_create_qp");
  if (acc) t[1] = bench_now();
  if (bench_to_init(qp)) bench_die("modify to INIT");
  if (acc) t[2] = bench_now();
  if (bench_to_rtr(qp, path, peer_qpn)) bench_die("modify to RTR");
  if (acc) t[3] = bench_now();
  if (bench_to_rts(qp)) bench_die("modify to RTS");
  if (acc) t[4] = bench_now();
  if (ibv_destroy_qp(qp)) bench_die("ibv_destroy_qp");
  if (acc) {
    t[5] = bench_now();
    for (int i = 0; i < 5; i++) acc[i] += t[i + 1] - t[i];
  }
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  int cpu = sched_getcpu();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu < 0 ? 0 : cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set)) bench_die("sched_setaffinity");

  struct ibv_context *ctx = bench_open_device();
  struct bench_path path = bench_query_path(ctx);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 256, NULL, NULL, 0) : NULL;
  if (!cq) bench_die("ibv_alloc_pd / ibv_create_cq");
  struct ibv_qp *peer = bench_create_rc_qp(pd, cq, 64);
  if (!peer || bench_to_init(peer)) bench_die("peer QP");

  /* Rate: batches of 256 lifecycles with no timer inside, after a warm-up. */
  for (int i = 0; i < 500; i++) lifecycle(pd, cq, &path, peer->qp_num, NULL);
  long done = 0;
  double start = bench_now(), el;
  do {
    for (int i = 0; i < 256; i++) lifecycle(pd, cq, &path, peer->qp_num, NULL);
    done += 256;
    el = bench_now() - start;
  } while (el < seconds);
  /* Breakdown: a shorter second pass that times each verb. */
  double acc[5] = {0};
  long timed = done / 4 > 1000 ? done / 4 : 1000;
  for (long i = 0; i < timed; i++) lifecycle(pd, cq, &path, peer->qp_num, acc);
  printf("cpu=%d\n", cpu);
  printf("iterations=%ld\n", done);
  printf("seconds=%.3f\n", el);
  printf("lifecycles_per_s=%.0f\n", done / el);
  printf("create_us=%.3f\ninit_us=%.3f\nrtr_us=%.3f\nrts_us=%.3f\ndestroy_us=%.3f\n",
         acc[0] / timed * 1e6, acc[1] / timed * 1e6, acc[2] / timed * 1e6, acc[3] / timed * 1e6,
         acc[4] / timed * 1e6);
  ibv_destroy_qp(peer);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}
