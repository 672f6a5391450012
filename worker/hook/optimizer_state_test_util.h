// Test helper: two ranks' (or backends') optimizer state, as
// ZeroHook::ExportOptimizerState gives it, entry for entry and bit for bit.
#ifndef PSHARD_WORKER_HOOK_OPTIMIZER_STATE_TEST_UTIL_H_
#define PSHARD_WORKER_HOOK_OPTIMIZER_STATE_TEST_UTIL_H_

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "worker/hook/zero_hook.h"

namespace pshard::worker {

inline void ExpectSameOptimizerState(
    const std::vector<ParameterOptimizerState>& got,
    const std::vector<ParameterOptimizerState>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const ParameterOptimizerState& g = got[i];
    const ParameterOptimizerState& w = want[i];
    SCOPED_TRACE(w.name);
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.step, w.step);
    EXPECT_EQ(g.offset, w.offset);
    ASSERT_EQ(g.tensors.size(), w.tensors.size());
    for (size_t t = 0; t < w.tensors.size(); ++t) {
      EXPECT_EQ(g.tensors[t].first, w.tensors[t].first);
      ASSERT_EQ(g.tensors[t].second.size(), w.tensors[t].second.size());
      EXPECT_EQ(std::memcmp(g.tensors[t].second.data(),
                            w.tensors[t].second.data(),
                            w.tensors[t].second.size() * sizeof(float)),
                0)
          << w.tensors[t].first << " differs";
    }
  }
}

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_HOOK_OPTIMIZER_STATE_TEST_UTIL_H_
