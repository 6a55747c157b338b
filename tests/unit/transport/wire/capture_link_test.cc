// The same host's messages rendered as RoCEv2 packets (transport/wire/capture_link.h): each
// rendered packet parses with its flow's ICRC; a message is cut by the path MTU with the QP's
// PSNs; the responder's ACK, RNR NAK, READ responses and atomic ACK travel back to the
// requester; and CaptureLink records exactly what its inner link carried.
#include "transport/wire/capture_link.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/packet/packet.h"
#include "transport/codes.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using qp_type::kRc, qp_type::kUc, qp_type::kUd;

struct CaptureRecord {
  packet::IpUdpInfo flow;
  std::vector<uint8_t> bytes;
  packet::ParsedPacket Parsed() const {
    auto p = packet::Parse(bytes, &flow);  // ICRC checked against the record's own flow
    EXPECT_TRUE(p.ok()) << p.status().rule();
    return p.ok() ? *p : packet::ParsedPacket{};
  }
};

class CaptureRenderTest : public ::testing::Test {
 protected:
  CaptureRenderTest() {
    // ::ffff:10.1.0.1 -> ::ffff:10.1.0.2
    const uint8_t s[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 1};
    memcpy(av_.sgid, s, 16);
    memcpy(av_.dgid, s, 16);
    av_.dgid[15] = 2;
    for (size_t i = 0; i < sizeof(data_); ++i) data_[i] = static_cast<uint8_t>(i * 7);
    piece_ = {data_, sizeof(data_)};
    r_.qp_type = kRc;
    r_.src_qp = 0x111;
    r_.dest_qp = 0x222;
    r_.psn = 0xfffffe;  // the 24-bit PSN wraps inside the message
    r_.mtu = 1024;
    r_.addressing = &av_;
    r_.local = &piece_;
    r_.local_count = 1;
    r_.length = sizeof(data_);
    r_.remote_addr = 0x1000;
    r_.rkey = 0x77;
  }
  CapturedPacket Sink() {
    return [this](const packet::IpUdpInfo& f, std::span<const uint8_t> p) {
      records_.push_back({f, std::vector<uint8_t>(p.begin(), p.end())});
      return Status::Ok();
    };
  }
  Addressing av_;
  uint8_t data_[2500];
  iovec piece_{};
  Request r_;
  std::vector<CaptureRecord> records_;
};

TEST_F(CaptureRenderTest, WriteIsCutByThePathMtuWithConsecutivePsnsAndOneAck) {
  r_.opcode = WrOpcode::kRdmaWrite;
  ASSERT_TRUE(RenderRequest(r_, Sink()).ok());
  ASSERT_TRUE(RenderReply(r_, Reply::Of(ReplyCode::kAck), 5, Sink()).ok());
  ASSERT_EQ(records_.size(), 4u);  // 1024 + 1024 + 452, then the ACK
  const uint8_t opcodes[] = {0x06, 0x07, 0x08, 0x11};  // RC WRITE FIRST, MIDDLE, LAST; ACKNOWLEDGE
  const uint32_t psns[] = {0xfffffe, 0xffffff, 0, 0};
  size_t payload = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    const packet::ParsedPacket p = records_[i].Parsed();
    ASSERT_NE(p.info, nullptr);
    EXPECT_EQ(p.hdr.bth.opcode, opcodes[i]) << i;
    EXPECT_EQ(p.hdr.bth.psn, psns[i]) << i;
    EXPECT_FALSE(records_[i].flow.ipv6);
    if (i < 3) {
      EXPECT_EQ(p.hdr.bth.dest_qp, 0x222u);
      EXPECT_EQ(records_[i].flow.dst_port, packet::kRoceV2Port);
      EXPECT_GE(records_[i].flow.src_port, 0xc000);
      EXPECT_EQ(memcmp(p.payload.data(), data_ + payload, p.payload.size()), 0);
      payload += p.payload.size();
    }
  }
  EXPECT_EQ(payload, sizeof(data_));
  const packet::ParsedPacket ack = records_[3].Parsed();
  EXPECT_EQ(ack.hdr.bth.dest_qp, 0x111u);  // back to the requester
  EXPECT_EQ(ack.hdr.aeth.syndrome, 0x1f);
  EXPECT_EQ(ack.hdr.aeth.msn, 5u);
  // The answer travels from port 4791 to port 4791 (as the wire fabric answers), back between
  // the same addresses.
  EXPECT_EQ(records_[3].flow.src_port, packet::kRoceV2Port);
  EXPECT_EQ(records_[3].flow.dst_port, packet::kRoceV2Port);
  EXPECT_EQ(records_[3].flow.src, records_[0].flow.dst);
}

