// Registration: what a node records, how graphs and indexes grow, the
// validation that refuses bad input without changing anything, the namespace
// allowlist, and the dsl-operations query.

#include "support.h"

#include <set>

namespace native_registry::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Everything a caller can observe of a registry's state, for "nothing changed".
struct Observed {
  std::vector<GraphKey> keys;
  std::vector<std::string> node_ids;
  std::vector<std::string> disabled;
  std::set<std::string> allowlist;
  RouterState mul_router;
  bool operator==(const Observed& other) const {
    return keys == other.keys && node_ids == other.node_ids &&
           disabled == other.disabled && allowlist == other.allowlist &&
           mul_router == other.mul_router;
  }
};

Observed observe(const Registry& registry) {
  Observed observed;
  observed.keys = registry.graph_keys();
  for (const GraphKey& key : observed.keys) {
    for (const NodePtr& node : registry.graph(key)) {
      observed.node_ids.push_back(node->node_id);
    }
  }
  const Filter filters = registry.filters();
  for (const auto* list : {&filters.dsl_names, &filters.op_symbols, &filters.dispatch_keys}) {
    observed.disabled.insert(observed.disabled.end(), list->begin(), list->end());
    observed.disabled.push_back("|");
  }
  observed.allowlist = registry.allowed_namespaces();
  observed.mul_router = registry.router_state(mul_cpu());
  return observed;
}

using RegistrationTest = RegistryTest;

TEST_F(RegistrationTest, NodeRecordsItsFieldsAndDefaults) {
  CondFn cond = constant_cond(true);
  NodePtr node = registry().register_op_override("test_dsl", "aten", "add.Tensor", "CPU",
                                                 cond, fill_impl(1.0));
  EXPECT_EQ(node->dsl_name, "test_dsl");
  EXPECT_EQ(node->key.lib_symbol, "aten");
  EXPECT_EQ(node->key.op_symbol, "add.Tensor");
  EXPECT_EQ(node->key.dispatch_key, "CPU");
  EXPECT_TRUE(static_cast<bool>(node->cond));
  EXPECT_TRUE(static_cast<bool>(node->impl));
  EXPECT_FALSE(static_cast<bool>(node->options.try_initialize_runtime));
  EXPECT_FALSE(node->options.unconditional_override);
  EXPECT_FALSE(node->options.divert_when_tracing);
  EXPECT_TRUE(registry().is_enabled(*node));
  EXPECT_FALSE(node->node_id.empty());
}

TEST_F(RegistrationTest, RegistrationAppendsInOrderAndInstallsNothing) {
  auto first = register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "backend_z");
  auto second = register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "backend_a");
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(first, second));
  EXPECT_EQ(registry().router_state(mul_cpu()), RouterState::kAbsent);
  // The op still computes its own result: nothing reached the dispatcher.
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

TEST_F(RegistrationTest, IndexesMapNamesToGraphKeys) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  register_override(bmm_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_b");
  EXPECT_THAT(registry().graphs_by_dsl_name().at("dsl_a"), ElementsAre(mul_cpu(), bmm_cpu()));
  EXPECT_THAT(registry().graphs_by_dsl_name().at("dsl_b"), ElementsAre(mul_cpu()));
  EXPECT_THAT(registry().graphs_by_op_symbol().at("mul.Tensor"), ElementsAre(mul_cpu()));
  EXPECT_THAT(registry().graphs_by_dispatch_key().at("CPU"),
              ElementsAre(mul_cpu(), bmm_cpu()));
}

TEST_F(RegistrationTest, NodeIdsAreUniqueAndNeverReused) {
  std::set<std::string> ids;
  const Snapshot empty = registry().snapshot();
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 5; ++i) {
      auto node = register_override(mul_cpu(), constant_cond(true), fill_impl(1));
      EXPECT_TRUE(ids.insert(node->node_id).second) << "reused " << node->node_id;
    }
    registry().restore(empty);  // dropping nodes must not free their ids
  }
  // A second registry mints from the same process-wide sequence.
  Registry other;
  auto node = other.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                                         constant_cond(true), fill_impl(1));
  EXPECT_TRUE(ids.insert(node->node_id).second);
}

TEST_F(RegistrationTest, DispatchKeyIsCanonicalised) {
  auto node = register_override({"aten", "mul.Tensor", "CPU"}, constant_cond(true), fill_impl(1));
  EXPECT_EQ(node->key.dispatch_key, "CPU");
}

