// An MPI program for mpi_test.sh: ping-pong, all-reduce and one-sided MPI_Put / MPI_Get between
// the ranks, every result checked. Prints "ok <what>" per check and exits non-zero on a wrong one.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void Check(int rank, int ok, const char* what) {
  if (!ok) failures++;
  if (rank == 0 || !ok) printf("%s %s (rank %d)\n", ok ? "ok  " : "FAIL", what, rank);
}

static void PingPong(int rank, int size, int bytes, int iters) {
  char* buf = malloc(bytes);
  int peer = rank == 0 ? 1 : 0, ok = 1;
  if (rank < 2) {
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      if (rank == 0) {
        memset(buf, (char)i, bytes);
        MPI_Send(buf, bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int j = 0; j < bytes; j += 997) ok &= buf[j] == (char)(i + 1);
      } else {
        MPI_Recv(buf, bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int j = 0; j < bytes; j += 997) ok &= buf[j] == (char)i;
        memset(buf, (char)(i + 1), bytes);
        MPI_Send(buf, bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD);
      }
    }
    double us = (MPI_Wtime() - t0) * 1e6 / iters / 2;
    char what[96];
    snprintf(what, sizeof(what), "ping-pong %d bytes x %d: %.2f us one-way", bytes, iters, us);
    Check(rank, ok, what);
  }
  (void)size;
  free(buf);
}

static void AllReduce(int rank, int size) {
  enum { kN = 4096 };
  long* in = malloc(kN * sizeof(long));
  long* out = malloc(kN * sizeof(long));
  for (int i = 0; i < kN; ++i) in[i] = (long)(rank + 1) * i;
  MPI_Allreduce(in, out, kN, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  int ok = 1;
  long ranks_sum = (long)size * (size + 1) / 2;
  for (int i = 0; i < kN; ++i) ok &= out[i] == ranks_sum * i;
  Check(rank, ok, "all-reduce of 4096 longs");
  free(in);
  free(out);
}

static void OneSided(int rank, int size) {
  enum { kN = 1 << 16 };
  int* window_mem;
  MPI_Win win;
  MPI_Win_allocate(kN * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &window_mem, &win);
  for (int i = 0; i < kN; ++i) window_mem[i] = -1;
  int* src = malloc(kN * sizeof(int));
  for (int i = 0; i < kN; ++i) src[i] = rank * 1000000 + i;
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Win_fence(0, win);
  MPI_Put(src, kN, MPI_INT, right, 0, kN, MPI_INT, win);  // into the right neighbour's window
  MPI_Win_fence(0, win);
  int ok = 1;
  for (int i = 0; i < kN; ++i) ok &= window_mem[i] == left * 1000000 + i;
  Check(rank, ok, "MPI_Put 256 KiB into the next rank's window");
  int* got = malloc(kN * sizeof(int));
  MPI_Win_fence(0, win);
  MPI_Get(got, kN, MPI_INT, right, 0, kN, MPI_INT, win);  // what the right neighbour holds
  MPI_Win_fence(0, win);
  ok = 1;
  for (int i = 0; i < kN; ++i) ok &= got[i] == rank * 1000000 + i;
  Check(rank, ok, "MPI_Get 256 KiB from the next rank's window");
  MPI_Win_free(&win);
  free(src);
  free(got);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  PingPong(rank, size, 8, 10000);
  PingPong(rank, size, 1 << 20, 100);
  AllReduce(rank, size);
  OneSided(rank, size);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi checks on %d ranks: %s\n", size, total ? "FAILED" : "all ok");
  MPI_Finalize();
  return total ? 1 : 0;
}
