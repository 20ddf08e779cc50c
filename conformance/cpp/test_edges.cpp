// Edges of routing, filters and validation that mechanically generated
// mutants of the reference (./harness/run --mutants auto) found unpinned: a
// runtime that is available, calls nested deeper than a router's scratch
// space, a key where the op had no kernel, blank filter entries, a change
// that fails part way, and a namespace once it is allowed.

#include "suite.h"

#include <ATen/ops/add.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

namespace conformance {
namespace {

using namespace native_registry::fixtures;
using ::testing::HasSubstr;

at::Tensor edge_mul_2_3_by_4_5() { return call_mul(tensor({2, 3}), tensor({4, 5})); }
const at::Tensor kEdgeStockProduct = tensor({8, 15});

// A runtime check that answers from a script (then true), counting the asks.
TryInitializeRuntimeFn scripted_runtime(std::shared_ptr<std::atomic<int>> asks,
                                        std::vector<bool> answers) {
  return [asks, answers = std::move(answers)] {
    const size_t n = static_cast<size_t>(asks->fetch_add(1));
    return n < answers.size() ? static_cast<bool>(answers[n]) : true;
  };
}

// Enters and leaves the unconditional mask twice: the disabled unconditional
// override of mul.Tensor (answering 5s) is masked inside, back outside.
void expect_the_mask_masks_mul(RegistryAdapter& adapter) {
  for (int round = 0; round < 2; ++round) {
    {
      auto mask = adapter.unconditional_masked();
      EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), kEdgeStockProduct)) << "the mask left the override in round " << round;
    }
    EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), tensor({5, 5}))) << "the override did not come back in round " << round;
  }
}

TEST_P(Conformance, AnAvailableRuntimeTakesTheCall) {
  BEHAVIOUR("routing.runtime-available-takes-the-call");
  REQUIRE_FEATURE("runtime-init");
  auto asks = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(true), fill_impl(42), "test_dsl", scripted_runtime(asks, {}));
  adapter().install(mul_key());
  // The first call, where the runtime first says it is available, is the impl's.
  EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), tensor({42, 42})));
  EXPECT_EQ(asks->load(), 1) << "try_initialize_runtime is asked once for the call";
  EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), tensor({42, 42})));
}

TEST_P(Conformance, AnUnavailableRuntimeIsAskedAgainOnTheNextCall) {
  BEHAVIOUR("routing.runtime-asked-until-available");
  REQUIRE_FEATURE("runtime-init");
  auto asks = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(true), fill_impl(42), "test_dsl",
      scripted_runtime(asks, {false, false}));
  adapter().install(mul_key());
  EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), kEdgeStockProduct));
  EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), kEdgeStockProduct));
  EXPECT_EQ(asks->load(), 2) << "each matched call asks an unavailable runtime again";
  EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), tensor({42, 42})));
  EXPECT_EQ(asks->load(), 3);
}

TEST_P(Conformance, AnImplCallingItsOwnOpTenDeep) {
  BEHAVIOUR("routing.reentrant-calls-nest-deep");
  // The eleventh call declines: aten's kernel, ten deep.
  CondFn below_ten = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
    return stack.at(stack.size() - 2).toTensor()[0].item<float>() < 10;
  };
  // Every level's arguments and result differ, and each level's arguments
  // stay on its stack while the levels below it run, so a level that shared
  // another's stack would show.
  ImplFn recurse = [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
    const at::Tensor a = stack->at(stack->size() - 2).toTensor();
    const at::Tensor b = stack->at(stack->size() - 1).toTensor();
    at::Tensor result = at::add(call_mul(at::add(a, 1), b), 1);
    torch::jit::drop(*stack, 2);
    torch::jit::push(*stack, std::move(result));
  };
  add(mul_key(), below_ten, recurse);
  adapter().install(mul_key());
  for (int nest = 0; nest < 2; ++nest) {  // the second finds what the first left behind
    // Levels 0..9 each add one to a and to the result; level 10 is 10 * 2.
    EXPECT_TRUE(same(call_mul(at::zeros({2}), at::full({2}, 2.0)), tensor({30, 30})));
  }
}

