#include "transport/raw/flow_table.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <vector>

namespace softverbs::transport::raw {
namespace {

struct Sink : RawSink {
  void OnFrame(std::span<const uint8_t>, const fabric::raw::FrameView&, const FlowMark&) override {}
};

std::vector<uint8_t> Frame(uint8_t dst_last, uint16_t udp_dst, bool multicast = false) {
  std::vector<uint8_t> f = {uint8_t(multicast ? 0x01 : 0x02), 0, 0, 0, 0, dst_last, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
                            0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
                            0x30, 0x39, uint8_t(udp_dst >> 8), uint8_t(udp_dst), 0, 8, 0, 0};
  return f;
}

FlowRule UdpRule(uint16_t port, uint16_t priority) {
  FlowRule r;
  r.priority = priority;
  r.outer.udp.present = true;
  r.outer.udp.val.dst_port = port;
  r.outer.udp.mask.dst_port = 0xffff;
  return r;
}

std::vector<RawSink*> Steer(const FlowTable& t, const std::vector<uint8_t>& f, FrameSource src = FrameSource::kReceived,
                            std::vector<Delivery>* out = nullptr) {
  fabric::raw::FrameView v;
  EXPECT_TRUE(fabric::raw::ParseFrame(f, &v));
  std::vector<Delivery> d;
  t.Steer(f, v, src, nullptr, &d);
  if (out) *out = d;
  std::vector<RawSink*> sinks;
  for (auto& x : d) sinks.push_back(x.sink);
  return sinks;
}

TEST(FlowTableTest, LowestPriorityValueWinsAndEqualPrioritiesReplicate) {
  FlowTable t;
  Sink a, b, c;
  t.Add(UdpRule(80, 3), &a);
  t.Add(UdpRule(80, 1), &b);
  t.Add(UdpRule(80, 1), &c);
  EXPECT_EQ(Steer(t, Frame(2, 80)), (std::vector<RawSink*>{&b, &c}));
  EXPECT_TRUE(Steer(t, Frame(2, 81)).empty());
}

TEST(FlowTableTest, DontTrapGoesOnToLowerPrioritiesAndDropDrops) {
  FlowTable t;
  Sink a, b;
  FlowRule first = UdpRule(80, 0);
  first.dont_trap = true;
  t.Add(first, &a);
  t.Add(UdpRule(80, 5), &b);
  EXPECT_EQ(Steer(t, Frame(2, 80)), (std::vector<RawSink*>{&a, &b}));
  FlowRule drop = UdpRule(80, 0);
  drop.drop = true;
  const uint64_t id = t.Add(drop, &b);
  // The DROP rule at priority 0 drops the frame there, and traps it: priority 5 never sees it.
  EXPECT_TRUE(Steer(t, Frame(2, 80)).empty());
  EXPECT_TRUE(t.Remove(id));
  EXPECT_FALSE(t.Remove(id));
}

TEST(FlowTableTest, DefaultsCatchWhatNoNormalRuleMatchedAndSniffersSeeAll) {
  FlowTable t;
  Sink normal, all, mc, sniff;
  t.Add(UdpRule(80, 0), &normal);
  FlowRule r;
  r.type = FlowType::kAllDefault;
  t.Add(r, &all);
  r.type = FlowType::kMcDefault;
  t.Add(r, &mc);
  r.type = FlowType::kSniffer;
  t.Add(r, &sniff);
  EXPECT_EQ(Steer(t, Frame(2, 80)), (std::vector<RawSink*>{&sniff, &normal}));
  EXPECT_EQ(Steer(t, Frame(2, 81)), (std::vector<RawSink*>{&sniff, &all}));
  EXPECT_EQ(Steer(t, Frame(2, 81, true)), (std::vector<RawSink*>{&sniff, &mc}));
  EXPECT_EQ(Steer(t, Frame(2, 80), FrameSource::kSentAway), (std::vector<RawSink*>{&sniff}));
}

TEST(FlowTableTest, EthMasksAndTagsAndLayerPresence) {
  FlowTable t;
  Sink a, b;
  FlowRule r;
  r.outer.eth.present = true;
  r.outer.eth.val.dst_mac[0] = 2;
  r.outer.eth.val.dst_mac[5] = 7;
  for (auto& m : r.outer.eth.mask.dst_mac) m = 0xff;
  r.has_tag = true;
  r.tag = 0x123;
  t.Add(r, &a);
  FlowRule tcp;
  tcp.priority = 2;
  tcp.outer.tcp.present = true;  // all ports, but TCP only
  t.Add(tcp, &b);
  std::vector<Delivery> d;
  EXPECT_EQ(Steer(t, Frame(7, 1), FrameSource::kReceived, &d), (std::vector<RawSink*>{&a}));
  EXPECT_TRUE(d[0].mark.has_tag);
  EXPECT_EQ(d[0].mark.tag, 0x123u);
  EXPECT_TRUE(Steer(t, Frame(8, 1)).empty());  // UDP never matches a TCP spec
  FlowRule vlan;
  vlan.outer.eth.present = true;
  vlan.outer.eth.mask.vlan_tag = 0x0fff;
  FlowTable t2;
  t2.Add(vlan, &a);
  EXPECT_TRUE(Steer(t2, Frame(7, 1)).empty());  // a VLAN mask needs a tagged frame
}

TEST(FlowTableTest, VxlanVniAndInnerSpecs) {
  // An outer UDP/4789 frame carrying VXLAN VNI 0x102 and an inner UDP frame to port 9.
  auto inner = Frame(5, 9);
  auto outer = Frame(2, 4789);
  outer[17] = static_cast<uint8_t>(28 + 8 + inner.size());  // IPv4 total length
  outer[39] = static_cast<uint8_t>(8 + 8 + inner.size());   // UDP length
  const uint8_t vxlan[8] = {0x08, 0, 0, 0, 0x00, 0x01, 0x02, 0};
  outer.insert(outer.end(), vxlan, vxlan + 8);
  outer.insert(outer.end(), inner.begin(), inner.end());
  FlowTable t;
  Sink a, b;
  FlowRule vni;
  vni.vxlan_vni = {true, 0x102, 0xffffff};
  vni.inner.udp = {true, {0, 9}, {0, 0xffff}};
  t.Add(vni, &a);
  FlowRule other = vni;
  other.priority = 1;
  other.inner.udp.val.dst_port = 10;  // the inner port differs
  t.Add(other, &b);
  EXPECT_EQ(Steer(t, outer), (std::vector<RawSink*>{&a}));
  FlowTable alone;
  alone.Add(other, &b);
  EXPECT_TRUE(Steer(alone, outer).empty());  // the inner UDP spec really looks at the inner frame
  FlowTable t2;
  FlowRule wrong_vni;
  wrong_vni.vxlan_vni = {true, 0x103, 0xffffff};
  t2.Add(wrong_vni, &a);
  EXPECT_TRUE(Steer(t2, outer).empty());
  EXPECT_TRUE(Steer(t2, inner).empty());  // no tunnel at all
}

TEST(FlowTableTest, CountersCountExactlyWhatTheirRuleMatched) {
  FlowTable t;
  Sink a, b, c;
  FlowRule watch = UdpRule(80, 0);  // DONT_TRAP: counts, and lets the frame go on
  watch.dont_trap = true;
  watch.counter = std::make_shared<FlowCounter>();
  t.Add(watch, &a);
  FlowRule drop = UdpRule(81, 1);  // a DROP rule counts what it drops
  drop.drop = true;
  drop.counter = std::make_shared<FlowCounter>();
  t.Add(drop, &b);
  FlowRule all;
  all.type = FlowType::kAllDefault;
  all.counter = std::make_shared<FlowCounter>();
  t.Add(all, &c);
  const auto f80 = Frame(2, 80), f81 = Frame(2, 81), f82 = Frame(2, 82);
  for (int i = 0; i < 3; ++i) Steer(t, f80);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(Steer(t, f81).empty());
  Steer(t, f82);
  Steer(t, f80, FrameSource::kSentAway);  // leaving the port: no NORMAL rule sees it
  EXPECT_EQ(watch.counter->packets.load(), 3u);
  EXPECT_EQ(watch.counter->bytes.load(), 3 * f80.size());
  EXPECT_EQ(drop.counter->packets.load(), 2u);
  EXPECT_EQ(drop.counter->bytes.load(), 2 * f81.size());
  // The all-default rule sees only what no NORMAL rule matched: f82 (f80 matched DONT_TRAP
  // `watch`, which counts as matched).
  EXPECT_EQ(all.counter->packets.load(), 1u);
  EXPECT_EQ(all.counter->bytes.load(), f82.size());
}

// A QP of a given domain that may or may not take its domain's looped-back frames.
struct DomainSink : RawSink {
  DomainSink(int* d, bool uc, bool mc) : dom(d), allow_uc(uc), allow_mc(mc) {}
  void OnFrame(std::span<const uint8_t>, const fabric::raw::FrameView&, const FlowMark&) override {}
  const void* domain() const override { return dom; }
  bool AllowsSelfLoopback(bool multicast) const override { return multicast ? allow_mc : allow_uc; }
  int* dom;
  bool allow_uc, allow_mc;
};

TEST(FlowTableTest, SelfLoopbackReachesTheSendersDomainOnlyWhereAllowed) {
  int ctx1 = 0, ctx2 = 0;
  DomainSink sender(&ctx1, false, false), same(&ctx1, false, false), same_uc(&ctx1, true, false),
      same_mc(&ctx1, false, true), other(&ctx2, false, false);
  FlowTable t;
  FlowRule any;
  any.outer.udp.present = true;
  any.counter = std::make_shared<FlowCounter>();
  for (RawSink* s : std::initializer_list<RawSink*>{&same, &same_uc, &same_mc, &other}) t.Add(any, s);
  auto steer = [&](const std::vector<uint8_t>& f, FrameSource src) {
    fabric::raw::FrameView v;
    EXPECT_TRUE(fabric::raw::ParseFrame(f, &v));
    std::vector<Delivery> d;
    t.Steer(f, v, src, &sender, &d);
    std::vector<RawSink*> sinks;
    for (auto& x : d) sinks.push_back(x.sink);
    return sinks;
  };
  EXPECT_EQ(steer(Frame(2, 80), FrameSource::kLoopback), (std::vector<RawSink*>{&same_uc, &other}));
  EXPECT_EQ(steer(Frame(2, 80, true), FrameSource::kLoopback), (std::vector<RawSink*>{&same_mc, &other}));
  // From the wire, nothing is blocked.
  EXPECT_EQ(steer(Frame(2, 80), FrameSource::kReceived).size(), 4u);
  // The shared counter counted each delivery, never a blocked QP's.
  EXPECT_EQ(any.counter->packets.load(), 2u + 2u + 4u);
}

}  // namespace
}  // namespace softverbs::transport::raw
