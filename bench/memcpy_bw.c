/* memcpy bandwidth: the physical limit for a same-host copy. Usage: memcpy_bw [size...]
 * For each size (default 1048576) copies one page-aligned, pre-touched buffer into another,
 * the same two buffers every time (as perftest and ucx_perftest reuse theirs), and prints
 * "<size> <bytes per second>": the best of 5 timed runs of >= 0.1 s each, after a warm-up.
 * Build: cc -O2 memcpy_bw.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Keeps the compiler from dropping copies whose result is never read. */
static void *(*volatile copy)(void *, const void *, size_t) = memcpy;

int main(int argc, char **argv) {
  size_t sizes[64];
  int n = 0;
  for (int i = 1; i < argc && n < 64; i++) sizes[n++] = strtoull(argv[i], NULL, 0);
  if (n == 0) sizes[n++] = 1 << 20;
  size_t max = 0;
  for (int i = 0; i < n; i++)
    if (sizes[i] > max) max = sizes[i];
  char *src = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
  char *dst = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
  if (!src || !dst) return 1;
  memset(src, 1, max);
  memset(dst, 2, max);
  for (int i = 0; i < n; i++) {
    size_t size = sizes[i];
    long iters = 1;
    double t, best = 0;
    for (int w = 0; w < 64; w++) copy(dst, src, size);
    for (;;) { /* grow the iteration count until one timed run lasts >= 0.1 s */
      double t0 = now();
      for (long k = 0; k < iters; k++) copy(dst, src, size);
      t = now() - t0;
      if (t >= 0.1) break;
      iters *= (t < 0.005) ? 16 : 2;
    }
    for (int r = 0; r < 5; r++) {
      double t0 = now();
      for (long k = 0; k < iters; k++) copy(dst, src, size);
      t = now() - t0;
      if ((double)size * iters / t > best) best = (double)size * iters / t;
    }
    printf("%zu %.0f\n", size, best);
  }
  return dst[max - 1] == 1 ? 0 : 2;
}
