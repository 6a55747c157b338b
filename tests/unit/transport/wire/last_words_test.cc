// What the wire says for a dead process (transport/wire/last_words.h): the guard's book, the
// datagram it sends, and the guard program itself speaking (or not) for a process that ends.
#include "transport/wire/last_words.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/packet/ip_udp.h"
#include "fabric/packet/packet.h"
#include "transport/wire/qp1.h"

namespace softverbs::transport {
namespace {

std::array<uint8_t, 16> LastWordsTestGid(const char* v4) {
  std::array<uint8_t, 16> g{};
  g[10] = g[11] = 0xff;
  inet_pton(AF_INET, v4, g.data() + 12);
  return g;
}

LastWordsRecord LastWordsTestRecord(uint64_t token, const char* from, const char* to) {
  LastWordsRecord r;
  r.token = token;
  memcpy(r.sgid, LastWordsTestGid(from).data(), 16);
  memcpy(r.dgid, LastWordsTestGid(to).data(), 16);
  for (size_t i = 0; i < sizeof r.mad; ++i) r.mad[i] = static_cast<uint8_t>(i ^ token);
  return r;
}

std::span<const uint8_t> Bytes(const LastWordsRecord& r) { return {reinterpret_cast<const uint8_t*>(&r), sizeof r}; }

// A UDP socket on `ip`:`port` (0: any) of the loopback, and its port.
UniqueFd LastWordsTestReceiver(const char* ip, uint16_t port, uint16_t* bound) {
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  inet_pton(AF_INET, ip, &sin.sin_addr);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) return UniqueFd();
  socklen_t len = sizeof sin;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  *bound = ntohs(sin.sin_port);
  return fd;
}

// The next datagram within `ms`, with its source; empty if none.
std::vector<uint8_t> ReceiveWithin(int fd, int ms, sockaddr_in* from) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return {};
  std::vector<uint8_t> buf(2048);
  socklen_t len = sizeof *from;
  ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(from), &len);
  buf.resize(n > 0 ? n : 0);
  return buf;
}

TEST(LastWordsBookTest, ArmsDisarmsAndRefusesMalformedRecords) {
  LastWordsBook book;
  ASSERT_TRUE(book.Apply(Bytes(LastWordsTestRecord(1, "10.0.0.1", "10.0.0.2"))).ok());
  ASSERT_TRUE(book.Apply(Bytes(LastWordsTestRecord(2, "10.0.0.1", "10.0.0.3"))).ok());
  LastWordsRecord off;
  off.op = LastWordsRecord::kDisarm;
  off.token = 1;
  ASSERT_TRUE(book.Apply(Bytes(off)).ok());
  ASSERT_EQ(book.armed().size(), 1u);
  EXPECT_EQ(book.armed().begin()->first, 2u);
  // Malformed: short, another magic, an unknown operation. Nothing changes.
  LastWordsRecord r = LastWordsTestRecord(3, "10.0.0.1", "10.0.0.2");
  EXPECT_EQ(book.Apply(Bytes(r).first(10)).code(), EINVAL);
  r.magic = 0;
  EXPECT_EQ(book.Apply(Bytes(r)).code(), EINVAL);
  r.magic = LastWordsRecord::kMagic;
  r.op = 9;
  EXPECT_EQ(book.Apply(Bytes(r)).code(), EINVAL);
  EXPECT_EQ(book.armed().size(), 1u);
}

TEST(LastWordsTest, TheDatagramIsQp1sMadWithAValidIcrc) {
  uint16_t port = 0;
  UniqueFd rx = LastWordsTestReceiver("127.0.0.1", 0, &port);
  ASSERT_TRUE(rx.valid());
  const LastWordsRecord r = LastWordsTestRecord(7, "127.0.0.1", "127.0.0.1");
  ASSERT_TRUE(SendLastWords(r, port).ok());
  sockaddr_in from{};
  auto datagram = ReceiveWithin(rx.get(), 2000, &from);
  ASSERT_FALSE(datagram.empty());
  auto flow = fabric::packet::IpUdpInfo::V4(r.sgid + 12, r.dgid + 12, ntohs(from.sin_port));
  flow.dst_port = port;
  auto parsed = fabric::packet::Parse(datagram, &flow);  // the ICRC too
  ASSERT_TRUE(parsed.ok()) << parsed.status().rule();
  EXPECT_EQ(parsed->hdr.bth.dest_qp, kQp1);
  EXPECT_EQ(parsed->hdr.bth.pkey, kGsiPkey);
  EXPECT_EQ(parsed->hdr.deth.qkey, kGsiQkey);
  EXPECT_EQ(parsed->hdr.deth.src_qp, kQp1);
  ASSERT_EQ(parsed->payload.size(), sizeof r.mad);
  EXPECT_EQ(memcmp(parsed->payload.data(), r.mad, sizeof r.mad), 0);
  // GIDs of two IP versions are refused.
  LastWordsRecord mixed = r;
  memset(mixed.dgid, 0, 16);
  mixed.dgid[15] = 1;
  EXPECT_EQ(SendLastWords(mixed, port).code(), EINVAL);
}

#ifdef SV_CM_GUARD_PATH
// The guard program, started by a process that then ends: it sends what is still armed (to UDP
// 4791 of the destination: a loopback address nobody else uses), and nothing that was disarmed.
TEST(LastWordsTest, TheGuardSpeaksForAProcessThatEndsWithWhatIsStillArmed) {
  uint16_t port = 0;
  UniqueFd rx = LastWordsTestReceiver("127.0.0.77", 4791, &port);
  if (!rx.valid()) GTEST_SKIP() << "127.0.0.77:4791 is taken";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LastWords words(SV_CM_GUARD_PATH);
    const LastWordsRecord kept = LastWordsTestRecord(0x51, "127.0.0.77", "127.0.0.77");
    const LastWordsRecord dropped = LastWordsTestRecord(0x52, "127.0.0.77", "127.0.0.77");
    words.Arm(kept.token, std::span<const uint8_t, 16>(kept.sgid), std::span<const uint8_t, 16>(kept.dgid), kept.mad);
    words.Arm(dropped.token, std::span<const uint8_t, 16>(dropped.sgid), std::span<const uint8_t, 16>(dropped.dgid),
              dropped.mad);
    words.Disarm(dropped.token);
    _exit(words.started() ? 0 : 3);  // no destructor, no disarm: as a killed process
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0) << "the guard did not start";
  const LastWordsRecord kept = LastWordsTestRecord(0x51, "127.0.0.77", "127.0.0.77");
  int copies = 0;
  sockaddr_in from{};
  for (auto d = ReceiveWithin(rx.get(), 5000, &from); !d.empty(); d = ReceiveWithin(rx.get(), 1500, &from)) {
    auto parsed = fabric::packet::Parse(d);
    ASSERT_TRUE(parsed.ok());
    ASSERT_EQ(parsed->payload.size(), sizeof kept.mad);
    EXPECT_EQ(memcmp(parsed->payload.data(), kept.mad, sizeof kept.mad), 0) << "a disarmed MAD was sent";
    ++copies;
  }
  EXPECT_EQ(copies, 3);  // the kept MAD, three times a second apart; never the disarmed one
}
#endif

}  // namespace
}  // namespace softverbs::transport
