#pragma once

// Shared pieces of the reference's GoogleTest suite: a fixture that gives each
// test its own Registry and the two throwaway namespaces, and checks in
// TearDown that the dispatcher is exactly as it was; plus small boxed conds
// and impls.

#include <native_registry/native_registry.h>

#include "dispatcher_fingerprint.h"
#include "fake_dsl.h"
#include "scoped_namespace.h"

#include <ATen/core/Tensor.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace native_registry::testing {

// Ops whose dispatch tables every test checks after teardown.
using fixtures::watched_ops;

// Graph keys the tests use.
GraphKey mul_cpu();
GraphKey bmm_cpu();
GraphKey twice_cpu(const std::string& ns);

using fixtures::call_mul;
using fixtures::constant_cond;
using fixtures::counting_cond;
using fixtures::fill_impl;
using fixtures::forbidden_impl;
using fixtures::impl_doing;
using fixtures::same;
using fixtures::tensor;

// Boxed GoogleMock-backed callables, to observe calls the way the upstream
// tests do with MagicMock.
using MockCond = ::testing::MockFunction<bool()>;
using MockImpl = ::testing::MockFunction<void()>;
CondFn cond_from(MockCond& mock);
// Calls `mock`, then behaves as fill_impl(value).
ImplFn impl_from(MockImpl& mock, double value);

// A process-wide on/off setting (its getter and setter) switched for a
// scope: the setting it had comes back on every exit.
template <bool (*Get)(), void (*Set)(bool)>
class SettingSwitched {
 public:
  explicit SettingSwitched(bool enabled) : before_(Get()) { Set(enabled); }
  ~SettingSwitched() { Set(before_); }
  SettingSwitched(const SettingSwitched&) = delete;
  SettingSwitched& operator=(const SettingSwitched&) = delete;

 private:
  bool before_;
};

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Registers on registry() with test defaults.
  NodePtr register_override(const GraphKey& key, CondFn cond, ImplFn impl,
                            OverrideOptions options = {},
                            const std::string& dsl = "test_dsl");

  Registry& registry() { return *registry_; }
  const fixtures::ScopedTwiceNamespace& ns1() const { return *ns1_; }
  const fixtures::ScopedTwiceNamespace& ns2() const { return *ns2_; }

  // Warnings the registry logged during the test.
  std::vector<std::string> warnings;

 private:
  std::unique_ptr<fixtures::ScopedTwiceNamespace> ns1_, ns2_;
  fixtures::DispatcherFingerprint before_;
  std::unique_ptr<Registry> registry_;
};

}  // namespace native_registry::testing
