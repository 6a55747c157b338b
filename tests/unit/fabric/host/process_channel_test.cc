#include "fabric/host/process_channel.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

// Names of this test process alone (abstract names are per network namespace).
std::string Registry() { return "/softverbs-unit-channel-" + std::to_string(getpid()); }

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(ProcessChannel, AForwardedDatagramArrivesWhole) {
  auto receiver = ProcessChannel::Open(Registry(), 7);
  ASSERT_TRUE(receiver.ok()) << receiver.status().rule();
  auto sender = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(sender.ok()) << sender.status().rule();
  std::string datagram(4096 + 40, '\0');
  for (size_t i = 0; i < datagram.size(); ++i) datagram[i] = static_cast<char>(i * 7);
  ASSERT_TRUE((*sender)->Send(Registry(), 7, ChannelKind::kForward, Bytes(datagram)).ok());

  std::vector<uint8_t> buffer(ProcessChannel::kMaxMessage);
  ChannelMessage m;
  auto got = (*receiver)->Receive(buffer, &m);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(*got);
  EXPECT_EQ(m.kind, ChannelKind::kForward);
  EXPECT_EQ(std::string(m.body.begin(), m.body.end()), datagram);
  got = (*receiver)->Receive(buffer, &m);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);  // nothing more: never blocks
}

TEST(ProcessChannel, AMadForAnotherProcessKeepsItsKind) {
  // A MAD handed over to the process that owns it (WireFabric::ForwardMad): its own kind, so the
  // receiver gives it to its CM agent and not to a QP.
  auto receiver = ProcessChannel::Open(Registry(), 8);
  ASSERT_TRUE(receiver.ok()) << receiver.status().rule();
  auto sender = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(sender.ok()) << sender.status().rule();
  const std::string body(32 + 256, 'm');
  ASSERT_TRUE((*sender)->Send(Registry(), 8, ChannelKind::kMad, Bytes(body)).ok());
  std::vector<uint8_t> buffer(ProcessChannel::kMaxMessage);
  ChannelMessage m;
  auto got = (*receiver)->Receive(buffer, &m);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(*got);
  EXPECT_EQ(m.kind, ChannelKind::kMad);
  EXPECT_EQ(m.body.size(), body.size());
}

TEST(ProcessChannel, ASlotHasOneChannelAtATime) {
  auto first = ProcessChannel::Open(Registry(), 8);
  ASSERT_TRUE(first.ok());
  auto second = ProcessChannel::Open(Registry(), 8);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), EADDRINUSE);
  first.value().reset();  // the name goes with the socket: the slot's next owner binds
  EXPECT_TRUE(ProcessChannel::Open(Registry(), 8).ok());
}

TEST(ProcessChannel, SendingToASlotNobodyHoldsFails) {
  auto sender = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(sender.ok());
  Status s = (*sender)->Send(Registry(), 9, ChannelKind::kForward, Bytes("x"));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ECONNREFUSED);
}

TEST(ProcessChannel, AQuestionIsAnswered) {
  auto server = ProcessChannel::Open(Registry(), 10);
  ASSERT_TRUE(server.ok());
  std::thread answering([&] {
    std::vector<uint8_t> buffer(ProcessChannel::kMaxMessage);
    for (int tries = 0; tries < 2000; ++tries) {
      ChannelMessage m;
      auto got = (*server)->Receive(buffer, &m);
      if (got.ok() && *got) {
        EXPECT_EQ(m.kind, ChannelKind::kQuestion);
        EXPECT_EQ(std::string(m.body.begin(), m.body.end()), "report");
        EXPECT_TRUE((*server)->Answer(m, Bytes("device sent=3\n")).ok());
        return;
      }
      usleep(1000);
    }
  });
  auto asker = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(asker.ok());
  auto answer = (*asker)->Ask(Registry(), 10, Bytes("report"), 5000);
  answering.join();
  ASSERT_TRUE(answer.ok()) << answer.status().rule();
  EXPECT_EQ(*answer, "device sent=3\n");
}

TEST(ProcessChannel, AnUnansweredQuestionTimesOut) {
  auto silent = ProcessChannel::Open(Registry(), 11);
  ASSERT_TRUE(silent.ok());
  auto asker = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(asker.ok());
  auto answer = (*asker)->Ask(Registry(), 11, Bytes("report"), 50);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), ETIMEDOUT);
}

// Anyone on the host may write to a channel: what is not a well-formed message is skipped, and
// a well-formed one behind it still arrives.
TEST(ProcessChannel, MalformedMessagesAreSkipped) {
  auto receiver = ProcessChannel::Open(Registry(), 12);
  ASSERT_TRUE(receiver.ok());
  int raw = socket(AF_UNIX, SOCK_DGRAM, 0);
  ASSERT_GE(raw, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "softverbs-channel" + Registry() + "/12";
  memcpy(a.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const uint8_t empty[1] = {0};
  const uint8_t wrong_magic[4] = {0x00, 1, 2, 3};
  const uint8_t wrong_kind[4] = {0x53, 9, 2, 3};
  EXPECT_EQ(sendto(raw, empty, 0, 0, reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(sendto(raw, wrong_magic, 4, 0, reinterpret_cast<sockaddr*>(&a), len), 4);
  EXPECT_EQ(sendto(raw, wrong_kind, 4, 0, reinterpret_cast<sockaddr*>(&a), len), 4);
  close(raw);
  auto sender = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(sender.ok());
  ASSERT_TRUE((*sender)->Send(Registry(), 12, ChannelKind::kForward, Bytes("good")).ok());
  std::vector<uint8_t> buffer(ProcessChannel::kMaxMessage);
  ChannelMessage m;
  auto got = (*receiver)->Receive(buffer, &m);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(*got);
  EXPECT_EQ(std::string(m.body.begin(), m.body.end()), "good");
}

TEST(ProcessChannel, AnOversizedMessageIsRefused) {
  auto sender = ProcessChannel::OpenUnnamed();
  ASSERT_TRUE(sender.ok());
  std::string big(ProcessChannel::kMaxMessage, 'x');
  EXPECT_EQ((*sender)->Send(Registry(), 13, ChannelKind::kForward, Bytes(big)).code(), EINVAL);
}

}  // namespace
}  // namespace softverbs::fabric
