#pragma once

// The fixture every C++ conformance test uses: one adapter per test, made by
// the implementation's factory, two throwaway namespaces, and a check that the
// dispatcher is exactly as before once the test's scope is gone.
//
// Each test names its catalogue behaviours with BEHAVIOUR("id") (recorded as
// a JUnit property and read statically by the traceability check) and its
// required features with REQUIRE_FEATURE("name"), which reports the test as
// unsupported (skipped, with that reason) for implementations without it.

#include "adapter.h"

#include "dispatcher_fingerprint.h"
#include "fake_dsl.h"
#include "scoped_namespace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace conformance {

// BEHAVIOUR("a.b", "c.d"): one JUnit property "behaviour" holding the ids, comma-separated.
#define BEHAVIOUR(...) RecordProperty("behaviour", ::conformance::join_ids({__VA_ARGS__}))
#define REQUIRE_FEATURE(feature)                                                       \
  do {                                                                                 \
    if (!adapter().supports(feature)) {                                                \
      GTEST_SKIP() << "unsupported: " << adapter().name() << " lacks feature " << feature; \
    }                                                                                  \
  } while (0)

inline std::string join_ids(std::initializer_list<const char*> ids) {
  std::string joined;
  for (const char* id : ids) {
    if (!joined.empty()) joined.push_back(',');
    joined.append(id);
  }
  return joined;
}

// What Python would see of an exception a call raised: "raised <message>",
// with "RuntimeError: " before the message for a c10::Error of none of c10's
// typed kinds (ValueError, TypeError, IndexError, NotImplementedError).
std::string raised(const std::exception& e);

class Conformance : public ::testing::TestWithParam<Implementation> {
 protected:
  void SetUp() override;
  void TearDown() override;

  RegistryAdapter& adapter() { return *adapter_; }
  const native_registry::fixtures::ScopedTwiceNamespace& ns1() const { return *ns1_; }
  const native_registry::fixtures::ScopedTwiceNamespace& ns2() const { return *ns2_; }

  // Registers with test defaults; allowlists the namespace first if not aten.
  void add(const Key& key, CondFn cond, ImplFn impl, const std::string& dsl = "test_dsl",
           TryInitializeRuntimeFn runtime = {}, bool unconditional = false);
  native_registry::fixtures::DispatcherFingerprint fingerprint() const;

  // Three threads call `call` (each holding what `on_thread` returns, e.g. a
  // stream guard, while it calls) as this thread disables dsl_a, then dsl_b,
  // then re-enables both, in turn for 400 ms. Counts the calls and those whose
  // result is not in `allowed` (the results some published chain gives).
  struct Race {
    long calls = 0, bad = 0;
  };
  Race race_calls_against_toggles(const std::function<float()>& call, const std::vector<float>& allowed,
                                  const std::function<std::shared_ptr<void>()>& on_thread = {});

  // ns1's twice (dsl "d", answering 99) and `doomed_ns`'s twice (a node per
  // dsl of `doomed_dsls`, answering 7, 8, ...), `disabled` disabled, both
  // installed while `doomed_ns`'s library is loaded; unloaded on return.
  // Returns the two keys (test_edges.cpp: a change that fails part way).
  std::pair<Key, Key> beside_a_doomed_graph(const std::string& doomed_ns,
                                            const std::vector<std::string>& doomed_dsls,
                                            const std::vector<std::string>& disabled);

  static Key mul_key() { return {"aten", "mul.Tensor", "CPU"}; }
  static Key bmm_key() { return {"aten", "bmm", "CPU"}; }
  static Key twice_key(const std::string& ns) { return {ns, "twice", "CPU"}; }

 private:
  std::unique_ptr<native_registry::fixtures::ScopedTwiceNamespace> ns1_, ns2_;
  native_registry::fixtures::DispatcherFingerprint before_;
  std::unique_ptr<RegistryAdapter> adapter_;
  std::unique_ptr<Scope> scope_;
};

}  // namespace conformance
