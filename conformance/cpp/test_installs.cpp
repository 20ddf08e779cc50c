// What installs a router and what may not: filter changes and the
// unconditional mask leave graphs that were never installed alone; a full
// re-install keeps the filters; the `_native` op asks the runtime when a
// program calls it.

#include "suite.h"

namespace conformance {
namespace {

using namespace native_registry::fixtures;

at::Tensor mul_2_3_by_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
const at::Tensor kStock = tensor({8, 15});

TEST_P(Conformance, FilterChangesInstallNoRouterForAGraphNeverInstalled) {
  BEHAVIOUR("filters.change-installs-no-router");
  add(mul_key(), constant_cond(true), fill_impl(7));
  const std::vector<Filter> filters = {{{"test_dsl"}, {}, {}}, {{}, {"mul.Tensor"}, {}},
                                       {{}, {}, {"CPU"}}};
  for (const Filter& filter : filters) {
    adapter().disable(filter);
    EXPECT_FALSE(adapter().router_installed(mul_key())) << "disabling installed a router";
    adapter().enable(filter);
    EXPECT_FALSE(adapter().router_installed(mul_key())) << "re-enabling installed a router";
  }
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, TheUnconditionalMaskInstallsNoRouterForAGraphNeverInstalled) {
  BEHAVIOUR("unconditional.mask-installs-no-router");
  REQUIRE_FEATURE("unconditional-hatch");
  add(mul_key(), CondFn{}, fill_impl(5), "test_dsl", {}, true);
  adapter().disable({{"test_dsl"}, {}, {}});
  {
    auto mask = adapter().unconditional_masked();
    EXPECT_FALSE(adapter().router_installed(mul_key())) << "entering the mask installed a router";
  }
  EXPECT_FALSE(adapter().router_installed(mul_key())) << "leaving the mask installed a router";
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
}

TEST_P(Conformance, InstallAllKeepsDisabledNodesDisabled) {
  BEHAVIOUR("ordering.reregister-keeps-filters");
  add(mul_key(), constant_cond(true), fill_impl(7), "d");
  add(mul_key(), constant_cond(false), fill_impl(8), "e");
  adapter().install(mul_key());
  adapter().disable({{"d"}, {}, {}});
  adapter().install_all();
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock)) << "a full re-install brought a disabled override back";
  for (const NodeInfo& node : adapter().graph(mul_key())) {
    EXPECT_EQ(node.active, node.dsl_name != "d") << node.dsl_name;
  }
  adapter().enable({{"d"}, {}, {}});
  EXPECT_TRUE(same(mul_2_3_by_4_5(), tensor({7, 7})));
}

TEST_P(Conformance, TheNativeOpAsksTheRuntimeWhenCalled) {
  BEHAVIOUR("export.runtime-asked-at-run-time");
  REQUIRE_FEATURE("runtime-init");
  REQUIRE_FEATURE("native-op-meta");
  auto available = std::make_shared<std::atomic<bool>>(false);
  add(mul_key(), constant_cond(true), fill_impl(42), "test_dsl", [available] { return available->load(); });
  adapter().install(mul_key());
  auto native = adapter().native_op(adapter().graph(mul_key())[0]);
  ASSERT_TRUE(native.has_value()) << "no _native op for the node";
  // What an exported program does: it calls the _native op directly.
  auto call_native = [&] {
    Stack stack{tensor({2, 3}), tensor({4, 5})};
    native->callBoxed(&stack);
    return stack.at(0).toTensor();
  };
  EXPECT_TRUE(same(call_native(), kStock)) << "the _native op ran an impl whose runtime is unavailable";
  EXPECT_TRUE(same(mul_2_3_by_4_5(), kStock));
  available->store(true);
  EXPECT_TRUE(same(call_native(), tensor({42, 42})));
}

}  // namespace
}  // namespace conformance
