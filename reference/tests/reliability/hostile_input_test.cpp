// Hostile input through the C++ API, beyond what registration_test.cpp and
// ordering_test.cpp already pin: names with NULs, control bytes, non-ASCII,
// "ns::op" and 100,000 characters in every field; dispatch keys that are
// misspelt, padded, non-runtime or fallthrough; keys handed straight to
// install_graph; filters naming nothing; snapshots of a registry that is gone;
// conds and impls that throw, leave the stack wrong, or change the registry
// from inside a call. Each is refused with an error naming what is wrong, or
// behaves as documented, and registry and dispatcher stay as they were.

#include "observed.h"

#include <ATen/ops/sum.h>

#include <optional>

namespace native_registry::testing {
namespace {

using ::testing::HasSubstr;

const std::string kLong(100000, 'a');
const std::string kNul("at\0en", 5);

class HostileInputTest : public RegistryTest {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    // State that must survive every refused call untouched.
    register_override(mul_cpu(), constant_cond(false), fill_impl(1), {}, "resident");
    registry().install_graph(mul_cpu());
  }
};

// ---- names --------------------------------------------------------------------

struct HostileName {
  std::string label;
  std::string dsl = "d", lib = "aten", op = "mul.Tensor", key = "CPU";
  std::string field;  // the error must name it
};

void PrintTo(const HostileName& bad, std::ostream* out) { *out << bad.label; }

class HostileNameTest : public HostileInputTest,
                        public ::testing::WithParamInterface<HostileName> {};

TEST_P(HostileNameTest, RefusedNamingTheFieldAndNothingChanges) {
  const HostileName& bad = GetParam();
  const std::string before = observe(registry());
  const auto tables = dispatcher_now();
  try {
    registry().register_op_override(bad.dsl, bad.lib, bad.op, bad.key, constant_cond(true),
                                    fill_impl(2));
    FAIL() << "accepted " << bad.label;
  } catch (const InvalidArgumentError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr(bad.field));
    EXPECT_TRUE(printable(message)) << "raw bytes in: " << message.substr(0, 200);
  }
  EXPECT_EQ(observe(registry()), before);
  EXPECT_EQ(dispatcher_now().difference(tables), "");
}

std::vector<HostileName> hostile_names() {
  std::vector<HostileName> names;
  // One bad value in one field, the others valid.
  auto bad = [&](std::string HostileName::*member, const char* field) {
    return [&names, member, field](std::string label, std::string value) {
      HostileName n;
      n.label = std::move(label);
      n.*member = std::move(value);
      n.field = field;
      names.push_back(n);
    };
  };
  auto lib = bad(&HostileName::lib, "lib_symbol");
  auto op = bad(&HostileName::op, "op_symbol");
  auto key = bad(&HostileName::key, "dispatch_key");
  lib("LibQualified", "aten::x");
  lib("LibDotted", "aten.x");
  lib("LibSpace", "at en");
  lib("LibNewline", "\n");
  lib("LibUnicode", "at\xc3\xa9n");
  lib("LibNul", kNul);
  lib("LibInvalidUtf8", "\xff\xfe");
  lib("LibLeadingDigit", "1aten");
  lib("LibVeryLongQualified", kLong + "::mul");
  op("OpTwoOverloads", "mul.Tensor.out");
  op("OpNoName", ".Tensor");
  op("OpDoubleDot", "mul..Tensor");
  op("OpInnerSpace", "mul.Ten sor");
  op("OpNul", std::string("mul\0.Tensor", 11));
  op("OpDash", "mul-Tensor");
  op("OpLeadingDigit", "9mul");
  op("OpQualifiedOverload", "aten::mul.Tensor");
  op("OpUnicodeOverload", "mul.T\xc3\xa9nsor");
  op("OpVeryLongQualified", kLong + "::" + kLong);
  key("KeyLowercase", "cpu");
  key("KeyLeadingSpace", " CPU");
  key("KeyTrailingNewline", "CPU\n");
  key("KeyNul", std::string("CPU\0", 4));
  key("KeyFullwidth", "\xef\xbc\xa3\xef\xbc\xb0\xef\xbc\xb5");
  key("KeyVeryLong", kLong);
  key("KeyRangeMarker", "EndOfDenseBackends");
  key("KeyAliasNested", "CompositeImplicitAutogradNestedTensor");
  key("KeyAliasNonFunctional", "CompositeExplicitAutogradNonFunctional");
  key("KeyAliasBatchedDecomposition", "FuncTorchBatchedDecomposition");
  key("KeyNamespaced", "aten::CPU");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Hostile, HostileNameTest, ::testing::ValuesIn(hostile_names()),
                         [](const auto& info) { return info.param.label; });