TEST_P(Conformance, ADeclinedCallWhereTheOpHadNoKernel) {
  BEHAVIOUR("routing.declined-without-a-prior-kernel");
  const Key xla{"aten", "mul.Tensor", "XLA"};
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  ASSERT_FALSE(op.hasComputedKernelForDispatchKey(c10::DispatchKey::XLA));
  auto takes = std::make_shared<bool>(false);
  add(xla, [takes](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return *takes; },
      fill_impl(7));
  adapter().install(xla);
  const auto call_at_xla = [&] {
    Stack stack{tensor({2, 3}), tensor({4, 5})};
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::XLA), &stack);
    return stack.at(0).toTensor();
  };
  EXPECT_THAT(call_at_xla, ::testing::ThrowsMessage<c10::NotImplementedError>(
                               ::testing::AllOf(HasSubstr("mul"), HasSubstr("XLA"))));
  *takes = true;
  EXPECT_TRUE(same(call_at_xla(), tensor({7, 7})));
}

TEST_P(Conformance, BlankFilterEntriesAreRefused) {
  BEHAVIOUR("validation.blank-filter-entries-refused");
  add(mul_key(), constant_cond(true), fill_impl(42), "kept");
  adapter().install(mul_key());
  for (const bool enable : {false, true}) {
    if (enable) adapter().disable({{"kept"}, {}, {}});  // so that the re-enable would change something
    const auto tables = fingerprint();
    const at::Tensor result = edge_mul_2_3_by_4_5();
    for (const std::string blank : {"", "  "}) {
      // A good entry beside the blank one: it must not take effect either.
      const std::vector<std::pair<std::string, Filter>> cases = {
          {"dsl_names", {{"kept", blank}, {}, {}}},
          {"op_symbols", {{"kept"}, {blank}, {}}},
          {"dispatch_keys", {{"kept"}, {}, {blank}}},
      };
      for (const auto& [which, filter] : cases) {
        const std::string argument = (enable ? "enable_" : "disable_") + which;
        try {
          enable ? adapter().enable(filter) : adapter().disable(filter);
          ADD_FAILURE() << argument << " accepted the blank entry '" << blank << "'";
        } catch (const InvalidArgument& e) {
          EXPECT_THAT(e.what(), HasSubstr(argument));
        }
        EXPECT_EQ(adapter().graph(mul_key()).at(0).active, enable ? false : true) << argument;
        EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), result)) << argument;
        EXPECT_EQ(fingerprint().difference(tables), "") << argument;
      }
    }
  }
}

// Namespaces that sort after the first test namespace (and are registered
// after it), so that an implementation working graph by graph, in
// registration or in key order, reaches that graph before the failing one.
constexpr const char* kDoomedNamespace = "_native_registry_zz_doomed";  // unloaded mid-test
constexpr const char* kNeverNamespace = "_native_registry_zz_never";    // never defined

TEST_P(Conformance, AReenableThatFailsPartWayChangesNothing) {
  BEHAVIOUR("validation.failed-change-changes-nothing");
  REQUIRE_FEATURE("namespaces");
  // The doomed graph's chain is empty at its install: no router, nothing
  // captured; re-enabling `d` cannot give it a router now.
  const auto [routed, doomed] = beside_a_doomed_graph(kDoomedNamespace, {"d"}, {"d"});
  const auto tables = fingerprint();
  EXPECT_THROW(adapter().enable({{"d"}, {}, {}}), OperatorNotFound);
  EXPECT_FALSE(adapter().graph(routed).at(0).active) << "the failed re-enable changed the filters";
  EXPECT_FALSE(adapter().graph(doomed).at(0).active);
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({2, 4})))
      << "the failed re-enable gave the other graph its route back";
  EXPECT_EQ(fingerprint().difference(tables), "");
}

TEST_P(Conformance, ADisableThatFailsPartWayChangesNothing) {
  BEHAVIOUR("validation.failed-change-changes-nothing");
  REQUIRE_FEATURE("namespaces");
  // Disabling `d` leaves the doomed graph `e` to route, which needs a
  // router the op can no longer have.
  const auto [routed, doomed] = beside_a_doomed_graph(kDoomedNamespace, {"d", "e"}, {});
  const auto tables = fingerprint();
  EXPECT_THROW(adapter().disable({{"d"}, {}, {}}), OperatorNotFound);
  EXPECT_TRUE(adapter().graph(routed).at(0).active) << "the failed disable changed the filters";
  EXPECT_TRUE(adapter().graph(doomed).at(0).active);
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({99, 99})))
      << "the failed disable took the other graph's route away";
  EXPECT_EQ(fingerprint().difference(tables), "");
}

TEST_P(Conformance, AnInstallAllThatFailsPartWayInstallsNothing) {
  BEHAVIOUR("validation.failed-change-changes-nothing");
  REQUIRE_FEATURE("namespaces");
  const Key routed = twice_key(ns1().ns());
  add(routed, constant_cond(true), fill_impl(99), "d");
  add(twice_key(kNeverNamespace), constant_cond(true), fill_impl(7), "d");
  const auto tables = fingerprint();
  EXPECT_THROW(adapter().install_all(), OperatorNotFound);
  EXPECT_FALSE(adapter().router_installed(routed)) << "install_all installed a graph before failing";
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({2, 4})));
  EXPECT_EQ(fingerprint().difference(tables), "");
}

