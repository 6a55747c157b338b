// A core::Context for unit tests, on the test host registry (SOFTVERBS_HOST=unit-tests).
#pragma once

#include <cstdlib>
#include <memory>

#include <gtest/gtest.h>

#include "core/context.h"
#include "core/pd.h"

namespace softverbs::core {

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    setenv("SOFTVERBS_HOST", "unit-tests", 0);
    auto c = Context::Open();
    EXPECT_TRUE(c.ok()) << c.status().rule();
    context_ = std::move(c.value());
    pd_ = std::make_unique<Pd>(*context_, context_->NewHandle());
  }
  std::unique_ptr<Context> context_;
  std::unique_ptr<Pd> pd_;
};

}  // namespace softverbs::core