TEST_F(HostileInputTest, DslNamesAreFreeTextEvenWithNulsAndControlBytes) {
  const std::vector<std::string> odd{std::string("d\0sl", 4), "line\nbreak", "\x01\x7f",
                                     "\xff\xfe not utf-8", kLong};
  std::vector<NodePtr> nodes;
  for (const std::string& dsl : odd) {
    nodes.push_back(register_override(bmm_cpu(), constant_cond(false), fill_impl(1), {}, dsl));
  }
  registry().install_graph(bmm_cpu());  // their `_native` ops are defined under minted names
  for (size_t i = 0; i < odd.size(); ++i) {
    EXPECT_EQ(nodes[i]->dsl_name, odd[i]);
    EXPECT_LT(nodes[i]->node_id.size(), 160u);
    EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({"_native::" + nodes[i]->node_id, ""}));
    EXPECT_EQ(registry().get_dsl_operations(odd[i]), std::vector<std::string>{"bmm"});
  }
  // Filtering by such a name works like any other.
  registry().deregister_op_overrides({{odd[0], kLong}, {}, {}});
  EXPECT_EQ(registry().published_chain(bmm_cpu()).size(), odd.size() - 2);
}

TEST_F(HostileInputTest, ValidNamesOfOpsThatDoNotExistFailAtInstallAndChangeNothing) {
  registry().allow_namespace(kLong);  // a valid, absurd namespace
  register_override({kLong, "op", "CPU"}, constant_cond(true), fill_impl(1));
  register_override({"aten", kLong, "CPU"}, constant_cond(true), fill_impl(1));
  register_override({"aten", "mul.NoSuchOverload", "CPU"}, constant_cond(true), fill_impl(1));
  const std::string before = observe(registry());
  const auto tables = dispatcher_now();
  for (const GraphKey& key : registry().graph_keys()) {
    if (key == mul_cpu()) continue;
    for (InstallMode mode : {InstallMode::kUpdate, InstallMode::kReinstall}) {
      try {
        registry().install_graph(key, mode);
        FAIL() << "installed " << key.to_string().substr(0, 80);
      } catch (const OperatorNotFoundError& e) {
        EXPECT_THAT(e.what(), HasSubstr("not found"));
        EXPECT_TRUE(printable(e.what()));
      }
    }
  }
  EXPECT_THROW(registry().install_all(), OperatorNotFoundError);
  EXPECT_EQ(observe(registry()), before);
  EXPECT_EQ(dispatcher_now().difference(tables), "");
}

TEST_F(HostileInputTest, InstallGraphRefusesMalformedKeys) {
  const std::string before = observe(registry());
  const Snapshot snapshot = registry().snapshot();
  const std::vector<GraphKey> malformed{{"aten", "mul.Tensor", "NotAKey"},
                                        {"aten", "mul.Tensor", "Meta"},
                                        {"aten", "mul.Tensor", "Autograd"},
                                        {"aten", "aten::mul", "CPU"},
                                        {"aten::x", "mul.Tensor", "CPU"},
                                        {"", "", ""},
                                        {kNul, "mul.Tensor", "CPU"}};
  for (const GraphKey& key : malformed) {
    EXPECT_THROW(registry().install_graph(key), InvalidArgumentError)
        << "install_graph took " << key.to_string();
  }
  EXPECT_EQ(observe(registry()), before);
  // Nothing was recorded either: a later restore to this point changes nothing.
  const auto tables = dispatcher_now();
  registry().restore(snapshot);
  EXPECT_EQ(observe(registry()), before);
  EXPECT_EQ(dispatcher_now().difference(tables), "");
}

