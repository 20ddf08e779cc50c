// Registration, validation, filters and ordering, through the adapter.

#include "suite.h"
#include "warning_recorder.h"

#include <ATen/ops/add.h>

#include <set>

namespace conformance {
namespace {

using namespace native_registry::fixtures;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> dsl_names(const std::vector<NodeInfo>& graph) {
  std::vector<std::string> names;
  for (const auto& node : graph) names.push_back(node.dsl_name);
  return names;
}

TEST_P(Conformance, NodeFieldsAndDefaults) {
  BEHAVIOUR("nodes.fields-and-defaults");
  add({"aten", "add.Tensor", "CPU"}, constant_cond(true), fill_impl(1));
  const auto graph = adapter().graph({"aten", "add.Tensor", "CPU"});
  ASSERT_EQ(graph.size(), 1u);
  EXPECT_EQ(graph[0].dsl_name, "test_dsl");
  EXPECT_EQ(graph[0].lib_symbol, "aten");
  EXPECT_EQ(graph[0].op_symbol, "add.Tensor");
  EXPECT_EQ(graph[0].dispatch_key, "CPU");
  EXPECT_FALSE(graph[0].node_id.empty());
  EXPECT_FALSE(graph[0].has_try_initialize_runtime);
  EXPECT_FALSE(graph[0].unconditional_override);
  EXPECT_TRUE(graph[0].active);
}

TEST_P(Conformance, RegistrationAppendsInOrderAndInstallsNothing) {
  BEHAVIOUR("registration.appends-in-order");
  add(mul_key(), constant_cond(true), fill_impl(1), "backend_z");
  add(mul_key(), constant_cond(true), fill_impl(2), "backend_a");
  EXPECT_THAT(dsl_names(adapter().graph(mul_key())), ElementsAre("backend_z", "backend_a"));
  EXPECT_FALSE(adapter().router_installed(mul_key()));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_P(Conformance, NodeIdsAreUniqueAcrossTeardowns) {
  BEHAVIOUR("registration.node-ids-unique");
  std::set<std::string> ids;
  for (int round = 0; round < 3; ++round) {
    auto inner = adapter().scope();
    for (int i = 0; i < 3; ++i) add(mul_key(), constant_cond(true), fill_impl(1));
    for (const auto& node : adapter().graph(mul_key())) {
      EXPECT_TRUE(ids.insert(node.node_id).second) << "node id reused: " << node.node_id;
    }
  }
  EXPECT_EQ(ids.size(), 9u);
}

TEST_P(Conformance, ANodeIdNamesItsOpAndDsl) {
  BEHAVIOUR("registration.node-id-names-the-override");
  add(mul_key(), constant_cond(true), fill_impl(1), "backend_z");
  const auto graph = adapter().graph(mul_key());
  ASSERT_EQ(graph.size(), 1u);
  EXPECT_THAT(graph[0].node_id, HasSubstr("mul_Tensor"));
  EXPECT_THAT(graph[0].node_id, HasSubstr("backend_z"));
}

TEST_P(Conformance, GraphKeyCarriesTheNamespace) {
  BEHAVIOUR("namespaces.graph-key-carries-namespace");
  REQUIRE_FEATURE("namespaces");
  add(twice_key(kTestNamespace), constant_cond(true), fill_impl(1));
  const auto graph = adapter().graph(twice_key(kTestNamespace));
  ASSERT_EQ(graph.size(), 1u);
  EXPECT_EQ(graph[0].lib_symbol, kTestNamespace);
  EXPECT_TRUE(adapter().graph({"aten", "twice", "CPU"}).empty());
}

TEST_P(Conformance, DisallowedDispatchKeysAreRefused) {
  BEHAVIOUR("validation.disallowed-dispatch-keys");
  for (const char* key : {"Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd"}) {
    try {
      add({"aten", "mul.Tensor", key}, constant_cond(true), fill_impl(1));
      ADD_FAILURE() << key << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("dispatch_key="));
    }
    EXPECT_TRUE(adapter().graph({"aten", "mul.Tensor", key}).empty());
  }
}

TEST_P(Conformance, NamespacesAreOptIn) {
  BEHAVIOUR("validation.namespace-allowlist");
  EXPECT_FALSE(adapter().namespace_allowed("_native"));
  try {
    adapter().register_override({"d", "_native", "some_op", "CPU", constant_cond(true), fill_impl(1), {}, false});
    ADD_FAILURE() << "_native was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not overridable"));
  }
}

