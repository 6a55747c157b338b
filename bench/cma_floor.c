/* The floor of cross-memory attach: what one process_vm_writev into another process's private
 * memory costs on this machine, without softverbs around it. softverbs executes an RDMA WRITE
 * or READ as one such call (DESIGN.md section 5: application memory is private and never
 * remapped), so these are the limits its ib_write_lat / ib_write_bw / ib_read_bw approach.
 * Prints "write_8_us=<us per call>", "write_1m_gbps=<GB/s>", "read_1m_gbps=<GB/s>": best of 5
 * timed runs of >= 0.1 s each, into a forked child that waits in pause().
 * Build: cc -O2 cma_floor.c */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds per call of `size` bytes between `mine` and the child's `theirs` (same address). */
static double per_call(pid_t child, char *mine, char *theirs, size_t size, int write) {
  struct iovec l = {mine, size}, r = {theirs, size};
  double best = 1e9;
  for (int run = 0; run < 5; run++) {
    long iters = 0;
    double t0 = now(), t;
    do {
      ssize_t n = write ? process_vm_writev(child, &l, 1, &r, 1, 0) : process_vm_readv(child, &l, 1, &r, 1, 0);
      if (n != (ssize_t)size) {
        perror("process_vm_writev/readv");
        exit(1);
      }
      iters++;
    } while ((t = now() - t0) < 0.1);
    if (t / iters < best) best = t / iters;
  }
  return best;
}

int main(void) {
  const size_t mib = 1 << 20;
  char *src = aligned_alloc(4096, mib);
  char *dst = aligned_alloc(4096, mib);
  if (!src || !dst) return 1;
  memset(src, 1, mib);
  memset(dst, 2, mib);
  pid_t child = fork();
  if (child == 0) {
    memset(dst, 3, mib); /* its own private copy, touched */
    pause();
    return 0;
  }
  usleep(100000);
  printf("write_8_us=%.3f\n", per_call(child, src, dst, 8, 1) * 1e6);
  printf("write_1m_gbps=%.2f\n", mib / per_call(child, src, dst, mib, 1) / 1e9);
  printf("read_1m_gbps=%.2f\n", mib / per_call(child, src, dst, mib, 0) / 1e9);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return 0;
}