// A graph of an op the dispatcher lacks can be installed while its chain is
// empty (install_all does so for every graph). A later change that gives it a
// chain needs a router, cannot have one, and must fail before changing
// anything: filters, graph order and the other graphs' routers included.
class MissingOpTest : public HostileInputTest {
 protected:
  void SetUp() override {
    HostileInputTest::SetUp();
    register_override(missing_, constant_cond(true), fill_impl(1), {}, "sleeper");
    register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "sleeper");
    registry().deregister_op_overrides({{"sleeper"}, {}, {}});
    registry().install_all();  // fine: the missing op's chain is empty
    ASSERT_EQ(registry().router_state(missing_), RouterState::kAbsent);
  }
  void expect_refused_and_unchanged(const std::function<void()>& act) {
    const std::string before = observe(registry());
    const auto tables = dispatcher_now();
    EXPECT_THROW(act(), OperatorNotFoundError);
    EXPECT_EQ(observe(registry()), before);
    EXPECT_EQ(dispatcher_now().difference(tables), "");
  }
  // Sorts after aten::mul.Tensor, so a change that published graph by graph
  // would have republished mul's router before reaching it.
  const GraphKey missing_{"aten", "zz_no_such_op", "CPU"};
};

TEST_F(MissingOpTest, ReenableFailsBeforeChangingFiltersOrRouters) {
  expect_refused_and_unchanged(
      [&] { registry().reenable_op_overrides({{"sleeper"}, {}, {}}); });
  // A disable can give a graph its first published chain too: a node
  // registered since install that the disable leaves enabled.
  register_override(missing_, constant_cond(true), fill_impl(3), {}, "newcomer");
  expect_refused_and_unchanged(
      [&] { registry().deregister_op_overrides({{"sleeper"}, {}, {}}); });
  // The unconditional mask publishes only the graphs it changes, those
  // holding an unconditional node the filters name: none yet, so it needs
  // no op and changes nothing.
  const std::string before = observe(registry());
  { const Registry::UnconditionalMask mask(registry()); }
  EXPECT_EQ(observe(registry()), before);
  // With one at the missing op's graph it must publish that graph, whose
  // chain needs a router: refused, unchanged.
  OverrideOptions unconditional;
  unconditional.unconditional_override = true;
  register_override(missing_, CondFn{}, fill_impl(4), unconditional, "sleeper");
  expect_refused_and_unchanged(
      [&] { Registry::UnconditionalMask mask(registry()); });
}

TEST_F(MissingOpTest, ReorderWithReinstallFailsBeforeChangingAnyGraph) {
  registry().reenable_op_overrides({{}, {}, {}});
  register_override(missing_, constant_cond(true), fill_impl(3), {}, "awake");
  register_override(mul_cpu(), constant_cond(true), fill_impl(4), {}, "awake");
  auto reverse = [](const std::string&, const std::string&, const Graph& g) {
    return Graph(g.rbegin(), g.rend());
  };
  expect_refused_and_unchanged([&] { registry().reorder_graphs(reverse, true); });
  // Without reinstall nothing is published, so nothing can fail.
  registry().reorder_graphs(reverse, false);
  EXPECT_EQ(registry().graph(missing_).back()->dsl_name, "sleeper");
}

