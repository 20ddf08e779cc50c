#include "suite.h"

namespace conformance {

namespace fx = native_registry::fixtures;

void Conformance::SetUp() {
  ns1_ = std::make_unique<fx::ScopedTwiceNamespace>(fx::kTestNamespace, 2.0);
  ns2_ = std::make_unique<fx::ScopedTwiceNamespace>(fx::kSecondTestNamespace, 3.0);
  before_ = fingerprint();
  adapter_ = GetParam().make();
  scope_ = adapter_->scope();
}

void Conformance::TearDown() {
  scope_.reset();
  EXPECT_EQ(fingerprint().difference(before_), "") << "teardown left the dispatcher changed";
  adapter_.reset();
  ns2_.reset();
  ns1_.reset();
}

void Conformance::add(const Key& key, CondFn cond, ImplFn impl, const std::string& dsl,
                      TryInitializeRuntimeFn runtime, bool unconditional) {
  if (key.lib_symbol != "aten") adapter_->allow_namespace(key.lib_symbol);
  adapter_->register_override({dsl, key.lib_symbol, key.op_symbol, key.dispatch_key,
                               std::move(cond), std::move(impl), std::move(runtime),
                               unconditional});
}

fx::DispatcherFingerprint Conformance::fingerprint() const {
  return fx::DispatcherFingerprint::capture(fx::watched_ops());
}

}  // namespace conformance
