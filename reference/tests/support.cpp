#include "support.h"

namespace native_registry::testing {

GraphKey mul_cpu() { return {"aten", "mul.Tensor", "CPU"}; }
GraphKey bmm_cpu() { return {"aten", "bmm", "CPU"}; }
GraphKey twice_cpu(const std::string& ns) { return {ns, "twice", "CPU"}; }

CondFn cond_from(MockCond& mock) {
  return [&mock](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) {
    return mock.Call();
  };
}

ImplFn impl_from(MockImpl& mock, double value) {
  ImplFn fill = fill_impl(value);
  return [&mock, fill](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                       Stack* stack) {
    mock.Call();
    fill(op, keys, stack);
  };
}

void RegistryTest::SetUp() {
  ns1_ = std::make_unique<fixtures::ScopedTwiceNamespace>(fixtures::kTestNamespace, 2.0);
  ns2_ = std::make_unique<fixtures::ScopedTwiceNamespace>(
      fixtures::kSecondTestNamespace, 3.0);
  before_ = fixtures::DispatcherFingerprint::capture(watched_ops());
  registry_ = std::make_unique<Registry>();
  registry_->set_log_sink([this](LogLevel level, const std::string& message) {
    if (level == LogLevel::kWarning) warnings.push_back(message);
  });
}

void RegistryTest::TearDown() {
  // Destroying the registry is its teardown; the namespaces go after it, as
  // the registry's routers and `_native` ops refer to their ops.
  registry_.reset();
  const auto after = fixtures::DispatcherFingerprint::capture(watched_ops());
  EXPECT_EQ(after.difference(before_), "")
      << "the dispatcher differs from before the test";
  ns2_.reset();
  ns1_.reset();
}

NodePtr RegistryTest::register_override(const GraphKey& key, CondFn cond, ImplFn impl,
                                        OverrideOptions options,
                                        const std::string& dsl) {
  if (key.lib_symbol != "aten") registry_->allow_namespace(key.lib_symbol);
  return registry_->register_op_override(dsl, key.lib_symbol, key.op_symbol,
                                         key.dispatch_key, std::move(cond),
                                         std::move(impl), std::move(options));
}

}  // namespace native_registry::testing