TEST_P(Conformance, TheAllowlistRefusalNamesEveryAllowedNamespace) {
  BEHAVIOUR("validation.allowlist-refusal-names-allowed");
  REQUIRE_FEATURE("namespaces");
  adapter().allow_namespace(kTestNamespace);
  adapter().allow_namespace(kSecondTestNamespace);
  try {
    adapter().register_override({"d", "nr_never_allowed", "twice", "CPU", constant_cond(true), fill_impl(1), {}, false});
    ADD_FAILURE() << "a namespace off the allowlist was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not overridable"));
    for (const std::string allowed : {"aten", kTestNamespace, kSecondTestNamespace}) {
      // Each a name of its own, not run into the next.
      EXPECT_THAT(e.what(), ContainsRegex("(^|[^A-Za-z0-9_])" + allowed + "([^A-Za-z0-9_]|$)"));
    }
  }
}

TEST_P(Conformance, CondIsRequiredUnlessUnconditional) {
  BEHAVIOUR("validation.cond-required");
  try {
    add(mul_key(), CondFn{}, fill_impl(1));
    ADD_FAILURE() << "a missing cond was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("cond must be provided"));
  }
  EXPECT_TRUE(adapter().graph(mul_key()).empty());
}

TEST_P(Conformance, UnconditionalRefusesRuntimeInitialization) {
  BEHAVIOUR("validation.unconditional-refuses-runtime-init");
  REQUIRE_FEATURE("runtime-init");
  try {
    add(mul_key(), CondFn{}, fill_impl(1), "d", [] { return true; }, true);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("try_initialize_runtime cannot be provided"));
  }
}

TEST_P(Conformance, BadInputChangesNothing) {
  BEHAVIOUR("validation.bad-input-changes-nothing");
  add(mul_key(), constant_cond(false), fill_impl(1), "kept");
  adapter().install(mul_key());
  const auto tables = fingerprint();
  const auto graph = adapter().graph(mul_key());
  const std::vector<Override> bad = {
      {"d", "aten", "mul.Tensor", "NotADispatchKey", constant_cond(true), fill_impl(1), {}, false},
      {"d", "aten", "mul.Tensor", "", constant_cond(true), fill_impl(1), {}, false},
      {"d", "aten", "", "CPU", constant_cond(true), fill_impl(1), {}, false},
      {"", "aten", "mul.Tensor", "CPU", constant_cond(true), fill_impl(1), {}, false},
      {"d", "aten", "aten::mul", "CPU", constant_cond(true), fill_impl(1), {}, false},
      // A dot must be followed by an overload name.
      {"d", "aten", "mul.", "CPU", constant_cond(true), fill_impl(1), {}, false},
      {"d", "aten", "mul.Tensor-x", "CPU", constant_cond(true), fill_impl(1), {}, false},
      {"d", "aten", "mul.Tensor", "CPU", constant_cond(true), ImplFn{}, {}, false},
      // An alias key: no kernel runs at it, so no router could.
      {"d", "aten", "mul.Tensor", "Autograd", constant_cond(true), fill_impl(1), {}, false},
  };
  for (const Override& o : bad) {
    const std::string names = "'" + o.dsl_name + "' '" + o.op_symbol + "' '" + o.dispatch_key + "'";
    try {
      adapter().register_override(o);
      ADD_FAILURE() << "accepted " << names;
    } catch (const InvalidArgument& e) {
      // The error names the bad value, where it has a name.
      if (o.dispatch_key != "CPU" && !o.dispatch_key.empty()) {
        EXPECT_THAT(e.what(), HasSubstr(o.dispatch_key)) << names;
      }
      if (o.op_symbol != "mul.Tensor" && !o.op_symbol.empty()) {
        EXPECT_THAT(e.what(), HasSubstr(o.op_symbol)) << names;
      }
    }
  }
  EXPECT_THROW(adapter().disable({{""}, {}, {}}), InvalidArgument);
  EXPECT_EQ(adapter().graph(mul_key()).size(), graph.size());
  EXPECT_TRUE(adapter().graph(mul_key())[0].active);
  EXPECT_EQ(fingerprint().difference(tables), "");
}

TEST_P(Conformance, UndefinedOpFailsLoudlyAtInstall) {
  BEHAVIOUR("validation.undefined-op-fails-at-install");
  REQUIRE_FEATURE("namespaces");
  const Key missing = twice_key(kMissingNamespace);
  add(missing, constant_cond(true), fill_impl(1));
  try {
    adapter().install(missing);
    ADD_FAILURE() << "installed an op that does not exist";
  } catch (const OperatorNotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("not found; is the namespace"));
  }
  EXPECT_FALSE(adapter().router_installed(missing));
}

