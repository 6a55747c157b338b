// ESP inline crypto (transport/raw/esp.h) and the egress table: AES-GCM proven with the GCM
// specification's test cases (McGrew & Viega, "The Galois/Counter Mode of Operation", test cases
// 4 and 16, as NIST's GCM validation uses them), then whole ESP frames against values an
// independent implementation (Python's `cryptography`, AESGCM) computed for the same SA.
#include "transport/raw/esp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/raw/egress_table.h"
#include "transport/raw/flow_rule.h"
#include "transport/raw/toeplitz.h"

namespace softverbs::transport::raw {
namespace {

std::vector<uint8_t> Hex(const std::string& h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(uint8_t(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

const std::string kP = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b5"
                       "25b16aedf5aa0de657ba637b39";
const std::string kA = "feedfacedeadbeeffeedfacedeadbeefabaddad2";
const std::string kIv = "cafebabefacedbaddecaf888";

void CheckGcm(const std::string& key, const std::string& c, const std::string& t) {
  const auto k = Hex(key), p = Hex(kP), a = Hex(kA), iv = Hex(kIv);
  std::vector<uint8_t> out(p.size());
  uint8_t tag[16];
  ASSERT_TRUE(AesGcmSeal(k, iv, a, p, out.data(), tag));
  EXPECT_EQ(out, Hex(c));
  EXPECT_EQ(std::vector<uint8_t>(tag, tag + 16), Hex(t));
  std::vector<uint8_t> back(p.size());
  ASSERT_TRUE(AesGcmOpen(k, iv, a, out, back.data(), tag));
  EXPECT_EQ(back, p);
  tag[15] ^= 1;  // one bit of the tag
  EXPECT_FALSE(AesGcmOpen(k, iv, a, out, back.data(), tag));
  tag[15] ^= 1;
  out[0] ^= 0x80;  // one bit of the ciphertext
  EXPECT_FALSE(AesGcmOpen(k, iv, a, out, back.data(), tag));
}

TEST(AesGcm, GcmSpecTestCase4Aes128) {
  CheckGcm("feffe9928665731c6d6a8f9467308308",
           "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b39"
           "6a0aac973d58e091",
           "5bc94fbc3221a5db94fae95ae7121a47");
}

TEST(AesGcm, GcmSpecTestCase16Aes256) {
  CheckGcm("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
           "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e63"
           "93ba7a0abcc9f662",
           "76fc6ece0f4e1768cddf8853bb2d551b");
}

TEST(AesGcm, RefusesKeysOfNoAesLength) {
  const auto iv = Hex(kIv);
  std::vector<uint8_t> key(20, 1), in(4, 0), out(4);
  uint8_t tag[16];
  EXPECT_FALSE(AesGcmSeal(key, iv, {}, in, out.data(), tag));
}

// Ethernet / IPv4 (protocol 50) / ESP SPI 0x1234 seq 7 / IV (8, zero) / "hello, ESP!!" with the
// trailer (pad 1 2, pad length 2, next header 59) / ICV (16, zero): 82 bytes.
std::vector<uint8_t> EspFrame(uint32_t spi = 0x1234) {
  std::vector<uint8_t> f = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00,
                            0x45, 0, 0, 68, 0, 0, 0x40, 0, 64, 50, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
                            uint8_t(spi >> 24), uint8_t(spi >> 16), uint8_t(spi >> 8), uint8_t(spi), 0, 0, 0, 7};
  f.resize(f.size() + 8, 0);
  const std::string text = "hello, ESP!!";
  f.insert(f.end(), text.begin(), text.end());
  f.insert(f.end(), {1, 2, 2, 59});
  f.resize(f.size() + 16, 0);
  return f;
}

EspSa::Keymat TestKeymat() {
  EspSa::Keymat k;
  k.key = Hex("feffe9928665731c6d6a8f9467308308");
  const uint8_t salt[4] = {0xca, 0xfe, 0xba, 0xbe}, iv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::copy(salt, salt + 4, k.salt);
  std::copy(iv, iv + 8, k.iv);
  return k;
}

std::vector<uint8_t> Slice(const std::vector<uint8_t>& f, size_t at, size_t n) {
  return {f.begin() + at, f.begin() + at + n};
}

TEST(EspSa, EncryptsAsRfc4106WithTheSequenceNumberAsIv) {
  const EspSa tx(TestKeymat(), true, false, 0);
  auto f = EspFrame();
  const auto plain = f;
  ASSERT_TRUE(tx.EncryptFrame(f));
  EXPECT_EQ(Slice(f, 0, 42), Slice(plain, 0, 42));  // headers untouched
  EXPECT_EQ(Slice(f, 42, 8), Hex("010203040506070f"));  // seq 7 XOR the keymat's iv
  EXPECT_EQ(Slice(f, 50, 16), Hex("616deede42d2230941c1e3f069232dc1"));
  EXPECT_EQ(Slice(f, 66, 16), Hex("c407ec84b473b01a2802eb860c57eee8"));
  const EspSa rx(TestKeymat(), false, false, 0);
  ASSERT_TRUE(rx.DecryptFrame(f));
  EXPECT_EQ(Slice(f, 50, 16), Slice(plain, 50, 16));
}

TEST(EspSa, ExtendedSequenceNumbersEnterIvAndAad) {
  EspSa tx(TestKeymat(), true, true, 0);
  tx.SetEsnHigh(1);
  auto f = EspFrame();
  ASSERT_TRUE(tx.EncryptFrame(f));
  EXPECT_EQ(Slice(f, 42, 8), Hex("010203050506070f"));
  EXPECT_EQ(Slice(f, 50, 16), Hex("883ebd9fa7ff5682658192ab823516a7"));
  EXPECT_EQ(Slice(f, 66, 16), Hex("94a315558adc05ba54e57728d47937ba"));
  EspSa rx(TestKeymat(), false, true, 0);
  auto copy = f;
  EXPECT_FALSE(rx.DecryptFrame(copy));  // the receiver's ESN is still 0: the AAD differs
  EXPECT_EQ(copy, f);                   // and a frame that fails is left as it was
  rx.SetEsnHigh(1);
  ASSERT_TRUE(rx.DecryptFrame(copy));
  EXPECT_EQ(std::string(copy.begin() + 50, copy.begin() + 62), "hello, ESP!!");
}

TEST(EspSa, Ipv6PacketsRoundTrip) {
  // The same ESP packet behind an IPv6 header (next header 50, payload length 48).
  const auto v4 = EspFrame();
  std::vector<uint8_t> f(v4.begin(), v4.begin() + 12);
  f.insert(f.end(), {0x86, 0xdd, 0x60, 0, 0, 0, 0, 48, 50, 64});
  for (int i = 0; i < 32; ++i) f.push_back(uint8_t(0xfd + i));
  f.insert(f.end(), v4.begin() + 34, v4.end());
  const auto plain = f;
  ASSERT_TRUE(EspSa(TestKeymat(), true, false, 0).EncryptFrame(f));
  // The same SA, sequence number and text as the IPv4 packet: the same IV, ciphertext and ICV.
  EXPECT_EQ(Slice(f, 70, 16), Hex("616deede42d2230941c1e3f069232dc1"));
  EXPECT_EQ(Slice(f, 86, 16), Hex("c407ec84b473b01a2802eb860c57eee8"));
  ASSERT_TRUE(EspSa(TestKeymat(), false, false, 0).DecryptFrame(f));
  EXPECT_EQ(Slice(f, 70, 16), Slice(plain, 70, 16));
}

TEST(EspSa, TamperedFramesAndWrongKeysFail) {
  const EspSa tx(TestKeymat(), true, false, 0);
  auto f = EspFrame();
  ASSERT_TRUE(tx.EncryptFrame(f));
  for (size_t at : {36u, 42u, 55u, 70u}) {  // sequence number (AAD), IV, text, ICV
    auto bad = f;
    bad[at] ^= 0x01;
    EXPECT_FALSE(EspSa(TestKeymat(), false, false, 0).DecryptFrame(bad)) << at;
  }
  auto other = TestKeymat();
  other.key[0] ^= 1;
  auto copy = f;
  EXPECT_FALSE(EspSa(other, false, false, 0).DecryptFrame(copy));
}

TEST(EspSa, RefusesWhatIsNotAnEspPacketWithRoom) {
  const EspSa sa(TestKeymat(), true, false, 0);
  auto udp = EspFrame();
  udp[23] = 17;  // protocol UDP
  const auto before = udp;
  EXPECT_FALSE(sa.EncryptFrame(udp));
  EXPECT_EQ(udp, before);
  auto shortf = EspFrame();
  shortf[17] = 20 + 8 + 8 + 1 + 16;  // total length: one byte of text, below pad length + next header
  EXPECT_FALSE(sa.EncryptFrame(shortf));
  const auto full = EspFrame();
  for (size_t n : {30u, 60u}) {  // cut inside the IP header; after the IV (the total length says more)
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);
    EXPECT_FALSE(sa.EncryptFrame(cut)) << n;
    EXPECT_FALSE(sa.DecryptFrame(cut)) << n;
  }
}

TEST(EspMatch, SpecMatchesTheSpiOfEspPacketsOnly) {
  FlowRule r;
  r.esp_spi.present = true;
  r.esp_spi.val = 0x1234;
  r.esp_spi.mask = 0xffffffff;
  auto match = [&](const std::vector<uint8_t>& f) {
    fabric::raw::FrameView v;
    EXPECT_TRUE(fabric::raw::ParseFrame(f, &v));
    return Matches(r, f, v);
  };
  EXPECT_TRUE(match(EspFrame(0x1234)));
  EXPECT_FALSE(match(EspFrame(0x1235)));
  auto udp = EspFrame(0x1234);
  udp[23] = 17;
  EXPECT_FALSE(match(udp));
  r.esp_spi.mask = 0xff00;  // masked: only those bits count
  EXPECT_TRUE(match(EspFrame(0x12ff)));
}

TEST(EgressTable, EncryptsDropsAndLetsThrough) {
  EgressTable t;
  FlowRule enc;
  enc.egress = true;
  enc.esp_spi = {true, 0x1234, 0xffffffff};
  enc.esp = std::make_shared<EspSa>(TestKeymat(), true, false, 0);
  FlowRule drop;
  drop.egress = true;
  drop.priority = 1;
  drop.esp_spi = {true, 0x9999, 0xffffffff};
  drop.drop = true;
  const uint64_t id = t.Add(enc);
  EXPECT_TRUE(id & EgressTable::kIdBit);
  t.Add(drop);
  auto not_esp = EspFrame();
  not_esp[23] = 17;
  const std::vector<std::vector<uint8_t>> in = {EspFrame(0x1234), EspFrame(0x9999), EspFrame(0x5555), not_esp};
  std::vector<std::vector<uint8_t>> out;
  t.Apply(in, &out);
  ASSERT_EQ(out.size(), 3u);  // the 0x9999 frame dropped
  EXPECT_EQ(Slice(out[0], 66, 16), Hex("c407ec84b473b01a2802eb860c57eee8"));
  EXPECT_EQ(out[1], in[2]);  // no rule: as it is
  EXPECT_EQ(out[2], in[3]);
  // An ENCRYPT rule matching a frame it cannot encrypt: the frame never leaves in plaintext.
  FlowRule any;
  any.egress = true;
  any.esp = enc.esp;
  EgressTable all;
  all.Add(any);
  all.Apply(std::vector<std::vector<uint8_t>>{not_esp}, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(t.Remove(id));
  EXPECT_FALSE(t.Remove(id));
}

TEST(EspRss, IpsecSpiFollowsTheAddressesInTheHashInput) {
  const auto f = EspFrame(0xa1b2c3d4);
  fabric::raw::FrameView v;
  ASSERT_TRUE(fabric::raw::ParseFrame(f, &v));
  uint8_t in[36];
  const uint64_t fields = rx_hash::kSrcIpv4 | rx_hash::kDstIpv4 | rx_hash::kIpsecSpi;
  ASSERT_EQ(RssFrameInput(f, v, fields, in), 12u);
  EXPECT_EQ(std::vector<uint8_t>(in, in + 12), Hex("0a0000010a000002a1b2c3d4"));
  // Not an ESP packet: no SPI; the SPI alone: four bytes.
  auto udp = f;
  udp[23] = 17;
  ASSERT_TRUE(fabric::raw::ParseFrame(udp, &v));
  EXPECT_EQ(RssFrameInput(udp, v, fields, in), 8u);
  ASSERT_TRUE(fabric::raw::ParseFrame(f, &v));
  ASSERT_EQ(RssFrameInput(f, v, rx_hash::kIpsecSpi, in), 4u);
  EXPECT_EQ(std::vector<uint8_t>(in, in + 4), Hex("a1b2c3d4"));
}

}  // namespace
}  // namespace softverbs::transport::raw
