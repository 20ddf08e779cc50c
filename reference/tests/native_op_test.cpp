// The `_native::<node_id>` ops: cloned schema, impl at the override's key, a
// Meta kernel that shape-infers through the target without running the impl
// or initialising a runtime, and their removal at teardown.

#include "support.h"

#include "../src/names.h"
#include "../src/native_op_table.h"
#include "../src/retired_native_ops.h"

#include <ATen/ops/empty.h>
#include <native_registry/backend_select.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <typeinfo>

namespace native_registry::testing {
namespace {

class NativeOpTest : public RegistryTest {
 protected:
  // An override's `_native` op held (as a torch.ops object holds it) past a
  // teardown to `empty_`, a snapshot of before it: kept, raising.
  NodePtr kept_past_a_teardown() {
    empty_ = registry().snapshot();
    auto node = register_override(mul_cpu(), constant_cond(false), fill_impl(3));
    registry().install_graph(mul_cpu());
    held_ = hold_native_op(node->node_id);
    EXPECT_TRUE(held_);
    registry().restore(empty_);
    return node;
  }

  Snapshot empty_;
  std::shared_ptr<const c10::OperatorHandle> held_;
};

std::optional<c10::OperatorHandle> native_op(const OverrideNode& node) {
  return c10::Dispatcher::singleton().findSchema({"_native::" + node.node_id, ""});
}

TEST_F(NativeOpTest, DefinedAtInstallWithTheTargetsSchema) {
  auto node = register_override(mul_cpu(), constant_cond(true), fill_impl(1));
  EXPECT_FALSE(native_op(*node)) << "defined at registration";
  registry().install_graph(mul_cpu());
  auto op = native_op(*node);
  ASSERT_TRUE(op);
  const auto target = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  EXPECT_EQ(op->schema().arguments(), target.schema().arguments());
  EXPECT_EQ(op->schema().returns(), target.schema().returns());
  EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::Meta));
  EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::CPU));
}

TEST_F(NativeOpTest, CallingItAtTheOverrideKeyRunsTheImpl) {
  auto node = register_override(mul_cpu(), constant_cond(false), fill_impl(6));
  registry().install_graph(mul_cpu());
  Stack stack{tensor({1, 2}), tensor({3, 4})};
  native_op(*node)->callBoxed(&stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_TRUE(same(stack[0].toTensor(), tensor({6, 6})));
}

TEST_F(NativeOpTest, MetaInferenceRunsNeitherImplNorRuntime) {
  MockImpl impl;
  EXPECT_CALL(impl, Call()).Times(0);
  ::testing::MockFunction<bool()> runtime;
  EXPECT_CALL(runtime, Call()).Times(0);
  OverrideOptions options;
  options.try_initialize_runtime = runtime.AsStdFunction();
  auto node = register_override(mul_cpu(), constant_cond(true), impl_from(impl, 1), options);
  registry().install_graph(mul_cpu());

  const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kFloat);
  Stack stack{at::empty({3, 4}, meta), at::empty({3, 4}, meta)};
  native_op(*node)->callBoxed(&stack);
  const at::Tensor out = stack.at(0).toTensor();
  EXPECT_TRUE(out.is_meta());
  EXPECT_EQ(out.sizes(), at::IntArrayRef({3, 4}));
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  // The target op itself on meta inputs never reaches the CPU router.
  const at::Tensor direct = call_mul(at::empty({2, 5}, meta), at::empty({2, 5}, meta));
  EXPECT_EQ(direct.sizes(), at::IntArrayRef({2, 5}));
}

TEST_F(NativeOpTest, MetaInferenceWorksForACompositeOnlyOp) {
  auto node = register_override(twice_cpu(fixtures::kTestNamespace), constant_cond(true),
                                forbidden_impl());
  registry().install_graph(twice_cpu(fixtures::kTestNamespace));
  const auto meta = at::TensorOptions().device(at::kMeta);
  Stack stack{at::empty({7}, meta)};
  native_op(*node)->callBoxed(&stack);
  EXPECT_EQ(stack.at(0).toTensor().sizes(), at::IntArrayRef({7}));
}