TEST_F(HostileInputTest, FilterEntriesThatNameNothingChangeNoRouting) {
  const Graph chain = registry().published_chain(mul_cpu());
  const Filter nothing{{kLong, "\xc3\xa9", std::string("re\0sident", 9)},
                       {"aten::mul.Tensor", "mul", "MUL.TENSOR"},
                       {"cpu", "NotAKey"}};
  registry().deregister_op_overrides(nothing);
  EXPECT_EQ(registry().published_chain(mul_cpu()), chain);
  EXPECT_EQ(registry().filters().dispatch_keys, (std::vector<std::string>{"NotAKey", "cpu"}));
  registry().reenable_op_overrides(nothing);
  EXPECT_TRUE(registry().filters().dsl_names.empty());
  EXPECT_TRUE(registry().filters().op_symbols.empty());
  EXPECT_TRUE(registry().filters().dispatch_keys.empty());
  EXPECT_EQ(registry().published_chain(mul_cpu()), chain);
}

TEST_F(HostileInputTest, OrderingJunkOnOneGraphLeavesTheOthersAndTheRouterAlone) {
  auto first = register_override(mul_cpu(), constant_cond(true), fill_impl(5), {}, "later");
  registry().install_graph(mul_cpu());
  auto b1 = register_override(bmm_cpu(), constant_cond(true), fill_impl(1));
  auto b2 = register_override(bmm_cpu(), constant_cond(true), fill_impl(2));
  const Graph mul_graph = registry().graph(mul_cpu());
  const Graph mul_chain = registry().published_chain(mul_cpu());
  registry().reorder_graphs(
      [&](const std::string& op, const std::string&, const Graph& g) -> Graph {
        if (op == "bmm") return {b2, b1};
        return {g[0], b1, nullptr, g[0]};  // foreign, null and twice at once
      },
      /*reinstall=*/true);
  EXPECT_EQ(registry().graph(mul_cpu()), mul_graph);
  EXPECT_EQ(registry().published_chain(mul_cpu()), mul_chain);
  EXPECT_EQ(registry().graph(bmm_cpu()), (Graph{b2, b1}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("Graph transformation failed for aten::mul.Tensor/CPU"));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({5})));
  (void)first;
}

TEST_F(HostileInputTest, SnapshotOfARegistryThatIsGoneIsRefused) {
  // The same storage holds two registries in turn, so the second sits at the
  // first one's address.
  std::optional<Registry> slot;
  slot.emplace();
  slot->register_op_override("gone", "aten", "mul.Tensor", "CPU", constant_cond(true),
                             fill_impl(3));
  const Snapshot of_first = slot->snapshot();
  slot.reset();
  slot.emplace();
  const auto tables = dispatcher_now();
  try {
    slot->restore(of_first);
    FAIL() << "restored a snapshot of a registry that no longer exists";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("another registry"));
  }
  EXPECT_TRUE(slot->graph_keys().empty());
  EXPECT_EQ(dispatcher_now().difference(tables), "");
}

// ---- conds and impls -----------------------------------------------------------

