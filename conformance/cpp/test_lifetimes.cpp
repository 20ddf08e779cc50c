// Hostile-but-legal use through the adapter: the control plane from inside a
// call, a `_native` op held past teardown, callbacks that use the registry.

#include "suite.h"

#include <unistd.h>

#include <fstream>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

// Names of their own: the unity builds (pip, sanitizers) put this file and
// test_routing.cpp into one translation unit.
at::Tensor mul_of_2_3_and_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
const at::Tensor kStockProduct = tensor({8, 15});

TEST_P(Conformance, ACondThatTearsDownItsOwnOpFinishesOnTheOldChain) {
  BEHAVIOUR("lifetime.teardown-inside-a-call");
  REQUIRE_FEATURE("reentrant-control-plane");
  std::unique_ptr<Scope> inner = adapter().scope();
  int conds = 0;
  add(mul_key(),
      [&](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
        ++conds;
        inner.reset();  // the teardown, from inside the call
        return true;
      },
      fill_impl(7));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), tensor({7, 7})));
  EXPECT_EQ(conds, 1);
  EXPECT_FALSE(adapter().router_installed(mul_key()));
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));
}

TEST_P(Conformance, AnImplThatTearsDownOrDisablesItsOwnOpFinishes) {
  BEHAVIOUR("lifetime.teardown-inside-a-call");
  REQUIRE_FEATURE("reentrant-control-plane");
  std::unique_ptr<Scope> inner = adapter().scope();
  add(mul_key(), constant_cond(true), impl_doing([&] { inner.reset(); }, 5));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), tensor({5, 5})));
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));

  add(mul_key(), constant_cond(true),
      impl_doing([&] { adapter().disable({{"test_dsl"}, {}, {}}); }, 6));
  adapter().install(mul_key());
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), tensor({6, 6})));
  EXPECT_TRUE(same(mul_of_2_3_and_4_5(), kStockProduct));
  adapter().enable({{"test_dsl"}, {}, {}});
}

TEST_P(Conformance, ANativeOpHeldPastTeardownRaisesNamingTheOverride) {
  BEHAVIOUR("lifetime.recorded-native-op-after-teardown");
  REQUIRE_FEATURE("native-op-meta");
  std::optional<c10::OperatorHandle> native;
  std::string node_id;
  {
    std::unique_ptr<Scope> inner = adapter().scope();
    add(mul_key(), constant_cond(true), fill_impl(3), "gone_dsl");
    adapter().install(mul_key());
    const NodeInfo node = adapter().graph(mul_key()).at(0);
    node_id = node.node_id;
    native = adapter().native_op(node);
    ASSERT_TRUE(native);
  }
  Stack stack{tensor({2}), tensor({4})};
  try {
    native->callBoxed(&stack);
    ADD_FAILURE() << "the _native op of a torn-down override still ran";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(node_id));
  }
}

TEST_P(Conformance, AnOrderingFunctionMayUseTheControlPlane) {
  BEHAVIOUR("locking.callbacks-may-use-the-control-plane");
  REQUIRE_FEATURE("reentrant-control-plane");
  add(mul_key(), constant_cond(false), fill_impl(1), "a");
  add(mul_key(), constant_cond(true), fill_impl(2), "b");
  adapter().install(mul_key());
  std::vector<std::string> seen;
  adapter().reorder([&](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    seen = adapter().dsl_operations("a", "aten");
    std::vector<std::string> ids;
    for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
    return ids;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"mul.Tensor"}));
  EXPECT_EQ(adapter().graph(mul_key()).at(0).dsl_name, "b");
}


long resident_kb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

TEST_P(Conformance, RegisterAndTeardownCyclesLeaveNoResidue) {
  BEHAVIOUR("memory.register-restore-no-residue");
#if defined(__SANITIZE_ADDRESS__)
  // Not measurable there: AddressSanitizer keeps freed memory in its
  // quarantine, so RSS grows whatever the registry does. The plain build runs it.
  GTEST_SKIP() << "RSS is not measurable under AddressSanitizer (its quarantine keeps freed memory)";
#endif
  auto cycles = [&](int n) {
    for (int i = 0; i < n; ++i) {
      std::unique_ptr<Scope> scope = adapter().scope();
      add(mul_key(), constant_cond(false), fill_impl(1));
    }
  };
  cycles(10000);
  const long start = resident_kb();
  cycles(100000);
  EXPECT_LT(resident_kb() - start, 1024) << "RSS grew over 100,000 register + teardown cycles";
}

}  // namespace
}  // namespace conformance
