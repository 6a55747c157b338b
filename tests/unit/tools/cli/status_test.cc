// `softverbs status`: the JSON strings it writes and the wire reports it parses (tools/cli/status.h).
#include "tools/cli/status.h"

#include <gtest/gtest.h>

namespace softverbs::cli {
namespace {

TEST(JsonStringTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString("plain /softverbs-0-1-v3"), "\"plain /softverbs-0-1-v3\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString(std::string("t\tn\nz\0e", 7)), "\"t\\u0009n\\u000az\\u0000e\"");
  EXPECT_EQ(JsonString("\x1f\x7f"), "\"\\u001f\\u007f\"");
}

TEST(JsonStringTest, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(JsonString("h\xc3\xa9t\xe2\x82\xac\xf0\x9f\x98\x80"), "\"h\xc3\xa9t\xe2\x82\xac\xf0\x9f\x98\x80\"");
  EXPECT_EQ(JsonString("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(JsonString("\xc3"), "\"\\ufffd\"");                 // truncated sequence
  EXPECT_EQ(JsonString("\xc0\xaf"), "\"\\ufffd\\ufffd\"");      // overlong '/'
  EXPECT_EQ(JsonString("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // a UTF-16 surrogate
  EXPECT_EQ(JsonString("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // beyond U+10FFFF
}

TEST(ParseWireReportTest, ReadsPortsDeviceAndPerQpCounters) {
  // The format of transport/wire/wire_fabric.cc, Report.
  const std::string text =
      "pid 4242\n"
      "  port 10.0.0.1:4791\n"
      "  device sent=12 received=10 icrc_errors=0 malformed=1 unknown_qp=0 unsupported=0 forwarded=3 "
      "misdelivered=0 acks_coalesced=2\n"
      "  qp1 received=4 refused=1 unhandled=0 sent=3\n"
      "  qp 0x1a3 requester packets=7 retransmitted=1 acks=6 read_responses=0 atomic_acks=0 naks_sequence=0 "
      "naks_rnr=0 naks_error=0\n"
      "  qp 0x1a4 responder packets=5 out_of_sequence=0 duplicates=0 acks=5 naks_sequence=0 naks_rnr=0 "
      "naks_error=0 dropped=0\n"
      "  something new=1\n";
  ProcessWire w = ParseWireReport(text);
  EXPECT_EQ(w.pid, 4242);
  ASSERT_EQ(w.ports.size(), 1u);
  EXPECT_EQ(w.ports[0], "10.0.0.1:4791");
  ASSERT_EQ(w.device.size(), 9u);
  EXPECT_EQ(w.device[0], (std::pair<std::string, uint64_t>("sent", 12)));
  EXPECT_EQ(w.device[3], (std::pair<std::string, uint64_t>("malformed", 1)));
  ASSERT_EQ(w.qp1.size(), 4u);
  EXPECT_EQ(w.qp1[1], (std::pair<std::string, uint64_t>("refused", 1)));
  ASSERT_EQ(w.qps.size(), 2u);
  EXPECT_EQ(w.qps[0].qpn, 0x1a3u);
  EXPECT_EQ(w.qps[0].side, "requester");
  EXPECT_EQ(w.qps[0].counters[1], (std::pair<std::string, uint64_t>("retransmitted", 1)));
  EXPECT_EQ(w.qps[1].qpn, 0x1a4u);
  EXPECT_EQ(w.qps[1].side, "responder");
  EXPECT_EQ(w.qps[1].counters.size(), 8u);
  EXPECT_EQ(w.text, text);
}

TEST(ParseWireReportTest, SkipsMalformedLines) {
  ProcessWire w = ParseWireReport("pid 7\n  qp zz requester packets=1\n  qp 0x10 sideways packets=1\n"
                                  "  device sent=x received=4 =5 plain\n");
  EXPECT_EQ(w.pid, 7);
  EXPECT_TRUE(w.qps.empty());
  ASSERT_EQ(w.device.size(), 1u);
  EXPECT_EQ(w.device[0], (std::pair<std::string, uint64_t>("received", 4)));
}

TEST(StatusJsonTest, OneDocumentWithNullsForTheUnknown) {
  HostStatus s;
  s.registry = "/softverbs-0-1-v3-\"odd\"";
  s.tables = {{"processes", "processes", {{10, 1}}}, {"QPs", "qps", {{10, 2}}}};
  QpStatus readable;
  readable.qpn = 0x101;
  readable.pid = 10;
  readable.readable = true;
  readable.type = "RC";
  readable.state = "RTS";
  readable.dest_qpn = 0x102;
  QpStatus unreadable;
  unreadable.qpn = 0x103;
  unreadable.pid = 10;
  s.qps = {readable, unreadable};
  const std::string json = StatusJson(s, "{}");
  EXPECT_NE(json.find("\"name\": \"/softverbs-0-1-v3-\\\"odd\\\"\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"allocated_kib\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"pid\": 10, \"qps\": 2, \"wire\": null}"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"qpn\": 257, \"pid\": 10, \"type\": \"RC\", \"state\": \"RTS\", \"dest_qpn\": 258, "
                      "\"peer_pid\": null, \"counters\": {}}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"qpn\": 259, \"pid\": 10, \"type\": null"), std::string::npos) << json;
}

TEST(StatusJsonTest, AWireProcessCarriesItsDeviceAndQp1Counters) {
  HostStatus s;
  s.tables = {{"processes", "processes", {{11, 1}}}};
  s.wire = {ParseWireReport("pid 11\n  port 10.0.0.1:4791\n  device sent=5 received=6\n"
                            "  qp1 received=2 refused=0 unhandled=1 sent=3\n")};
  const std::string json = StatusJson(s, "{}");
  EXPECT_NE(json.find("\"wire\": {\"ports\": [\"10.0.0.1:4791\"], \"counters\": {\"sent\": 5, \"received\": 6}, "
                      "\"qp1\": {\"received\": 2, \"refused\": 0, \"unhandled\": 1, \"sent\": 3}, \"cm\": {}}"),
            std::string::npos)
      << json;
}

TEST(StatusJsonTest, TheCmAgentsMadsByType) {
  // The lines cm::Agent::Report adds after qp1 (cm/agent.h).
  HostStatus s;
  s.tables = {{"processes", "processes", {{12, 1}}}};
  s.wire = {ParseWireReport("pid 12\n  qp1 received=3 refused=0 unhandled=0 sent=4\n"
                            "  cm received REQ=1 MRA=0 RTU=1\n  cm sent REQ=0 REP=2\n  cm resent REP=1\n"
                            "  cm dropped DREQ=0\n")};
  ASSERT_EQ(s.wire[0].cm.size(), 4u);
  EXPECT_EQ(s.wire[0].cm[1].first, "sent");
  EXPECT_EQ(s.wire[0].cm[1].second[1], (std::pair<std::string, uint64_t>("REP", 2)));
  const std::string json = StatusJson(s, "{}");
  EXPECT_NE(json.find("\"cm\": {\"received\": {\"REQ\": 1, \"MRA\": 0, \"RTU\": 1}, \"sent\": {\"REQ\": 0, "
                      "\"REP\": 2}, \"resent\": {\"REP\": 1}, \"dropped\": {\"DREQ\": 0}}}"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace softverbs::cli