// Restore retires the `_native` ops of nodes registered since: still
// defined (a program recorded with one holds its handle, and an undefined op
// would leave that handle dangling), but every call raises an error naming
// the override that is gone; the op of a node kept still runs its impl, and a
// restore to a snapshot taken while the op was active brings it back.
TEST_F(NativeOpTest, RestoreRetiresOpsOfNodesRegisteredSince) {
  auto kept = register_override(mul_cpu(), constant_cond(false), fill_impl(1));
  registry().install_graph(mul_cpu());
  const Snapshot snapshot = registry().snapshot();
  auto added = register_override(mul_cpu(), constant_cond(false), fill_impl(2));
  registry().install_graph(mul_cpu());
  const Snapshot with_added = registry().snapshot();
  // Held, as a program recorded with it holds it: retired, not undefined.
  auto added_op = hold_native_op(added->node_id);
  ASSERT_TRUE(added_op);
  registry().restore(snapshot);

  for (const auto device : {at::kCPU, at::kMeta}) {
    Stack stack{at::empty({2}, at::TensorOptions().device(device)),
                at::empty({2}, at::TensorOptions().device(device))};
    try {
      added_op->callBoxed(&stack);
      ADD_FAILURE() << "a retired _native op ran on " << device;
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("override " + added->node_id));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("is gone"));
    }
  }
  Stack stack{tensor({2}), tensor({4})};
  native_op(*kept)->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({1})));

  registry().restore(with_added);
  Stack again{tensor({2}), tensor({4})};
  added_op->callBoxed(&again);
  EXPECT_TRUE(same(again.at(0).toTensor(), tensor({2})));
  registry().restore(snapshot);
  registry().check_invariants();
}

// A retired op nothing holds leaves the dispatcher at the teardown that
// retires it; a restore to a snapshot taken while it was active defines it
// again, running its impl.
TEST_F(NativeOpTest, RestoreUndefinesRetiredOpsNothingHolds) {
  const Snapshot empty = registry().snapshot();
  auto node = register_override(mul_cpu(), constant_cond(false), fill_impl(3));
  registry().install_graph(mul_cpu());
  const Snapshot installed = registry().snapshot();
  ASSERT_TRUE(native_op(*node));
  registry().restore(empty);
  EXPECT_FALSE(native_op(*node)) << "a retired op nothing holds is still defined";
  registry().check_invariants();
  registry().restore(installed);
  auto op = native_op(*node);
  ASSERT_TRUE(op);
  Stack stack{tensor({2}), tensor({4})};
  op->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({3})));
  registry().restore(empty);
  EXPECT_FALSE(native_op(*node));
}

// A registry's destruction retires its ops as restore does: one held past it
// is kept, raising the teardown's error, until let go.
TEST_F(NativeOpTest, AnOpHeldPastItsRegistrysDestructionIsKeptRaising) {
  auto doomed = std::make_unique<Registry>();
  const NodePtr node = doomed->register_op_override("d", "aten", "mul.Tensor", "CPU",
                                                    constant_cond(false), fill_impl(3));
  doomed->install_graph(mul_cpu());
  auto held = hold_native_op(node->node_id);
  ASSERT_TRUE(held);
  doomed.reset();
  ASSERT_TRUE(native_op(*node)) << "undefined under its holder";
  Stack stack{tensor({2}), tensor({4})};
  try {
    held->callBoxed(&stack);
    ADD_FAILURE() << "the op held past its registry's destruction still ran";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the registry's teardown"));
  }
  held.reset();
  { Registry sweeper; }
  EXPECT_FALSE(native_op(*node)) << "let go, but kept past a registry's destruction";
}

// Tells whether a `_native` op still had its raising kernel when the
// dispatcher told its listeners the op was leaving.
class KernelAtDeregistration : public c10::OpRegistrationListener {
 public:
  KernelAtDeregistration(std::string name, std::shared_ptr<std::vector<bool>> seen)
      : name_(std::move(name)), seen_(std::move(seen)) {}
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    if (op.operator_name().name == name_) {
      seen_->push_back(op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd));
    }
  }

 private:
  std::string name_;
  std::shared_ptr<std::vector<bool>> seen_;
};

// A kept op leaves the dispatcher whole: its raising kernel goes before its
// definition, so a registration listener told of its leaving finds no kernel.
TEST_F(NativeOpTest, AKeptOpLeavesTheDispatcherKernelFirst) {
  auto node = kept_past_a_teardown();  // kept, raising
  auto seen = std::make_shared<std::vector<bool>>();
  {
    auto listening = c10::Dispatcher::singleton().addRegistrationListener(
        std::make_unique<KernelAtDeregistration>("_native::" + node->node_id, seen));
    held_.reset();
    registry().restore(empty_);  // the teardown's sweep undefines it
  }
  ASSERT_EQ(seen->size(), 1u) << "the op's leaving was not told";
  EXPECT_FALSE(seen->at(0)) << "the op's definition went before its raising kernel";
}