TEST_P(Conformance, DisableMarksNodesInactive) {
  BEHAVIOUR("filters.disable-marks-inactive");
  add(mul_key(), constant_cond(true), fill_impl(1), "test_backend");
  EXPECT_TRUE(adapter().graph(mul_key())[0].active);
  adapter().disable({{"test_backend"}, {}, {}});
  EXPECT_FALSE(adapter().graph(mul_key())[0].active);
  adapter().enable({{"test_backend"}, {}, {}});
  EXPECT_TRUE(adapter().graph(mul_key())[0].active);
}

TEST_P(Conformance, DisableReenableRoundTrip) {
  BEHAVIOUR("filters.disable-reenable-roundtrip");
  add(mul_key(), constant_cond(true), fill_impl(7));
  adapter().install(mul_key());
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({7, 7})));
  adapter().disable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
  adapter().enable({{"test_dsl"}, {}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({7, 7})));
}

TEST_P(Conformance, DisableByOpSymbolAndByDispatchKey) {
  BEHAVIOUR("filters.by-op-symbol-and-dispatch-key");
  add(mul_key(), constant_cond(true), fill_impl(7));
  adapter().install(mul_key());
  for (const Filter& filter : {Filter{{}, {"mul.Tensor"}, {}}, Filter{{}, {}, {"CPU"}}}) {
    adapter().disable(filter);
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
    adapter().enable(filter);
    EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  }
}

TEST_P(Conformance, AFilterListNamesEachOfItsEntries) {
  BEHAVIOUR("filters.lists-name-each");
  // Three overrides of mul, all accepting: the first enabled one takes the call.
  add(mul_key(), constant_cond(true), fill_impl(1), "dsl_a");
  add(mul_key(), constant_cond(true), fill_impl(2), "dsl_b");
  add(mul_key(), constant_cond(true), fill_impl(3), "dsl_c");
  adapter().install(mul_key());
  auto mul = [] { return call_mul(tensor({2, 3}), tensor({4, 5})); };
  EXPECT_TRUE(same(mul(), tensor({1, 1})));
  adapter().disable({{"dsl_a", "dsl_b"}, {}, {}});
  EXPECT_TRUE(same(mul(), tensor({3, 3}))) << "both dsl names of the list are disabled";
  adapter().disable({{"dsl_c"}, {}, {}});
  EXPECT_TRUE(same(mul(), tensor({8, 15})));
  adapter().enable({{"dsl_c", "dsl_b"}, {}, {}});
  EXPECT_TRUE(same(mul(), tensor({2, 2}))) << "both dsl names of the list are enabled, dsl_a not";
  adapter().enable({{"dsl_a"}, {}, {}});
  EXPECT_TRUE(same(mul(), tensor({1, 1})));

  // Op symbols and dispatch keys: one list names two graphs.
  const Key add_cpu{"aten", "add.Tensor", "CPU"};
  add(add_cpu, constant_cond(true), fill_impl(9), "dsl_a");
  adapter().install(add_cpu);
  auto plus = [] { return at::add(tensor({2, 3}), tensor({4, 5})); };
  EXPECT_TRUE(same(plus(), tensor({9, 9})));
  for (const Filter& filter : {Filter{{}, {"add.Tensor", "mul.Tensor"}, {}},
                               Filter{{}, {}, {"AutocastCPU", "CPU"}}}) {
    adapter().disable(filter);
    EXPECT_TRUE(same(mul(), tensor({8, 15})));
    EXPECT_TRUE(same(plus(), tensor({6, 8})));
    adapter().enable(filter);
    EXPECT_TRUE(same(mul(), tensor({1, 1})));
    EXPECT_TRUE(same(plus(), tensor({9, 9})));
  }
}

TEST_P(Conformance, OpSymbolFiltersAreNamespaceBlind) {
  BEHAVIOUR("filters.op-symbol-namespace-blind", "namespaces.same-symbol-independent");
  REQUIRE_FEATURE("namespaces");
  add(twice_key(kTestNamespace), constant_cond(true), fill_impl(99));
  add(twice_key(kSecondTestNamespace), constant_cond(true), fill_impl(7));
  adapter().install(twice_key(kTestNamespace));
  adapter().install(twice_key(kSecondTestNamespace));
  const auto x = tensor({1, 2});
  EXPECT_TRUE(same(ns1().twice(x), tensor({99, 99})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({7, 7})));
  adapter().disable({{}, {std::string(kTestNamespace) + "::twice"}, {}});
  EXPECT_TRUE(same(ns1().twice(x), tensor({99, 99})));
  adapter().disable({{}, {"twice"}, {}});
  EXPECT_TRUE(same(ns1().twice(x), tensor({2, 4})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({3, 6})));
  adapter().enable({{}, {"twice"}, {}});
  EXPECT_TRUE(same(ns1().twice(x), tensor({99, 99})));
  EXPECT_TRUE(same(ns2().twice(x), tensor({7, 7})));
}