struct BadRegistration {
  std::string label;
  std::string dsl, lib, op, key;
  bool with_cond = true;
  bool unconditional_with_runtime = false;
  bool with_impl = true;
  std::string message;  // must appear in the error
};

OverrideOptions options_for(const BadRegistration& bad) {
  OverrideOptions options;
  if (bad.unconditional_with_runtime) {
    options.unconditional_override = true;
    options.try_initialize_runtime = [] { return true; };
  }
  return options;
}

class RegistrationValidationTest : public RegistryTest,
                                   public ::testing::WithParamInterface<BadRegistration> {};

TEST_P(RegistrationValidationTest, RefusedWithClearErrorAndNothingChanged) {
  const BadRegistration& bad = GetParam();
  // Something registered and installed beforehand, which must survive as is.
  register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  registry().install_graph(mul_cpu());
  const Observed before = observe(registry());
  try {
    registry().register_op_override(
        bad.dsl, bad.lib, bad.op, bad.key, bad.with_cond ? constant_cond(true) : CondFn{},
        bad.with_impl ? fill_impl(1) : ImplFn{}, options_for(bad));
    FAIL() << "accepted " << bad.label;
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr(bad.message));
  }
  EXPECT_TRUE(observe(registry()) == before);
}


INSTANTIATE_TEST_SUITE_P(
    BadInput, RegistrationValidationTest,
    ::testing::Values(
        BadRegistration{"Meta", "d", "aten", "mul.Tensor", "Meta", true, false, true, "dispatch_key='Meta'"},
        BadRegistration{"CompositeImplicitAutograd", "d", "aten", "mul.Tensor",
                        "CompositeImplicitAutograd", true, false, true, "dispatch_key="},
        BadRegistration{"CompositeExplicitAutograd", "d", "aten", "mul.Tensor",
                        "CompositeExplicitAutograd", true, false, true, "dispatch_key="},
        BadRegistration{"AliasKey", "d", "aten", "mul.Tensor", "Autograd", true, false, true,
                        "not a runtime dispatch key"},
        BadRegistration{"UnknownKey", "d", "aten", "mul.Tensor", "NotAKey", true, false, true,
                        "unknown dispatch_key='NotAKey'"},
        BadRegistration{"EmptyKey", "d", "aten", "mul.Tensor", "", true, false, true,
                        "dispatch_key must be a non-empty name"},
        BadRegistration{"OffAllowlist", "d", "_native", "some_op", "CPU", true, false, true,
                        "is not overridable"},
        BadRegistration{"OtherNamespace", "d", "prims", "mul", "CPU", true, false, true,
                        "lib_symbol='prims' is not overridable"},
        BadRegistration{"NoCond", "d", "aten", "mul.Tensor", "CPU", false, false, true,
                        "cond must be provided"},
        BadRegistration{"UnconditionalWithRuntime", "d", "aten", "mul.Tensor", "CPU", false,
                        true, true,
                        "try_initialize_runtime cannot be provided"},
        BadRegistration{"NoImpl", "d", "aten", "mul.Tensor", "CPU", true, false, false,
                        "impl must be provided"},
        BadRegistration{"EmptyDsl", "", "aten", "mul.Tensor", "CPU", true, false, true,
                        "dsl_name must be a non-empty name, got ''"},
        BadRegistration{"BlankDsl", " \t", "aten", "mul.Tensor", "CPU", true, false, true,
                        "dsl_name must be a non-empty name"},
        BadRegistration{"EmptyOp", "d", "aten", "", "CPU", true, false, true,
                        "op_symbol must be a non-empty name"},
        BadRegistration{"QualifiedOp", "d", "aten", "aten::mul", "CPU", true, false, true,
                        "op_symbol='aten::mul' is not an op symbol"},
        BadRegistration{"DanglingOverload", "d", "aten", "mul.", "CPU", true, false, true,
                        "op_symbol='mul.'"},
        BadRegistration{"EmptyLib", "d", "", "mul.Tensor", "CPU", true, false, true,
                        "lib_symbol must be a non-empty name"},
        BadRegistration{"NonAsciiOp", "d", "aten", "m\xc3\xbcl", "CPU", true, false, true,
                        "op_symbol='m\\xc3\\xbcl'"}),
    [](const ::testing::TestParamInfo<BadRegistration>& info) { return info.param.label; });

