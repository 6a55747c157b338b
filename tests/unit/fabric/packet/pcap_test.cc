#include "fabric/packet/pcap.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/packet/packet.h"
#include "tests/unit/fabric/packet/capture_reader.h"

namespace softverbs::fabric::packet {
namespace {

using testing::AllCapturedPackets;
using testing::CapturedPacket;
using testing::ReadCapture;

class PcapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sv-pcap-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/out.pcap";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

// An IPv6 UD SEND_ONLY_WITH_IMMEDIATE (no IPv6 rxe capture is at hand).
std::vector<uint8_t> Ipv6Packet(IpUdpInfo* flow) {
  uint8_t src[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  uint8_t dst[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
  *flow = IpUdpInfo::V6(src, dst, 0xd872);
  flow->flow_label = 0xbeef;
  PacketHeaders h;
  h.bth = {.opcode = 0x65, .pkey = 0xffff, .dest_qp = 0x1234, .psn = 0x777};
  h.deth = {0x11111111, 0x56};
  h.immdt.imm = 7;
  const char text[] = "over IPv6";
  ConstBuffer piece{text, sizeof(text)};
  std::vector<uint8_t> out(128);
  auto n = Build(h, {&piece, 1}, *flow, out);
  EXPECT_TRUE(n.ok());
  out.resize(n.ok() ? *n : 0);
  return out;
}

TEST_F(PcapTest, RecordsReadBackAsTheSamePacketsAndFlows) {
  auto pkts = AllCapturedPackets();
  IpUdpInfo v6flow;
  auto v6 = Ipv6Packet(&v6flow);
  {
    auto w = PcapWriter::Open(path_);
    ASSERT_TRUE(w.ok()) << w.status().rule();
    for (const CapturedPacket& p : pkts) ASSERT_TRUE((*w)->Append(p.flow, p.udp_payload).ok());
    ASSERT_TRUE((*w)->Append(v6flow, v6).ok());
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_FALSE((*w)->Append(v6flow, v6).ok());  // closed
  }
  auto back = ReadCapture(path_);
  ASSERT_EQ(back.size(), pkts.size() + 1);
  for (size_t i = 0; i < pkts.size(); ++i) {
    EXPECT_EQ(back[i].udp_payload, pkts[i].udp_payload);
    EXPECT_EQ(back[i].flow.ip_id, pkts[i].flow.ip_id);
    EXPECT_EQ(back[i].flow.src_port, pkts[i].flow.src_port);
    // The IPv4 header is the captured one, checksum included (the UDP checksum is ours: rxe
    // sends 0, Linux's UDP socket a real one).
    EXPECT_EQ(std::vector<uint8_t>(back[i].ip_udp.begin(), back[i].ip_udp.begin() + 20),
              std::vector<uint8_t>(pkts[i].ip_udp.begin(), pkts[i].ip_udp.begin() + 20));
    EXPECT_TRUE(Parse(back[i].udp_payload, &back[i].flow).ok());
  }
  EXPECT_EQ(back.back().udp_payload, v6);
  EXPECT_TRUE(back.back().flow.ipv6);
  EXPECT_EQ(back.back().flow.flow_label, 0xbeefu);
  EXPECT_TRUE(Parse(back.back().udp_payload, &back.back().flow).ok());
}

TEST_F(PcapTest, ConcurrentAppendsNeverInterleave) {
  auto pkts = AllCapturedPackets();
  constexpr int kThreads = 4, kEach = 150;
  {
    auto w = PcapWriter::Open(path_);
    ASSERT_TRUE(w.ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const CapturedPacket& p = pkts[(t * kEach + i) % pkts.size()];
          EXPECT_TRUE((*w)->Append(p.flow, p.udp_payload).ok());
        }
      });
    for (auto& th : threads) th.join();
  }  // the destructor flushes and closes
  auto back = ReadCapture(path_);
  ASSERT_EQ(back.size(), size_t{kThreads * kEach});
  for (const CapturedPacket& p : back) EXPECT_TRUE(Parse(p.udp_payload, &p.flow).ok());
}

TEST_F(PcapTest, OpenFailsOnAnImpossiblePath) {
  auto w = PcapWriter::Open(dir_ + "/no/such/dir/x.pcap");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ENOENT);
}

// Runs tshark over the file; one line per packet: opcode, destination QP, PSN.
std::vector<std::string> TsharkFields(const std::string& path) {
  std::string cmd = "timeout 60 tshark -n -r " + path +
                    " -T fields -E separator=, -e infiniband.bth.opcode -e infiniband.bth.destqp"
                    " -e infiniband.bth.psn -e frame.protocols 2>/dev/null";
  std::vector<std::string> lines;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return lines;
  char line[512];
  while (fgets(line, sizeof(line), f)) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    lines.push_back(s);
  }
  pclose(f);
  return lines;
}

TEST_F(PcapTest, TsharkDissectsTheRecordsAsRoceV2) {
  ASSERT_EQ(system("command -v tshark >/dev/null 2>&1"), 0)
      << "tshark is missing: tools/install_deps.sh installs it";
  auto pkts = ReadCapture(testing::DataDir() + "rxe_write_read_atomic.pcap");
  IpUdpInfo v6flow;
  auto v6 = Ipv6Packet(&v6flow);
  {
    auto w = PcapWriter::Open(path_);
    ASSERT_TRUE(w.ok());
    for (const CapturedPacket& p : pkts) ASSERT_TRUE((*w)->Append(p.flow, p.udp_payload).ok());
    ASSERT_TRUE((*w)->Append(v6flow, v6).ok());
  }
  auto lines = TsharkFields(path_);
  ASSERT_EQ(lines.size(), pkts.size() + 1);
  char want[256];
  for (size_t i = 0; i < pkts.size(); ++i) {
    auto p = Parse(pkts[i].udp_payload);
    ASSERT_TRUE(p.ok());
    snprintf(want, sizeof(want), "%u,0x%06x,%u,raw:ip:udp:infiniband", p->hdr.bth.opcode,
             p->hdr.bth.dest_qp, p->hdr.bth.psn);
    EXPECT_EQ(lines[i].substr(0, strlen(want)), want) << "packet " << i;
  }
  EXPECT_EQ(lines.back().substr(0, 34), "101,0x001234,1911,raw:ipv6:udp:inf");
}

}  // namespace
}  // namespace softverbs::fabric::packet