// A namespace that sorts before aten and the test namespaces, so that an
// implementation going graph by graph in key order meets its graph first.
constexpr const char* kEarlyDoomedNamespace = "_native_registry_a_doomed";  // unloaded mid-test

// A change that names a graph never installed checks nothing of it: its op
// may not be defined yet (the graph gets its router when installed).
TEST_P(Conformance, AFilterChangeNamingAGraphOfAnUndefinedOpNeverInstalledRaisesNothing) {
  BEHAVIOUR("filters.change-checks-installed-graphs-only");
  REQUIRE_FEATURE("namespaces");
  const Key never = twice_key(kNeverNamespace);
  add(never, constant_cond(true), fill_impl(7), "d");
  add(never, constant_cond(true), fill_impl(8), "e");
  const auto tables = fingerprint();
  EXPECT_NO_THROW(adapter().disable({{"d"}, {}, {}})) << "the graph of e still routes: its op was looked up";
  EXPECT_NO_THROW(adapter().enable({{"d"}, {}, {}})) << "re-enabling d: its op was looked up";
  EXPECT_NO_THROW(adapter().disable({{}, {"twice"}, {}}));
  EXPECT_NO_THROW(adapter().enable({{}, {"twice"}, {}}));
  EXPECT_FALSE(adapter().router_installed(never));
  EXPECT_EQ(fingerprint().difference(tables), "");
}

TEST_P(Conformance, TheMaskPassesOverAnInstalledGraphWhoseOpIsGone) {
  BEHAVIOUR("unconditional.mask-passes-over-graphs-it-cannot-change");
  REQUIRE_FEATURE("unconditional-hatch");
  REQUIRE_FEATURE("namespaces");
  const Key doomed = twice_key(kEarlyDoomedNamespace);
  add(mul_key(), CondFn{}, fill_impl(5), "u", {}, true);
  adapter().install(mul_key());
  {
    ScopedTwiceNamespace library(kEarlyDoomedNamespace, 5.0);
    add(doomed, CondFn{}, fill_impl(7), "u", {}, true);
    add(doomed, constant_cond(true), fill_impl(8), "e");
    adapter().install(doomed);
    adapter().disable({{"u"}, {}, {}});
  }
  // The doomed graph's chain would change too, but its router cannot be rebuilt.
  expect_the_mask_masks_mul(adapter());
}

TEST_P(Conformance, TheMaskPassesOverAGraphInstalledWithNoOverride) {
  BEHAVIOUR("unconditional.mask-passes-over-graphs-it-cannot-change");
  REQUIRE_FEATURE("unconditional-hatch");
  REQUIRE_FEATURE("namespaces");
  adapter().install(bmm_key());  // nothing registered for it: nothing to route
  add(mul_key(), CondFn{}, fill_impl(5), "u", {}, true);
  adapter().install(mul_key());
  adapter().disable({{"u"}, {}, {}});
  expect_the_mask_masks_mul(adapter());
  EXPECT_FALSE(adapter().router_installed(bmm_key()));
}

TEST_P(Conformance, TheMaskLeavesAGraphItDoesNotMaskAsPublished) {
  BEHAVIOUR("unconditional.mask-republishes-masked-graphs-only");
  REQUIRE_FEATURE("unconditional-hatch");
  add(mul_key(), constant_cond(false), fill_impl(7), "d");
  adapter().install(mul_key());
  // Registered after the install: no call reaches it until the graph is installed again.
  add(mul_key(), constant_cond(true), fill_impl(8), "e");
  add(bmm_key(), CondFn{}, fill_impl(5), "u", {}, true);
  adapter().install(bmm_key());
  adapter().disable({{"u"}, {}, {}});  // a graph the mask does change
  for (int round = 0; round < 2; ++round) {
    {
      auto mask = adapter().unconditional_masked();
      EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), kEdgeStockProduct)) << "entering the mask published e";
    }
    EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), kEdgeStockProduct)) << "leaving the mask published e";
  }
  adapter().install(mul_key());
  EXPECT_TRUE(same(edge_mul_2_3_by_4_5(), tensor({8, 8})));
}

// ---- a scope over several graphs ------------------------------------------------

