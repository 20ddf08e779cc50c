// Holds up where users actually go (issue 23): a target op redefined under a
// live `_native` op, fork while another thread is in the control plane. The
// crash-prone cases run in a forked child (a death test, or a plain fork
// with an alarm), so a regression fails the test instead of the suite.

#include "suite.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace conformance {
namespace {

using namespace native_registry::fixtures;

constexpr const char* kRedefNs = "_native_registry_redef_cpp";

std::unique_ptr<torch::Library> define_foo(bool three_arguments) {
  auto lib = std::make_unique<torch::Library>(torch::Library::DEF, kRedefNs, std::nullopt,
                                              __FILE__, __LINE__);
  if (three_arguments) {
    lib->def("foo(Tensor x, Tensor y, Tensor z) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     [](const at::Tensor& x, const at::Tensor& y,
                                        const at::Tensor& z) { return x + y + z; }));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     [](const at::Tensor& x, const at::Tensor&,
                                        const at::Tensor&) { return at::empty_like(x); }));
  } else {
    lib->def("foo(Tensor x) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     [](const at::Tensor& x) { return x + 1; }));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     [](const at::Tensor& x) { return at::empty_like(x); }));
  }
  return lib;
}

// "raised <message>" or "returned".
std::string outcome(const c10::OperatorHandle& op, const at::Tensor& x) {
  Stack stack{x};
  try {
    op.callBoxed(&stack);
    return "returned";
  } catch (const std::exception& e) {
    return std::string("raised ") + e.what();
  }
}

// Runs in a death-test child: exits 0 if the `_native` op's eager and meta
// calls both raise naming the override, else 1 with what happened.
[[noreturn]] void call_native_after_redefinition(RegistryAdapter& registry, bool remove_first,
                                                 const std::function<void(const Key&)>& add) {
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = define_foo(false);
  add(key);
  registry.install(key);
  const NodeInfo node = registry.graph(key).at(0);
  std::optional<c10::OperatorHandle> native = registry.native_op(node);
  if (!native) std::_Exit(3);
  if (remove_first) registry.disable({{"redef_dsl"}, {}, {}});
  lib.reset();
  lib = define_foo(true);
  int bad = 0;
  for (const at::Tensor& x : {tensor({1, 1}), at::ones({2}, at::device(at::kMeta))}) {
    const std::string what = outcome(*native, x);
    if (what.rfind("raised", 0) != 0 || what.find(node.node_id) == std::string::npos) {
      std::fprintf(stderr, "the _native op's call on %s: %s\n", x.device().str().c_str(),
                   what.c_str());
      ++bad;
    }
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

TEST_P(Conformance, ANativeOpWhoseTargetWasRedefinedRaisesNamingTheOverride) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto add_override = [&](const Key& key) {
    add(key, constant_cond(true), fill_impl(7), "redef_dsl");
  };
  EXPECT_EXIT(call_native_after_redefinition(adapter(), false, add_override),
              ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, ANativeOpWhoseTargetLeftTheDispatcherRaises) {
  BEHAVIOUR("robustness.native-op-target-removed");
  REQUIRE_FEATURE("native-op-meta");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto add_override = [&](const Key& key) {
    add(key, constant_cond(true), fill_impl(7), "redef_dsl");
  };
  EXPECT_EXIT(call_native_after_redefinition(adapter(), true, add_override),
              ::testing::ExitedWithCode(0), "");
}

// Forks `forks` children while another thread runs `work` in a loop; each
// child makes a control-plane call (a scope, a registration, an install)
// and a routed call within 20 s. Returns the children that did not.
int children_stuck_while(RegistryAdapter& registry, const std::function<void()>& work, int forks,
                         const std::function<void()>& child_body) {
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) work();
  });
  int stuck = 0;
  for (int i = 0; i < forks; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // a hang kills the child, the parent counts it
      try {
        child_body();
      } catch (...) {
        _exit(2);
      }
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++stuck;
  }
  stop.store(true);
  busy.join();
  (void)registry;
  return stuck;
}

TEST_P(Conformance, AChildForkedDuringControlPlaneWorkCanUseTheRegistry) {
  BEHAVIOUR("robustness.fork-during-control-plane");
  const Key twice = twice_key(ns1().ns());
  add(twice, constant_cond(false), fill_impl(1), "bg_dsl");
  const std::vector<std::pair<const char*, std::function<void()>>> kinds = {
      {"register", [&] { add(twice, constant_cond(false), fill_impl(1), "bg_dsl"); }},
      {"install", [&] { adapter().install(twice); }},
      {"toggle", [&] {
         adapter().disable({{"bg_dsl"}, {}, {}});
         adapter().enable({{"bg_dsl"}, {}, {}});
       }},
      {"reorder", [&] {
         adapter().reorder([](const std::string&, const std::string&,
                              const std::vector<NodeInfo>& graph) {
           std::vector<std::string> ids;
           for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
           return ids;
         });
       }},
      {"restore", [&] { std::unique_ptr<Scope> scope = adapter().scope(); }},
  };
  for (const auto& [kind, work] : kinds) {
    const int stuck = children_stuck_while(adapter(), work, 40, [&] {
      std::unique_ptr<Scope> scope = adapter().scope();
      add(mul_key(), constant_cond(true), fill_impl(9), "child_dsl");
      adapter().install(mul_key());
      if (!same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({9, 9}))) _exit(3);
    });
    EXPECT_EQ(stuck, 0) << stuck << " of 40 children forked during " << kind
                        << " hung or failed in their first registry call";
  }
}

}  // namespace
}  // namespace conformance
