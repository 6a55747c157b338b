/* UDP GSO/GRO vs sendmmsg/recvmmsg for RoCE-sized datagrams (1-4 KiB) across a veth pair.
 * Usage: udp_gso recv IP PORT plain|gro COUNT SIZE     (prints CPU ns per datagram received)
 *        udp_gso send IP PORT plain|gso COUNT SIZE     (prints CPU ns per datagram sent)
 * plain: sendmmsg / recvmmsg, 32 datagrams per call. gso: one sendmsg with UDP_SEGMENT carrying
 * as many SIZE-byte datagrams as fit in 64 KiB. gro: UDP_GRO on the receiver, 64 KiB reads.
 * CPU time (getrusage), not wall time: the machine is shared. Driven by bench/udp_gso.sh.
 * Build: cc -O2 udp_gso.c */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static double cpu_ns(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

int main(int argc, char **argv) {
  if (argc != 7) return fprintf(stderr, "usage: see the header\n"), 2;
  const int recv_side = !strcmp(argv[1], "recv"), special = strcmp(argv[4], "plain") != 0;
  const long count = atol(argv[5]);
  const int size = atoi(argv[6]);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
  inet_pton(AF_INET, argv[2], &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 8 << 20;
  setsockopt(fd, SOL_SOCKET, recv_side ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, &big, sizeof(big));
  static char buf[32][65536];
  struct iovec iov[32];
  struct mmsghdr m[32];
  memset(m, 0, sizeof(m));
  for (int i = 0; i < 32; ++i) {
    iov[i].iov_base = buf[i];
    iov[i].iov_len = recv_side ? 65536 : (size_t)size;
    m[i].msg_hdr.msg_iov = &iov[i];
    m[i].msg_hdr.msg_iovlen = 1;
    if (!recv_side) m[i].msg_hdr.msg_name = &addr, m[i].msg_hdr.msg_namelen = sizeof(addr);
  }
  long done = 0;
  double start = 0;
  if (recv_side) {
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr))) return perror("bind"), 1;
    if (special) setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one));
    char ctl[32][64];
    puts("ready");
    fflush(stdout);
    struct pollfd p = {fd, POLLIN, 0};
    while (done < count && poll(&p, 1, 2000) == 1) {
      if (!start) start = cpu_ns();
      for (int i = 0; i < 32; ++i) m[i].msg_hdr.msg_control = ctl[i], m[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
      int n = recvmmsg(fd, m, special ? 1 : 32, MSG_DONTWAIT, NULL);
      for (int i = 0; i < n; ++i) {
        int seg = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m[i].msg_hdr); c; c = CMSG_NXTHDR(&m[i].msg_hdr, c))
          if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) seg = *(int *)CMSG_DATA(c);
        done += seg ? (m[i].msg_len + seg - 1) / seg : 1;
      }
    }
  } else {
    start = cpu_ns();
    const int per = 65000 / size;
    while (done < count) {
      if (special) {
        char c[CMSG_SPACE(sizeof(uint16_t))] = {0};
        struct iovec v = {buf[0], (size_t)size * per};
        struct msghdr h = {.msg_name = &addr, .msg_namelen = sizeof(addr), .msg_iov = &v, .msg_iovlen = 1,
                           .msg_control = c, .msg_controllen = sizeof(c)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&h);
        cm->cmsg_level = SOL_UDP, cm->cmsg_type = UDP_SEGMENT, cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        *(uint16_t *)CMSG_DATA(cm) = (uint16_t)size;
        if (sendmsg(fd, &h, 0) < 0) return perror("sendmsg UDP_SEGMENT"), 1;
        done += per;
      } else {
        int n = sendmmsg(fd, m, 32, 0);
        if (n < 0) return perror("sendmmsg"), 1;
        done += n;
      }
      if (done % (per * 64) < (special ? per : 32)) usleep(2000); /* let the receiver keep up */
    }
  }
  printf("%s %s size %d: %ld datagrams, %.0f CPU ns per datagram\n", argv[1], argv[4], size, done,
         (cpu_ns() - start) / (done ? done : 1));
  return 0;
}
