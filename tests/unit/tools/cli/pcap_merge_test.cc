// `softverbs trace` merges the per-process captures (tools/cli/pcap_merge.h): every record of
// every file, in time order, each file's own order kept; a foreign file is refused by name.
#include "tools/cli/pcap_merge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/packet/pcap.h"

namespace softverbs::cli {
namespace {

namespace packet = fabric::packet;

class PcapMergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sv-pcap-merge-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* f : {"/a.pcap", "/b.pcap", "/out.pcap", "/bad.pcap"}) unlink((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }
  // A capture holding one 1-byte record per (second, tag).
  void Write(const std::string& name, std::vector<std::pair<long, uint8_t>> records) {
    auto w = packet::PcapWriter::Open(dir_ + name);
    ASSERT_TRUE(w.ok());
    const uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
    const packet::IpUdpInfo flow = packet::IpUdpInfo::V4(a, b, 5000);
    for (auto [sec, tag] : records) ASSERT_TRUE((*w)->Append(flow, {&tag, 1}, timespec{sec, 0}).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  // (second, tag) of each record of the merged file.
  std::vector<std::pair<long, uint8_t>> Read(const std::string& name) {
    std::vector<std::pair<long, uint8_t>> out;
    FILE* f = fopen((dir_ + name).c_str(), "rb");
    EXPECT_NE(f, nullptr);
    if (f == nullptr) return out;
    std::vector<uint8_t> d(1 << 16);
    d.resize(fread(d.data(), 1, d.size(), f));
    fclose(f);
    uint32_t linktype;
    memcpy(&linktype, d.data() + 20, 4);
    EXPECT_EQ(linktype, packet::kLinktypeRaw);
    for (size_t at = 24; at + 16 <= d.size();) {
      uint32_t sec, len;
      memcpy(&sec, d.data() + at, 4);
      memcpy(&len, d.data() + at + 8, 4);
      out.push_back({sec, d[at + 16 + len - 1]});  // the payload's last byte: the tag
      at += 16 + len;
    }
    return out;
  }
  std::string dir_;
};

TEST_F(PcapMergeTest, RecordsOfAllFilesInTimeOrder) {
  Write("/a.pcap", {{1, 'a'}, {3, 'b'}, {3, 'c'}, {7, 'd'}});
  Write("/b.pcap", {{2, 'x'}, {3, 'y'}, {9, 'z'}});
  ASSERT_TRUE(MergePcaps({dir_ + "/a.pcap", dir_ + "/b.pcap"}, dir_ + "/out.pcap").ok());
  const std::vector<std::pair<long, uint8_t>> want = {{1, 'a'}, {2, 'x'}, {3, 'b'}, {3, 'c'},
                                                      {3, 'y'}, {7, 'd'}, {9, 'z'}};
  EXPECT_EQ(Read("/out.pcap"), want);
}

TEST_F(PcapMergeTest, NoInputMakesAnEmptyCaptureAndAForeignFileIsRefused) {
  ASSERT_TRUE(MergePcaps({}, dir_ + "/out.pcap").ok());
  EXPECT_TRUE(Read("/out.pcap").empty());
  FILE* f = fopen((dir_ + "/bad.pcap").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fputs("this is not a capture file at all", f);
  fclose(f);
  const Status s = MergePcaps({dir_ + "/bad.pcap"}, dir_ + "/out.pcap");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.rule().find("bad.pcap"), std::string::npos) << s.rule();
}

}  // namespace
}  // namespace softverbs::cli