// Held past its teardown, an op is kept (raising) until the holder lets go;
// the next teardown then undefines it.
TEST_F(NativeOpTest, AHeldRetiredOpIsUndefinedOnceReleased) {
  auto node = kept_past_a_teardown();
  ASSERT_TRUE(native_op(*node));
  Stack stack{tensor({2}), tensor({4})};
  EXPECT_THROW(held_->callBoxed(&stack), c10::Error);
  registry().check_invariants();
  held_.reset();
  registry().restore(empty_);
  EXPECT_FALSE(native_op(*node)) << "released, but kept past the next teardown";
  EXPECT_FALSE(hold_native_op(node->node_id));
}

// A registry's destruction is a teardown too: it undefines the kept ops let
// go since, another registry's included.
TEST_F(NativeOpTest, ARegistrysDestructionUndefinesAKeptOpLetGo) {
  auto node = kept_past_a_teardown();
  held_.reset();
  ASSERT_TRUE(native_op(*node)) << "kept while held";
  { Registry other; }
  EXPECT_FALSE(native_op(*node)) << "let go, but kept past a registry's destruction";
}

// Counts the `_native` ops that leave the dispatcher while it lives.
class NativeOpDeregistrations : public c10::OpRegistrationListener {
 public:
  explicit NativeOpDeregistrations(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) {}
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    if (op.operator_name().name.rfind("_native::", 0) == 0) ++*count_;
  }

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

// A restore to a snapshot of now retires nothing: the `_native` op of an
// installed override stays defined throughout (a bare findSchema handle to it
// is valid while the override is installed, registry.h says), not undefined
// and defined again.
TEST_F(NativeOpTest, ARestoreThatChangesNothingLeavesTheNativeOpsDefined) {
  auto node = register_override(mul_cpu(), constant_cond(false), fill_impl(3));
  registry().install_graph(mul_cpu());
  ASSERT_TRUE(native_op(*node));
  auto deregistered = std::make_shared<std::atomic<int>>(0);
  {
    auto listening = c10::Dispatcher::singleton().addRegistrationListener(
        std::make_unique<NativeOpDeregistrations>(deregistered));
    registry().restore(registry().snapshot());
  }
  EXPECT_EQ(deregistered->load(), 0) << "the restore took the op out of the dispatcher";
  Stack stack{tensor({2}), tensor({4})};
  native_op(*node)->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({3})));
}

// A teardown retires an op a program still holds (kept, raising), but the
// retired op keeps nothing of its override: the node, and the callables it
// holds, are let go at the teardown as if the op were undefined.
TEST_F(NativeOpTest, ARetiredOpHeldPastItsTeardownKeepsNoneOfItsOverridesCallables) {
  const Snapshot empty = registry().snapshot();
  auto witness = std::make_shared<int>(0);
  std::weak_ptr<int> alive = witness;
  auto node = register_override(
      mul_cpu(),
      [witness](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return false; },
      fill_impl(3));
  witness.reset();
  registry().install_graph(mul_cpu());
  auto held = hold_native_op(node->node_id);
  ASSERT_TRUE(held);
  node.reset();
  registry().restore(empty);
  EXPECT_TRUE(alive.expired()) << "the retired op still holds its override's node";
  held.reset();
  registry().check_invariants();
}

// tensorless_backend takes one value per argument of the schema; any other
// count is its caller's mistake, a c10::Error naming both counts, not a
// type error (no value was of a wrong type).
TEST(TensorlessBackendTest, ACountOtherThanTheSchemasIsAnErrorNotATypeError) {
  const c10::OperatorHandle ones = c10::Dispatcher::singleton().findSchemaOrThrow("aten::ones", "");
  const std::vector<c10::IValue> all{c10::IValue(std::vector<int64_t>{2}), c10::IValue(),
                                     c10::IValue(), c10::IValue(), c10::IValue()};
  EXPECT_EQ(tensorless_backend(ones.schema(), all), c10::DispatchKey::CPU);
  const std::vector<c10::IValue> one{c10::IValue(std::vector<int64_t>{2})};
  try {
    tensorless_backend(ones.schema(), one);
    ADD_FAILURE() << "one value for five arguments was taken";
  } catch (const c10::Error& e) {
    // c10::Error itself: no subclass (a TypeError, ValueError, IndexError in
    // Python) fits a count its caller got wrong.
    EXPECT_EQ(typeid(e), typeid(c10::Error)) << "a " << typeid(e).name() << ": " << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("tensorless_backend: 1 arguments for the 5 of aten::ones"));
  }
}