TEST_F(CaptureRenderTest, ReadResponsesCarryTheBytesThatLanded) {
  r_.opcode = WrOpcode::kRdmaRead;
  r_.psn = 10;
  ASSERT_TRUE(RenderRequest(r_, Sink()).ok());
  ASSERT_TRUE(RenderReply(r_, Reply::Of(ReplyCode::kAck), 1, Sink()).ok());
  ASSERT_EQ(records_.size(), 4u);  // the request, then FIRST, MIDDLE, LAST responses
  const packet::ParsedPacket req = records_[0].Parsed();
  EXPECT_EQ(req.hdr.bth.opcode, 0x0c);
  EXPECT_EQ(req.hdr.reth.length, sizeof(data_));
  const uint8_t opcodes[] = {0x0d, 0x0e, 0x0f};
  size_t at = 0;
  for (size_t i = 0; i < 3; ++i) {
    const packet::ParsedPacket p = records_[i + 1].Parsed();
    EXPECT_EQ(p.hdr.bth.opcode, opcodes[i]);
    EXPECT_EQ(p.hdr.bth.psn, 10 + i);  // one PSN per response packet (IBA 9.7.1)
    EXPECT_EQ(memcmp(p.payload.data(), data_ + at, p.payload.size()), 0);
    at += p.payload.size();
  }
  EXPECT_EQ(at, sizeof(data_));
}

TEST_F(CaptureRenderTest, AtomicAckCarriesTheOriginalValue) {
  r_.opcode = WrOpcode::kAtomicFetchAdd;
  r_.length = 8;
  r_.compare_add = 3;
  ASSERT_TRUE(RenderRequest(r_, Sink()).ok());
  Reply reply = Reply::Of(ReplyCode::kAck);
  reply.original = 0x1122334455667788ull;
  ASSERT_TRUE(RenderReply(r_, reply, 2, Sink()).ok());
  ASSERT_EQ(records_.size(), 2u);
  EXPECT_EQ(records_[0].Parsed().hdr.bth.opcode, 0x14);  // FETCH_ADD
  EXPECT_EQ(records_[0].Parsed().hdr.atomic.swap_add, 3u);
  const packet::ParsedPacket ack = records_[1].Parsed();
  EXPECT_EQ(ack.hdr.bth.opcode, 0x12);  // ATOMIC ACKNOWLEDGE
  EXPECT_EQ(ack.hdr.atomic_ack.original, 0x1122334455667788ull);
}

TEST_F(CaptureRenderTest, RnrAndNaksNameTheFirstPsnAndNoAnswerSendsNothing) {
  r_.opcode = WrOpcode::kSend;
  r_.psn = 40;
  ASSERT_TRUE(RenderReply(r_, Reply::Rnr(14), 0, Sink()).ok());
  ASSERT_TRUE(RenderReply(r_, Reply::Of(ReplyCode::kRemoteAccess), 0, Sink()).ok());
  ASSERT_TRUE(RenderReply(r_, Reply::Of(ReplyCode::kNoAnswer), 0, Sink()).ok());
  ASSERT_EQ(records_.size(), 2u);
  EXPECT_EQ(records_[0].Parsed().hdr.aeth.syndrome, 0x20 | 14);
  EXPECT_EQ(records_[0].Parsed().hdr.bth.psn, 40u);
  EXPECT_EQ(records_[1].Parsed().hdr.aeth.syndrome, 0x62);
}

