#include "fabric/wire/fault_spec.h"

#include <gtest/gtest.h>

namespace softverbs::fabric::wire {
namespace {

FaultSpec Parsed(const std::string& text) {
  Result<FaultSpec> spec = FaultSpec::Parse(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status().rule();
  return spec.ok() ? spec.value() : FaultSpec();
}

TEST(FaultSpecTest, TheDocumentedExampleParses) {
  const FaultSpec spec = Parsed("loss=5%,dup=5%,reorder=25%,delay=200us,corrupt=0.1%,seed=42");
  EXPECT_EQ(spec.seed(), 42u);
  const FaultSettings s = spec.Resolve(Direction::kTx, 0x123);
  EXPECT_DOUBLE_EQ(s.loss, 0.05);
  EXPECT_DOUBLE_EQ(s.dup, 0.05);
  EXPECT_DOUBLE_EQ(s.reorder, 0.25);
  EXPECT_DOUBLE_EQ(s.corrupt, 0.001);
  EXPECT_EQ(s.delay_ns, 200'000u);
  EXPECT_EQ(s.reorder_after, 3u);  // defaults
  EXPECT_EQ(s.reorder_max_ns, 1'000'000u);
  EXPECT_TRUE(spec.Affects(Direction::kTx));
  EXPECT_TRUE(spec.Affects(Direction::kRx));
}

TEST(FaultSpecTest, EmptyMeansNoFaultsAndTheDefaultSeed) {
  const FaultSpec spec = Parsed("");
  EXPECT_TRUE(spec.rules().empty());
  EXPECT_EQ(spec.seed(), FaultSpec::kDefaultSeed);
  EXPECT_FALSE(spec.Affects(Direction::kTx));
  EXPECT_FALSE(spec.Resolve(Direction::kRx, 1).any());
}

TEST(FaultSpecTest, ScopesLimitDirectionAndQp) {
  const FaultSpec spec = Parsed("rx:loss=5%, qp=0x123:dup=10%, tx:qp=18:reorder=50%, qp=0x12:rx:delay=1ms");
  EXPECT_FALSE(spec.Resolve(Direction::kTx, 7).any());
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kRx, 7).loss, 0.05);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kTx, 7).loss, 0);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kTx, 0x123).dup, 0.10);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kRx, 0x123).dup, 0.10);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kRx, 0x124).dup, 0);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kTx, 0x12).reorder, 0.5);  // 18 == 0x12
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kRx, 0x12).reorder, 0);
  EXPECT_EQ(spec.Resolve(Direction::kRx, 0x12).delay_ns, 1'000'000u);
  EXPECT_EQ(spec.Resolve(Direction::kRx, std::nullopt).delay_ns, 0u);  // no DestQP: QP rules never apply
}

TEST(FaultSpecTest, TheMostSpecificRuleWins) {
  const FaultSpec spec = Parsed("loss=1%,rx:loss=2%,qp=5:loss=3%,rx:qp=5:loss=4%");
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kTx, 9).loss, 0.01);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kRx, 9).loss, 0.02);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kTx, 5).loss, 0.03);
  EXPECT_DOUBLE_EQ(spec.Resolve(Direction::kRx, 5).loss, 0.04);
}

TEST(FaultSpecTest, UnitsAndCounts) {
  const FaultSpec spec = Parsed("delay=1.5ms,reorder_after=7,reorder_max=2s,seed=0xffffffffffffffff,loss=100%");
  const FaultSettings s = spec.Resolve(Direction::kTx, 1);
  EXPECT_EQ(s.delay_ns, 1'500'000u);
  EXPECT_EQ(s.reorder_after, 7u);
  EXPECT_EQ(s.reorder_max_ns, 2'000'000'000u);
  EXPECT_DOUBLE_EQ(s.loss, 1.0);
  EXPECT_EQ(spec.seed(), UINT64_MAX);
  EXPECT_EQ(Parsed("delay=500ns").Resolve(Direction::kTx, 1).delay_ns, 500u);
  EXPECT_EQ(Parsed("delay=3s").Resolve(Direction::kTx, 1).delay_ns, 3'000'000'000u);
}

struct Malformed {
  const char* spec;
  const char* says;  // a part of the rule the Status must give
};

class FaultSpecMalformedTest : public testing::TestWithParam<Malformed> {};

TEST_P(FaultSpecMalformedTest, IsRefusedWithTheReason) {
  Result<FaultSpec> spec = FaultSpec::Parse(GetParam().spec);
  ASSERT_FALSE(spec.ok()) << GetParam().spec;
  EXPECT_EQ(spec.status().code(), EINVAL);
  EXPECT_NE(spec.status().rule().find(GetParam().says), std::string::npos) << spec.status().rule();
}

INSTANTIATE_TEST_SUITE_P(
    Specs, FaultSpecMalformedTest,
    testing::Values(Malformed{"loss=5", "percentage"}, Malformed{"loss=101%", "from 0% to 100%"},
                    Malformed{"loss=-1%", "from 0% to 100%"}, Malformed{"loss=abc%", "from 0% to 100%"},
                    Malformed{"los=5%", "unknown setting 'los'"}, Malformed{"delay=200", "needs a unit"},
                    Malformed{"delay=5xs", "needs a unit"}, Malformed{"delay=61s", "at most 60s"},
                    Malformed{"qp=0x1000000:loss=1%", "24 bits"}, Malformed{"qp=zz:loss=1%", "24 bits"},
                    Malformed{"tx:rx:loss=1%", "direction is given twice"},
                    Malformed{"qp=1:qp=2:loss=1%", "QP is given twice"},
                    Malformed{"loss=1%,,dup=1%", "item 2 '': empty item"}, Malformed{"loss=1%,", "empty item"},
                    Malformed{"rx:seed=4", "takes no scope"}, Malformed{"seed=1,seed=2", "seed is given twice"},
                    Malformed{"seed=-1", "unsigned 64-bit"},
                    Malformed{"loss=1%,dup=2%,loss=2%", "item 3 'loss=2%': this setting is given twice"},
                    Malformed{"bogus:loss=1%", "unknown scope 'bogus'"}, Malformed{"loss", "expected <setting>=<value>"},
                    Malformed{"reorder_after=0", "from 1 to 1000"}, Malformed{"reorder_after=1.5", "from 1 to 1000"}));

TEST(FaultSpecTest, TheEnvironmentIsReadAndItsErrorsNamed) {
  setenv("SOFTVERBS_FAULTS", "rx:loss=5%", 1);
  Result<std::optional<FaultSpec>> spec = FaultSpec::FromEnvironment();
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(spec->has_value());
  EXPECT_DOUBLE_EQ((*spec)->Resolve(Direction::kRx, 1).loss, 0.05);
  setenv("SOFTVERBS_FAULTS", "rx:loss=5", 1);
  spec = FaultSpec::FromEnvironment();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().rule().rfind("SOFTVERBS_FAULTS: ", 0), 0u) << spec.status().rule();
  unsetenv("SOFTVERBS_FAULTS");
  spec = FaultSpec::FromEnvironment();
  ASSERT_TRUE(spec.ok());
  EXPECT_FALSE(spec->has_value());
}

}  // namespace
}  // namespace softverbs::fabric::wire