// Takes the JIT operator LibTorch makes for each `_native` op right back out
// of the JIT's registry (it runs after LibTorch's own listener), as a
// LibTorch without the JIT's listener would leave it: no torch::jit::Operator.
class DropNativeJitOperators : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle& op) override {
    if (op.operator_name().name.rfind("_native::", 0) == 0) torch::jit::deregisterOperator(op.schema());
  }
  void onOperatorDeregistered(const c10::OperatorHandle&) override {}
};

// An op LibTorch made no operator for runs its impl, cannot be held from C++
// (a c10::Error naming it: not the caller's bad value), and leaves the
// dispatcher at its teardown (nothing can hold it) without a crash.
TEST_F(NativeOpTest, AnOpWithoutAJitOperatorRunsCannotBeHeldAndLeavesAtItsTeardown) {
  const Snapshot empty = registry().snapshot();
  NodePtr node;
  {
    auto listening = c10::Dispatcher::singleton().addRegistrationListener(
        std::make_unique<DropNativeJitOperators>());
    node = register_override(mul_cpu(), constant_cond(false), fill_impl(3));
    registry().install_graph(mul_cpu());
  }
  ASSERT_TRUE(native_op(*node));
  ASSERT_FALSE(torch::jit::findOperatorFor({"_native::" + node->node_id, ""}));
  Stack stack{tensor({2}), tensor({4})};
  native_op(*node)->callBoxed(&stack);
  EXPECT_TRUE(same(stack.at(0).toTensor(), tensor({3})));
  try {
    hold_native_op(node->node_id);
    ADD_FAILURE() << "an op LibTorch made no operator for was held";
  } catch (const c10::Error& e) {
    EXPECT_EQ(typeid(e), typeid(c10::Error)) << "a " << typeid(e).name() << ": " << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("LibTorch made no operator for _native::" + node->node_id));
  }
  registry().restore(empty);
  EXPECT_FALSE(native_op(*node)) << "an op nothing can hold outlived its teardown";
  registry().check_invariants();
}

// A copy of the op's JIT Operation (as TorchScript keeps) that outlives the
// op, against NativeOp's promise (its owner destroys it only while nothing
// holds it), raises a c10::Error saying the op is gone; it never calls
// into the undefined op.
TEST_F(NativeOpTest, ACopyOfItsOperationThatOutlivesTheOpRaises) {
  auto node = register_override(mul_cpu(), constant_cond(false), fill_impl(3));
  auto op = std::make_unique<detail::NativeOp>(node, detail::resolve_op(node->key),
                                               c10::DispatchKey::CPU);
  const auto jit = torch::jit::findOperatorFor({"_native::" + node->node_id, ""});
  ASSERT_TRUE(jit);
  torch::jit::Operation copy = jit->getOperation();
  op->release();
  op.reset();
  ASSERT_FALSE(native_op(*node));
  Stack stack{tensor({2}), tensor({4})};
  try {
    copy(stack);
    ADD_FAILURE() << "a copy of a gone op's Operation ran";
  } catch (const c10::Error& e) {
    EXPECT_EQ(typeid(e), typeid(c10::Error)) << "a " << typeid(e).name() << ": " << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("_native::" + node->node_id));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("is gone"));
  }
}

// NativeOpTable::retire undefines an op nothing holds at once, keeping
// nothing in the retired store (which a teardown's sweep reaches only
// once the store has doubled past its floor).
TEST_F(NativeOpTest, ATableRetiringAnOpNothingHoldsUndefinesIt) {
  auto node = register_override(mul_cpu(), constant_cond(false), fill_impl(3));
  detail::NativeOpTable table;
  detail::Released released;
  table.activate({node}, nullptr, released);
  ASSERT_TRUE(native_op(*node));
  const size_t kept = detail::retired_counts().kept;
  table.retire(node->node_id, released);
  EXPECT_FALSE(native_op(*node)) << "retired and kept, though nothing held it";
  EXPECT_EQ(detail::retired_counts().kept, kept);
  detail::reclaim_retired();  // what a mistaken keep left
}

}  // namespace
}  // namespace native_registry::testing