TEST_F(CaptureRenderTest, UdAndUcAreNotAnsweredAndIpv6GidsMakeIpv6) {
  av_.sgid[10] = av_.sgid[11] = 0;  // no longer IPv4-mapped
  av_.sgid[0] = 0xfe;
  av_.sgid[1] = 0x80;
  r_.qp_type = kUd;
  r_.opcode = WrOpcode::kSend;
  r_.qkey = 0x1234;
  r_.length = 100;
  ASSERT_TRUE(RenderRequest(r_, Sink()).ok());
  ASSERT_TRUE(RenderReply(r_, Reply::Of(ReplyCode::kAck), 0, Sink()).ok());
  ASSERT_EQ(records_.size(), 1u);
  EXPECT_TRUE(records_[0].flow.ipv6);
  const packet::ParsedPacket p = records_[0].Parsed();
  EXPECT_EQ(p.hdr.bth.opcode, 0x64);  // UD SEND_ONLY
  EXPECT_EQ(p.hdr.deth.qkey, 0x1234u);
  EXPECT_EQ(p.hdr.deth.src_qp, 0x111u);
  r_.qp_type = kUc;
  EXPECT_TRUE(Renderable(r_));
  ASSERT_TRUE(RenderReply(r_, Reply::Of(ReplyCode::kAck), 0, Sink()).ok());
  EXPECT_EQ(records_.size(), 1u);
  r_.xrc = true;  // XRC and DC have no wire form yet: not rendered
  EXPECT_FALSE(Renderable(r_));
}

// A link that answers as told and counts what it carried.
class CaptureFakeLink final : public Link {
 public:
  Reply Carry(const Request&) override {
    ++carried;
    return answer;
  }
  void CarryMulticast(const Request&, uint32_t) override { ++multicast; }
  Reply answer = Reply::Of(ReplyCode::kAck);
  int carried = 0;
  int multicast = 0;
};

TEST_F(CaptureRenderTest, CaptureLinkRecordsWhatItsInnerLinkCarried) {
  char path[] = "/tmp/sv-capture-link-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto writer = packet::PcapWriter::Open(path);
  ASSERT_TRUE(writer.ok());
  auto inner = std::make_unique<CaptureFakeLink>();
  CaptureFakeLink* fake = inner.get();
  CaptureLink link(std::move(inner), **writer);
  r_.opcode = WrOpcode::kSend;
  r_.length = 100;
  EXPECT_EQ(link.Carry(r_).code, ReplyCode::kAck);  // SEND_ONLY + ACK
  fake->answer = Reply::Of(ReplyCode::kNoAnswer);
  EXPECT_EQ(link.Carry(r_).code, ReplyCode::kNoAnswer);  // SEND_ONLY, nothing back
  EXPECT_EQ(fake->carried, 2);
  ASSERT_TRUE((*writer)->Close().ok());
  FILE* f = fopen(path, "rb");
  ASSERT_NE(f, nullptr);
  std::vector<uint8_t> file(1 << 16);
  file.resize(fread(file.data(), 1, file.size(), f));
  fclose(f);
  unlink(path);
  // Walk the records: 24-byte file header, then 16-byte record headers (incl_len at +8).
  size_t at = 24, count = 0;
  while (at + 16 <= file.size()) {
    uint32_t len;
    memcpy(&len, file.data() + at + 8, 4);
    at += 16 + len;
    ++count;
  }
  EXPECT_EQ(at, file.size());
  EXPECT_EQ(count, 3u);
}

}  // namespace
}  // namespace softverbs::transport
