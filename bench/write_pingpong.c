/* An 8-byte RDMA WRITE ping-pong in the shape of perftest's ib_write_lat (each side waits for
 * the peer's byte, stores its own, posts one signaled WRITE of it from private memory and polls
 * its completion), timed per round of N iterations with clock_gettime: one-way nanoseconds with
 * a decimal, where perftest prints hundredths of a microsecond. For comparing two builds of
 * softverbs (bench/ab.sh), not a peer: bench/run.sh holds the side-by-side rows.
 *   write_pingpong [iterations per round, default 100000] [rounds, default 6]
 * Prints one line per round: the one-way latency in ns (the client's view). Two processes,
 * server pinned to CPU 0 and client to CPU 1 (a fork), connected over GID index 1. */
#include "qp_util.h" /* (first: it defines _GNU_SOURCE, which sched.h's CPU_SET needs) */

#include <sched.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

struct side_info {
  uint32_t qpn, rkey;
  uint64_t addr;
};

static void pin_to(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static void exchange(int out, int in, const void *mine, void *theirs, size_t n) {
  if (write(out, mine, n) != (ssize_t)n || read(in, theirs, n) != (ssize_t)n) bench_die("exchange with the peer");
}

static void run_side(int client, int out, int in, int iters, int rounds) {
  pin_to(client ? 1 : 0);
  struct ibv_context *ctx = bench_open_device();
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  struct ibv_qp *qp = pd && cq ? bench_create_rc_qp(pd, cq, 16) : NULL;
  char *buf = aligned_alloc(4096, 8192); /* private memory, as perftest's memalign */
  if (!qp || !buf) bench_die("resources");
  memset(buf, 0, 8192);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) bench_die("ibv_reg_mr");
  /* Posted from the first line, landing on the peer's second page. */
  struct side_info mine = {qp->qp_num, mr->rkey, (uint64_t)(uintptr_t)(buf + 4096)}, peer;
  exchange(out, in, &mine, &peer, sizeof mine);
  struct bench_path path = bench_query_path(ctx);
  if (bench_to_init(qp) || bench_to_rtr(qp, &path, peer.qpn) || bench_to_rts(qp)) bench_die("connect");
  char ready = 1, peer_ready;
  exchange(out, in, &ready, &peer_ready, 1);

  volatile char *post = buf + 7, *poll = buf + 4096 + 7;
  struct ibv_sge sge = {(uint64_t)(uintptr_t)buf, 8, mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peer.addr;
  wr.wr.rdma.rkey = peer.rkey;
  struct ibv_wc wc;
  unsigned char sent = 0, seen = 0;
  for (int r = 0; r < rounds; r++) {
    const double t0 = bench_now();
    for (int i = 0; i < iters; i++) {
      if (client || i > 0 || r > 0) { /* the server starts */
        seen++;
        while (*poll != (char)seen) {
        }
      }
      *post = (char)++sent;
      if (ibv_post_send(qp, &wr, &bad)) bench_die("ibv_post_send");
      int n;
      do n = ibv_poll_cq(cq, 1, &wc);
      while (n == 0);
      if (n < 0 || wc.status != IBV_WC_SUCCESS) bench_die("completion");
    }
    if (client) printf("%.1f\n", (bench_now() - t0) / iters / 2 * 1e9);
  }
  fflush(stdout);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  free(buf);
}

int main(int argc, char **argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 100000, rounds = argc > 2 ? atoi(argv[2]) : 6;
  int to_client[2], to_server[2];
  if (iters <= 0 || rounds <= 0 || pipe(to_client) || pipe(to_server)) bench_die("usage: write_pingpong [iters] [rounds]");
  const pid_t server = fork();
  if (server == 0) {
    run_side(0, to_client[1], to_server[0], iters, rounds);
    _exit(0);
  }
  run_side(1, to_server[1], to_client[0], iters, rounds);
  int status = 0;
  waitpid(server, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