TEST_P(Conformance, LeavingAScopeRestoresEveryGraphItChanged) {
  BEHAVIOUR("teardown.scope-restores-every-graph");
  REQUIRE_FEATURE("namespaces");
  // ns1's twice and ns2's twice (mul.Tensor is what both compute with): each
  // with an override that takes the call and one that declines.
  const Key first = twice_key(ns1().ns()), second = twice_key(ns2().ns());
  add(first, constant_cond(true), fill_impl(7), "d");
  add(first, constant_cond(false), fill_impl(70), "e");
  add(second, constant_cond(true), fill_impl(8), "d");
  add(second, constant_cond(false), fill_impl(80), "e");
  adapter().install(first);
  adapter().install(second);
  const at::Tensor x = tensor({1, 2});
  {
    auto scope = adapter().scope();
    adapter().disable({{"d"}, {}, {}});  // each router stays, routing through e alone
    EXPECT_TRUE(same(ns1().twice(x), tensor({2, 4})));
    EXPECT_TRUE(same(ns2().twice(x), tensor({3, 6})));
  }
  EXPECT_TRUE(same(ns1().twice(x), tensor({7, 7}))) << "leaving the scope left the first graph changed";
  EXPECT_TRUE(same(ns2().twice(x), tensor({8, 8}))) << "leaving the scope left the second graph changed";
}

TEST_P(Conformance, TheNativeNamespaceCanNeverBeAllowed) {
  BEHAVIOUR("validation.native-namespace-never-allowed");
  REQUIRE_FEATURE("namespaces");
  try {
    adapter().allow_namespace("_native");
    ADD_FAILURE() << "the _native namespace was put on the allowlist";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("_native"));
  }
  EXPECT_FALSE(adapter().namespace_allowed("_native"));
}

TEST_P(Conformance, ANameNoNamespaceHasIsNeverAllowed) {
  BEHAVIOUR("validation.malformed-namespace-never-allowed");
  REQUIRE_FEATURE("namespaces");
  for (const std::string bad : {"", " ", "aten::mul", "my.ns", "my ns"}) {
    try {
      adapter().allow_namespace(bad);
      ADD_FAILURE() << "'" << bad << "' was put on the allowlist";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("'" + bad + "'"));
    }
    EXPECT_FALSE(adapter().namespace_allowed(bad));
  }
}

TEST_P(Conformance, InstallingUnderAKeyNoRegistrationCouldMakeIsRefused) {
  BEHAVIOUR("validation.install-refuses-unregistrable-key");
  const auto tables = fingerprint();
  // Each with the value its refusal must show.
  const std::pair<Key, std::string> refused[] = {
      {{"aten", "aten::mul.Tensor", "CPU"}, "aten::mul.Tensor"},
      {{"aten", "mul Tensor", "CPU"}, "mul Tensor"},
      {{"aten", "mul.Tensor", "Meta"}, "Meta"},
  };
  for (const auto& [key, shown] : refused) {
    try {
      adapter().install(key);
      ADD_FAILURE() << "installed under " << key.op_symbol << "/" << key.dispatch_key;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("'" + shown + "'"));
    }
    EXPECT_FALSE(adapter().router_installed(key));
  }
  EXPECT_EQ(fingerprint().difference(tables), "");
}

TEST_P(Conformance, AnAllowedNamespaceIsThenAccepted) {
  BEHAVIOUR("validation.allowed-namespace-accepted");
  REQUIRE_FEATURE("namespaces");
  const Key mine = twice_key(ns1().ns());
  const Override on_mine{"d", mine.lib_symbol, mine.op_symbol, mine.dispatch_key,
                         constant_cond(true), fill_impl(5), {}, false};
  Override on_other = on_mine;
  on_other.lib_symbol = ns2().ns();
  EXPECT_FALSE(adapter().namespace_allowed(mine.lib_symbol));
  try {
    adapter().register_override(on_mine);
    ADD_FAILURE() << "a namespace off the allowlist was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not overridable"));
  }
  adapter().allow_namespace(mine.lib_symbol);
  EXPECT_TRUE(adapter().namespace_allowed(mine.lib_symbol));
  EXPECT_FALSE(adapter().namespace_allowed(on_other.lib_symbol)) << "allowing one namespace allowed another";
  adapter().register_override(on_mine);
  EXPECT_THROW(adapter().register_override(on_other), InvalidArgument);
  adapter().install(mine);
  EXPECT_TRUE(same(ns1().twice(tensor({1, 2})), tensor({5, 5})));
  EXPECT_TRUE(same(ns2().twice(tensor({1, 2})), tensor({3, 6})));
}

}  // namespace
}  // namespace conformance
