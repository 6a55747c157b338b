#include "fabric/wire/steering_program.h"

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <span>

#include <gtest/gtest.h>

namespace softverbs::fabric::wire {
namespace {

// The checks the kernel's bpf_check_classic() makes on a program before it accepts it.
void CheckClassic(const std::vector<sock_filter>& prog) {
  ASSERT_FALSE(prog.empty());
  ASSERT_LE(prog.size(), kMaxSteeringInstructions);
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const sock_filter& f = prog[pc];
    if (f.code == (BPF_JMP | BPF_JA)) {
      ASSERT_LT(pc + 1 + f.k, prog.size()) << "ja out of the program at " << pc;
    } else if (BPF_CLASS(f.code) == BPF_JMP) {
      ASSERT_LT(pc + 1 + f.jt, prog.size()) << "jt out of the program at " << pc;
      ASSERT_LT(pc + 1 + f.jf, prog.size()) << "jf out of the program at " << pc;
    }
  }
  ASSERT_EQ(BPF_CLASS(prog.back().code), static_cast<uint16_t>(BPF_RET)) << "a program ends in ret";
}

// A tiny classic BPF interpreter for the opcodes a steering program may use, run the way
// reuseport runs it: on the UDP payload. A load past the end ends the program with 0, as in the
// kernel. Unknown opcodes fail the test.
uint32_t Interpret(const std::vector<sock_filter>& prog, std::span<const uint8_t> pkt) {
  uint32_t a = 0;
  size_t pc = 0;
  while (pc < prog.size()) {
    const sock_filter& f = prog[pc++];
    switch (f.code) {
      case BPF_LD | BPF_W | BPF_LEN: a = static_cast<uint32_t>(pkt.size()); break;
      case BPF_LD | BPF_W | BPF_ABS:
        if (f.k + 4 > pkt.size()) return 0;
        a = (uint32_t{pkt[f.k]} << 24) | (uint32_t{pkt[f.k + 1]} << 16) | (uint32_t{pkt[f.k + 2]} << 8) | pkt[f.k + 3];
        break;
      case BPF_ALU | BPF_AND | BPF_K: a &= f.k; break;
      case BPF_JMP | BPF_JA: pc += f.k; break;
      case BPF_JMP | BPF_JGE | BPF_K: pc += a >= f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGT | BPF_K: pc += a > f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JEQ | BPF_K: pc += a == f.k ? f.jt : f.jf; break;
      case BPF_RET | BPF_K: return f.k;
      default: ADD_FAILURE() << "unexpected opcode " << f.code << " at " << pc - 1; return 0;
    }
  }
  ADD_FAILURE() << "ran off the end of the program";
  return 0;
}

// A BTH (12 bytes) with `qpn` in DestQP (bytes 5..7), byte 4 (reserved) set to `reserved`,
// followed by `extra` payload bytes.
std::vector<uint8_t> SteeringBth(uint32_t qpn, uint8_t reserved = 0, size_t extra = 4) {
  std::vector<uint8_t> p(12 + extra, 0xa5);
  p[0] = 0x04;  // RC SEND_ONLY
  p[4] = reserved;
  p[5] = static_cast<uint8_t>(qpn >> 16);
  p[6] = static_cast<uint8_t>(qpn >> 8);
  p[7] = static_cast<uint8_t>(qpn);
  return p;
}

uint32_t Steer(const std::vector<sock_filter>& prog, uint32_t qpn) { return Interpret(prog, SteeringBth(qpn)); }

TEST(SteeringProgramTest, EmptyTableFallsBackToTheHashForEveryQpn) {
  const auto prog = BuildSteeringProgram({});
  CheckClassic(prog);
  for (uint32_t qpn : {0u, 1u, 0x11u, 0xffffffu}) EXPECT_EQ(Steer(prog, qpn), kSteerFallback);
}

TEST(SteeringProgramTest, RangesSteerToTheirSlotAndGapsFallBack) {
  const auto prog = BuildSteeringProgram({{0x20, 0x2f, 1}, {0x10, 0x1f, 0}, {1, 1, 2}, {0xfffff0, 0xffffff, 3}});
  CheckClassic(prog);
  const std::map<uint32_t, uint32_t> expect = {
      {0, kSteerFallback}, {1, 2}, {2, kSteerFallback}, {0xf, kSteerFallback}, {0x10, 0},  {0x1f, 0},
      {0x20, 1},           {0x2f, 1}, {0x30, kSteerFallback}, {0xffffef, kSteerFallback}, {0xfffff0, 3}, {0xffffff, 3}};
  for (const auto& [qpn, slot] : expect) EXPECT_EQ(Steer(prog, qpn), slot) << "qpn " << qpn;
}

TEST(SteeringProgramTest, OnlyTheTwentyFourDestQpBitsCount) {
  const auto prog = BuildSteeringProgram({{0x123, 0x123, 5}});
  EXPECT_EQ(Interpret(prog, SteeringBth(0x123, /*reserved=*/0xff)), 5u);  // the reserved byte 4 is masked off
  EXPECT_EQ(Interpret(prog, SteeringBth(0x124, 0xff)), kSteerFallback);
}

TEST(SteeringProgramTest, DatagramsTooShortForDestQpFallBackInsteadOfSlotZero) {
  const auto prog = BuildSteeringProgram({{0, 0xffffff, 0}});
  EXPECT_EQ(Interpret(prog, std::vector<uint8_t>(7, 0)), kSteerFallback);
  EXPECT_EQ(Interpret(prog, std::vector<uint8_t>{}), kSteerFallback);
  EXPECT_EQ(Interpret(prog, std::vector<uint8_t>(8, 0)), 0u);  // 8 bytes hold DestQP
}

TEST(SteeringProgramTest, OverlapsGoToTheRangeThatStartsFirstAndOutOfRangeQpnsAreIgnored) {
  const auto prog = BuildSteeringProgram({{0x100, 0x1ff, 1}, {0x180, 0x27f, 2}, {0x1000000, 0x2000000, 3}, {9, 3, 4}});
  CheckClassic(prog);
  EXPECT_EQ(Steer(prog, 0x1ff), 1u);
  EXPECT_EQ(Steer(prog, 0x200), 2u);
  EXPECT_EQ(Steer(prog, 0x27f), 2u);
  EXPECT_EQ(Steer(prog, 0x280), kSteerFallback);
  EXPECT_EQ(Steer(prog, 5), kSteerFallback);  // {9, 3} is empty
}

TEST(SteeringProgramTest, AdjacentRangesOfOneMemberShareOneLeaf) {
  std::vector<QpnRange> ranges;
  for (uint32_t i = 0; i < 500; ++i) ranges.push_back({i * 16, i * 16 + 15, 7});
  const auto prog = BuildSteeringProgram(ranges);
  EXPECT_LT(prog.size(), 10u);  // [0, 8000) -> 7, the rest -> fallback
  EXPECT_EQ(Steer(prog, 7999), 7u);
  EXPECT_EQ(Steer(prog, 8000), kSteerFallback);
}

// Many fragmented ranges: the search needs long jumps (BPF_JA) past left subtrees of more than
// 255 instructions, and must still fit cBPF's limit.
TEST(SteeringProgramTest, ThousandFragmentedRangesFitAndSteerExactly) {
  std::mt19937 rng(42);
  std::vector<QpnRange> ranges;
  std::map<uint32_t, QpnRange> by_first;
  uint32_t next = 2;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t first = next + rng() % 50;
    const uint32_t last = first + rng() % 30;
    ranges.push_back({first, last, static_cast<uint32_t>(rng() % 4)});
    next = last + 2;  // always a gap
  }
  std::shuffle(ranges.begin(), ranges.end(), rng);
  for (const QpnRange& r : ranges) by_first[r.first] = r;
  const auto prog = BuildSteeringProgram(ranges);
  CheckClassic(prog);
  EXPECT_TRUE(std::any_of(prog.begin(), prog.end(), [](const sock_filter& f) { return f.code == (BPF_JMP | BPF_JA); }));
  auto reference = [&](uint32_t qpn) -> uint32_t {
    auto it = by_first.upper_bound(qpn);
    if (it == by_first.begin()) return kSteerFallback;
    --it;
    return qpn <= it->second.last ? it->second.index : kSteerFallback;
  };
  for (const QpnRange& r : ranges)
    for (uint32_t qpn : {r.first - 1, r.first, (r.first + r.last) / 2, r.last, r.last + 1})
      ASSERT_EQ(Steer(prog, qpn), reference(qpn)) << "qpn " << qpn;
  for (int i = 0; i < 20000; ++i) {
    const uint32_t qpn = rng() % (next + 100);
    ASSERT_EQ(Steer(prog, qpn), reference(qpn)) << "qpn " << qpn;
  }
}

}  // namespace
}  // namespace softverbs::fabric::wire
