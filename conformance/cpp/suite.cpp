#include "suite.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

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
  // The implementation's own invariants (if it checks any) hold after the
  // test, and again once its scope is undone.
  auto self_check = [this](const char* when) {
    if (!adapter_) return;  // SetUp failed before the adapter was made
    try {
      adapter_->self_check();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "self_check " << when << ": " << e.what();
    }
  };
  self_check("after the test");
  scope_.reset();
  self_check("after the teardown");
  EXPECT_EQ(fingerprint().difference(before_), "") << "teardown left the dispatcher changed";
  adapter_.reset();
  ns2_.reset();
  ns1_.reset();
}

std::pair<Key, Key> Conformance::beside_a_doomed_graph(
    const std::string& doomed_ns, const std::vector<std::string>& doomed_dsls,
    const std::vector<std::string>& disabled) {
  const Key routed = twice_key(ns1().ns());
  const Key doomed = twice_key(doomed_ns);
  add(routed, fx::constant_cond(true), fx::fill_impl(99), "d");
  fx::ScopedTwiceNamespace library(doomed_ns, 5.0);
  double value = 7;
  for (const std::string& dsl : doomed_dsls) add(doomed, fx::constant_cond(true), fx::fill_impl(value++), dsl);
  if (!disabled.empty()) adapter().disable({disabled, {}, {}});
  adapter().install(routed);
  adapter().install(doomed);
  return {routed, doomed};
}

void Conformance::add(const Key& key, CondFn cond, ImplFn impl, const std::string& dsl,
                      TryInitializeRuntimeFn runtime, bool unconditional) {
  if (key.lib_symbol != "aten") adapter_->allow_namespace(key.lib_symbol);
  adapter_->register_override({dsl, key.lib_symbol, key.op_symbol, key.dispatch_key,
                               std::move(cond), std::move(impl), std::move(runtime),
                               unconditional});
}

Conformance::Race Conformance::race_calls_against_toggles(
    const std::function<float()>& call, const std::vector<float>& allowed,
    const std::function<std::shared_ptr<void>()>& on_thread) {
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, calls{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      const auto held = on_thread ? on_thread() : nullptr;
      while (!stop) {
        const float v = call();
        if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) ++bad;
        ++calls;
      }
    });
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
  for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
    if (round % 3 == 0) adapter_->disable({{"dsl_a"}, {}, {}});
    if (round % 3 == 1) adapter_->disable({{"dsl_b"}, {}, {}});
    if (round % 3 == 2) adapter_->enable({{"dsl_a", "dsl_b"}, {}, {}});
  }
  stop = true;
  for (auto& caller : callers) caller.join();
  return {calls.load(), bad.load()};
}

fx::DispatcherFingerprint Conformance::fingerprint() const {
  return fx::DispatcherFingerprint::capture(fx::watched_ops());
}

std::string raised(const std::exception& e) {
  const bool typed = dynamic_cast<const c10::Error*>(&e) == nullptr ||
                     dynamic_cast<const c10::ValueError*>(&e) || dynamic_cast<const c10::TypeError*>(&e) ||
                     dynamic_cast<const c10::IndexError*>(&e) ||
                     dynamic_cast<const c10::NotImplementedError*>(&e);
  return std::string("raised ") + (typed ? "" : "RuntimeError: ") + e.what();
}

}  // namespace conformance