TEST_F(RegistrationTest, UnicodeAndLongDslNamesAreAcceptedAndGiveValidNativeNames) {
  const std::string unicode = "d\xc3\xa9j\xc3\xa0-vu dsl";
  const std::string long_name(500, 'x');
  auto a = register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, unicode);
  auto b = register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, long_name);
  EXPECT_EQ(a->dsl_name, unicode);
  for (const NodePtr& node : {a, b}) {
    EXPECT_LT(node->node_id.size(), 160u);
    for (char c : node->node_id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  }
  registry().install_graph(mul_cpu());  // the `_native` ops define under these names
  EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({"_native::" + a->node_id, ""}));
}

TEST_F(RegistrationTest, AllowlistStartsWithAtenAndOptsInPerNamespace) {
  EXPECT_EQ(registry().allowed_namespaces(), std::set<std::string>{"aten"});
  EXPECT_FALSE(registry().is_namespace_allowed("_native"));
  registry().allow_namespace(fixtures::kTestNamespace);
  EXPECT_TRUE(registry().is_namespace_allowed(fixtures::kTestNamespace));
  EXPECT_NO_THROW(registry().register_op_override("d", fixtures::kTestNamespace, "twice",
                                                  "CPU", constant_cond(true), fill_impl(1)));
  registry().disallow_namespace(fixtures::kTestNamespace);
  EXPECT_THROW(registry().register_op_override("d", fixtures::kTestNamespace, "twice", "CPU",
                                               constant_cond(true), fill_impl(1)),
               InvalidArgumentError);
}

TEST_F(RegistrationTest, NativeNamespaceCanNeverBeAllowed) {
  try {
    registry().allow_namespace("_native");
    FAIL() << "_native was allowed";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'_native' can never be overridable"));
  }
  EXPECT_FALSE(registry().is_namespace_allowed("_native"));
  EXPECT_THROW(registry().allow_namespace("a::b"), InvalidArgumentError);
  EXPECT_THROW(registry().allow_namespace(""), InvalidArgumentError);
}

TEST_F(RegistrationTest, DslOperationsAreReportedPerNamespace) {
  register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true), fill_impl(1));
  register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  register_override(bmm_cpu(), constant_cond(true), fill_impl(1));
  register_override(bmm_cpu(), constant_cond(true), fill_impl(1));
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "other_dsl");
  EXPECT_THAT(registry().get_dsl_operations("test_dsl"), ElementsAre("bmm", "mul.Tensor"));
  EXPECT_THAT(registry().get_dsl_operations("test_dsl", fixtures::kTestNamespace),
              ElementsAre("twice"));
  EXPECT_THAT(registry().get_dsl_operations("other_dsl"), ElementsAre("mul.Tensor"));
  EXPECT_TRUE(registry().get_dsl_operations("unknown").empty());
}

TEST_F(RegistrationTest, GraphKeysCarryTheNamespace) {
  const GraphKey key = twice_cpu(fixtures::kTestNamespace);
  auto node = register_override(key, constant_cond(true), fill_impl(1));
  EXPECT_EQ(node->key.lib_symbol, fixtures::kTestNamespace);
  EXPECT_THAT(registry().graph_keys(), ElementsAre(key));
  EXPECT_EQ(key.to_string(), std::string(fixtures::kTestNamespace) + "::twice/CPU");
}

// The binding's write of a node's field never changes the unconditional
// flag (its Python view refuses first); the C++ entry refuses it too, and the
// graph keeps the node it had.
TEST_F(RegistrationTest, NewCallablesCannotChangeTheUnconditionalFlag) {
  const NodePtr node = register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  try {
    registry().replace_node_callables(*node, constant_cond(true), fill_impl(2), unconditional);
    ADD_FAILURE() << "replace_node_callables changed unconditional_override";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot change unconditional_override"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr(node->node_id));
  }
  ASSERT_EQ(registry().graph(mul_cpu()).size(), 1u);
  EXPECT_EQ(registry().graph(mul_cpu()).at(0), node);
}