TEST_F(HostileInputTest, ACondThrowingANonStandardExceptionReachesTheCaller) {
  CondFn cond = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
    throw 42;
  };
  register_override(mul_cpu(), cond, fill_impl(2), {}, "thrower");
  registry().install_graph(mul_cpu());
  const std::string before = observe(registry());
  for (int i = 0; i < 3; ++i) {
    try {
      call_mul(tensor({2}), tensor({4}));
      FAIL() << "no exception";
    } catch (int value) {
      EXPECT_EQ(value, 42);
    }
  }
  EXPECT_EQ(observe(registry()), before);
  registry().deregister_op_overrides({{"thrower"}, {}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
}

// Impls that break the boxed-kernel contract: the result count is checked
// where the router hands the stack back, on the typed and the boxed path.
struct BadImpl {
  std::string label;
  std::function<void(Stack*, size_t arity)> act;
};

void PrintTo(const BadImpl& bad, std::ostream* out) { *out << bad.label; }

class BadImplTest : public HostileInputTest,
                    public ::testing::WithParamInterface<BadImpl> {};

TEST_P(BadImplTest, IsAnErrorAtTheCallAndChangesNothing) {
  const auto act = GetParam().act;
  ImplFn impl = [act](const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    act(stack, op.schema().arguments().size());
  };
  const GraphKey sum_cpu{"aten", "sum", "CPU"};  // Tensor(Tensor, ScalarType?): boxed
  register_override(mul_cpu(), constant_cond(true), impl, {}, "bad");
  register_override(sum_cpu, constant_cond(true), impl, {}, "bad");
  registry().install_all();
  const std::string before = observe(registry());
  for (const char* op : {"mul", "sum"}) {
    try {
      const at::Tensor out = std::string(op) == "mul" ? call_mul(tensor({2}), tensor({4}))
                                                      : at::sum(tensor({2, 3}));
      FAIL() << op << " returned " << out;
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("values on the stack"),
                                             HasSubstr("Expected Tensor")))
          << op;
    }
  }
  EXPECT_EQ(observe(registry()), before);
  registry().deregister_op_overrides({{"bad"}, {}, {}});
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(at::sum(tensor({2, 3})).item<float>(), 5.f);
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, BadImplTest,
    ::testing::Values(
        BadImpl{"PushesNothing", [](Stack* s, size_t arity) { torch::jit::drop(*s, arity); }},
        BadImpl{"LeavesTheArguments", [](Stack*, size_t) {}},
        BadImpl{"PushesTwoResults",
                [](Stack* s, size_t arity) {
                  at::Tensor first = (*s)[s->size() - arity].toTensor();
                  torch::jit::drop(*s, arity);
                  s->emplace_back(first);
                  s->emplace_back(first);
                }},
        BadImpl{"PushesAnInt",
                [](Stack* s, size_t arity) {
                  torch::jit::drop(*s, arity);
                  s->emplace_back(int64_t{7});
                }}),
    [](const auto& info) { return info.param.label; });

TEST_F(HostileInputTest, ACondThatDisablesItsOwnDslFinishesTheCallOnTheOldChain) {
  // The control plane entered from inside a call: under the default policy
  // the router stays, the running call keeps the chain it loaded.
  Registry* self = &registry();
  CondFn cond = [self](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    self->deregister_op_overrides({{"suicidal"}, {}, {}});
    return true;
  };
  register_override(mul_cpu(), cond, fill_impl(6), {}, "suicidal");
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({6})));
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({8})));
  EXPECT_EQ(registry().published_chain(mul_cpu()).size(), 1u);  // the resident node
}

TEST_F(HostileInputTest, AnImplThatCallsItsOwnOpGoesThroughTheRouterAgain) {
  auto depth = std::make_shared<int>(0);
  ImplFn impl = [depth](const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    ++*depth;
    if (*depth == 1) {
      op.callBoxed(stack);  // re-enters the router, which takes it again
    } else {
      fill_impl(9)(op, {}, stack);
    }
    --*depth;
  };
  register_override(mul_cpu(), constant_cond(true), impl, {}, "recursive");
  registry().install_graph(mul_cpu());
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({9})));
  EXPECT_EQ(*depth, 0);
}

// ---- keys whose kernel before the router was a fallthrough ---------------------

class FallthroughKeyTest : public HostileInputTest,
                           public ::testing::WithParamInterface<std::string> {};

TEST_P(FallthroughKeyTest, DeclinedCallsGoOnAsIfTheKeyWereSkipped) {
  const GraphKey key{"aten", "mul.Tensor", GetParam()};
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  // The premise: before the router, the dispatcher skips this key for mul.
  ASSERT_THAT(op.dumpComputedTable(), HasSubstr(GetParam() + ": fallthrough "));
  auto answer = std::make_shared<std::atomic<bool>>(false);
  CondFn cond = [answer](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    return answer->load();
  };
  register_override(key, cond, fill_impl(4), {}, "at_fallthrough");
  registry().install_graph(key);
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
  answer->store(true);
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({4, 4})));
}

INSTANTIATE_TEST_SUITE_P(Hostile, FallthroughKeyTest,
                         ::testing::Values("BackendSelect", "ADInplaceOrView"));

}  // namespace
}  // namespace native_registry::testing