TEST_P(Conformance, OrderingFunctionReordersEveryGraph) {
  BEHAVIOUR("ordering.user-function-reorders");
  for (const char* dsl : {"dsl_c", "dsl_a", "dsl_b"}) add(mul_key(), constant_cond(true), fill_impl(1), dsl);
  for (const char* dsl : {"dsl_b", "dsl_a"}) add(bmm_key(), constant_cond(true), fill_impl(1), dsl);
  adapter().reorder([](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    std::vector<NodeInfo> sorted = graph;
    std::sort(sorted.begin(), sorted.end(),
              [](const NodeInfo& a, const NodeInfo& b) { return a.dsl_name < b.dsl_name; });
    std::vector<std::string> ids;
    for (const auto& node : sorted) ids.push_back(node.node_id);
    return ids;
  });
  EXPECT_THAT(dsl_names(adapter().graph(mul_key())), ElementsAre("dsl_a", "dsl_b", "dsl_c"));
  EXPECT_THAT(dsl_names(adapter().graph(bmm_key())), ElementsAre("dsl_a", "dsl_b"));
}

TEST_P(Conformance, FailingOrderingFunctionKeepsTheGraphAndWarns) {
  BEHAVIOUR("ordering.failure-keeps-graph");
  add(mul_key(), constant_cond(true), fill_impl(1), "dsl_b");
  add(mul_key(), constant_cond(true), fill_impl(1), "dsl_a");
  const size_t warnings_before = adapter().warnings().size();
  adapter().reorder([](const std::string&, const std::string&,
                       const std::vector<NodeInfo>&) -> std::vector<std::string> {
    throw std::runtime_error("Test exception");
  });
  const auto warnings = adapter().warnings();
  ASSERT_EQ(warnings.size(), warnings_before + 1);
  EXPECT_THAT(warnings.back(), HasSubstr("Graph transformation failed"));
  EXPECT_THAT(dsl_names(adapter().graph(mul_key())), ElementsAre("dsl_b", "dsl_a"));
}

TEST_P(Conformance, DslOperationsReportOneNamespace) {
  BEHAVIOUR("namespaces.dsl-operations-per-namespace");
  REQUIRE_FEATURE("namespaces");
  add(twice_key(kTestNamespace), constant_cond(true), fill_impl(1));
  add(mul_key(), constant_cond(true), fill_impl(1));
  EXPECT_THAT(adapter().dsl_operations("test_dsl", kTestNamespace), ElementsAre("twice"));
  EXPECT_THAT(adapter().dsl_operations("test_dsl", "aten"), ElementsAre("mul.Tensor"));
}

// Warnings raised while an install edits the dispatcher reach the user,
// except LibTorch's kernel-override notice: here a registration listener's,
// which LibTorch calls as the override's `_native` op is defined.
TEST_P(Conformance, OtherWarningsRaisedDuringAnInstallReachTheUser) {
  BEHAVIOUR("warnings.override-notice-filtered");
  REQUIRE_FEATURE("native-op-meta");
  struct WarnOnNativeOps final : c10::OpRegistrationListener {
    void onOperatorRegistered(const c10::OperatorHandle& op) override {
      if (op.operator_name().name.rfind("_native::", 0) == 0) TORCH_WARN("listener saw ", op.operator_name().name);
    }
    void onOperatorDeregistered(const c10::OperatorHandle&) override {}
  };
  WarningRecorder recorder;
  c10::WarningUtils::WarningHandlerGuard guard(&recorder);
  {
    const c10::RegistrationHandleRAII listening =
        c10::Dispatcher::singleton().addRegistrationListener(std::make_unique<WarnOnNativeOps>());
    recorder.messages.clear();  // what it said of the ops already defined
    add(mul_key(), constant_cond(true), fill_impl(3));
    adapter().install(mul_key());
  }
  const std::string node_id = adapter().graph(mul_key()).at(0).node_id;
  EXPECT_TRUE(recorder.saw("listener saw _native::" + node_id))
      << recorder.messages.size() << " warnings, none of them the listener's for " << node_id;
}

}  // namespace
}  // namespace conformance