// New callables are checked as registration checks them (an impl always, a
// cond unless the node is unconditional), changing nothing when refused; an
// unconditional node given no cond gets the always-true one.
TEST_F(RegistrationTest, NewCallablesAreCheckedAsRegistrationChecksThem) {
  const NodePtr node = register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  EXPECT_THAT([&] { registry().replace_node_callables(*node, constant_cond(true), ImplFn{}, {}); },
              ::testing::ThrowsMessage<InvalidArgumentError>(
                  ::testing::HasSubstr("impl must be provided")));
  EXPECT_THAT([&] { registry().replace_node_callables(*node, CondFn{}, fill_impl(2), {}); },
              ::testing::ThrowsMessage<InvalidArgumentError>(
                  ::testing::HasSubstr("cond must be provided")));
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(node));

  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  const NodePtr always = register_override(bmm_cpu(), nullptr, fill_impl(1), unconditional);
  const NodePtr replaced = registry().replace_node_callables(*always, CondFn{}, fill_impl(3), unconditional);
  ASSERT_TRUE(static_cast<bool>(replaced->cond));
  const c10::OperatorHandle bmm = *c10::Dispatcher::singleton().findSchema({"aten::bmm", ""});
  EXPECT_TRUE(replaced->cond(bmm, c10::DispatchKeySet(c10::DispatchKey::CPU), Stack{}));
}

// Only a node its graph holds can take new callables: one reordered out of
// a graph that still has others, one whose graph was erased, and one of
// another registry under the same key are refused, the graph unchanged.
TEST_F(RegistrationTest, NewCallablesAreRefusedForANodeTheGraphNoLongerHolds) {
  const NodePtr out = register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  const NodePtr kept = register_override(mul_cpu(), constant_cond(false), fill_impl(2));
  const NodePtr erased = register_override(bmm_cpu(), constant_cond(false), fill_impl(3));
  Registry other;
  const NodePtr foreign = other.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                                                     constant_cond(false), fill_impl(4));
  registry().replace_graph(mul_cpu(), {kept});
  registry().erase_graph(bmm_cpu());
  for (const NodePtr& node : {out, erased, foreign}) {
    EXPECT_THAT([&] { registry().replace_node_callables(*node, constant_cond(true), fill_impl(5), {}); },
                ::testing::ThrowsMessage<InvalidArgumentError>(HasSubstr("is not in the graph")))
        << node->node_id;
  }
  EXPECT_THAT(registry().graph(mul_cpu()), ElementsAre(kept));
  EXPECT_TRUE(registry().graph(bmm_cpu()).empty());
  registry().check_invariants();
}

// A node's `_native` op name comes from a serial and its op and dsl, and is
// one no op in the dispatcher has yet: a name taken by someone else (here the
// one the next registration would mint) is passed over.
TEST_F(RegistrationTest, ANodeIdPassesOverANativeOpNameAlreadyDefined) {
  const NodePtr first = register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  const std::string prefix = "nr";
  ASSERT_EQ(first->node_id.rfind(prefix, 0), 0u) << first->node_id;
  const size_t end = first->node_id.find('_');
  const uint64_t serial = std::stoull(first->node_id.substr(prefix.size(), end - prefix.size()));
  const std::string taken = prefix + std::to_string(serial + 1) + first->node_id.substr(end);
  torch::Library squatter(torch::Library::FRAGMENT, "_native", std::nullopt, __FILE__, __LINE__);
  squatter.def((taken + "(Tensor self, Tensor other) -> Tensor").c_str());
  const NodePtr second = register_override(mul_cpu(), constant_cond(false), fill_impl(2));
  EXPECT_NE(second->node_id, taken);
  EXPECT_FALSE(c10::Dispatcher::singleton().findOp({"_native::" + second->node_id, ""}).has_value());
}

// A node made by hand carries registry_serial 0, which no registry has:
// each of the first registries a fresh process makes refuses it as
// another's. (Serials that counted down would give the process's second
// registry 0, and it would take the stranger for its own.) In a death test's
// child: a fresh process, where no test made registries before.
TEST(RegistrySerialTest, NoRegistryOfAFreshProcessTakesAHandMadeNodeForItsOwn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        for (int i = 0; i < 3; ++i) {
          Registry registry;
          auto node = std::make_shared<OverrideNode>();
          node->dsl_name = "hand";
          node->key = mul_cpu();
          node->cond = constant_cond(true);
          node->impl = fill_impl(1);
          node->node_id = "hand_made_" + std::to_string(i);
          node->counters = std::make_shared<NodeCounters>();
          try {
            registry.replace_graph(mul_cpu(), {node});
            std::_Exit(1 + i);  // registry i took it for its own
          } catch (const InvalidArgumentError&) {
          }
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace native_registry::testing
