// Calls on many threads while another thread disables, re-enables, reorders,
// registers and re-installs (in place): every call sees some whole chain, so
// every result is one a published chain could give, and nothing crashes.
// Install and teardown happen before the callers start and after they stop,
// as LibTorch requires.

#include "support.h"

#include <ATen/ops/full.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace native_registry::testing {
namespace {

using ConcurrencyTest = RegistryTest;

// `count` threads calling mul on (2, 2) and (4, 4) until `stop`, each result
// handed to `judge`, every call counted in `calls`.
std::vector<std::thread> start_callers(int count, const std::atomic<bool>& stop, std::atomic<long>& calls,
                                       const std::function<void(const at::Tensor&)>& judge) {
  std::vector<std::thread> callers;
  for (int t = 0; t < count; ++t) {
    callers.emplace_back([&stop, &calls, judge] {
      const at::Tensor a = tensor({2, 2});
      const at::Tensor b = tensor({4, 4});
      while (!stop.load()) {
        judge(call_mul(a, b));
        ++calls;
      }
    });
  }
  return callers;
}

TEST_F(ConcurrencyTest, CallsSeeWholeChainsWhileTheControlPlaneChurns) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  register_override(mul_cpu(), constant_cond(true), fill_impl(2), {}, "dsl_b");
  registry().install_graph(mul_cpu());

  // 8 from the fallback (2 * 4); 1, 2, 3 from the overrides.
  const std::set<float> possible{8.f, 1.f, 2.f, 3.f};
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0}, bad{0};
  std::vector<std::thread> callers = start_callers(4, stop, calls, [&](const at::Tensor& out) {
    const float first = out[0].item<float>();
    if (!possible.count(first) || out[1].item<float>() != first) ++bad;
  });

  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  int round = 0;
  while (std::chrono::steady_clock::now() < until) {
    switch (round++ % 6) {
      case 0: registry().deregister_op_overrides({{"dsl_a"}, {}, {}}); break;
      case 1: registry().deregister_op_overrides({{"dsl_b"}, {}, {}}); break;
      case 2: registry().reenable_op_overrides({{"dsl_a", "dsl_b"}, {}, {}}); break;
      case 3:
        registry().reorder_graphs(
            [](const std::string&, const std::string&, const Graph& g) {
              return Graph(g.rbegin(), g.rend());
            },
            /*reinstall=*/true);
        break;
      case 4:
        if (registry().graph(mul_cpu()).size() < 40) {
          register_override(mul_cpu(), constant_cond(round % 4 == 0), fill_impl(3), {}, "dsl_c");
        }
        registry().install_graph(mul_cpu());  // in place: a publish, not a re-install
        break;
      case 5: {
        Registry::UnconditionalMask mask(registry());
        break;
      }
    }
  }
  stop = true;
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(bad.load(), 0) << "results no published chain could give";
  EXPECT_GT(calls.load(), 0);
  EXPECT_GT(round, 6);
  RecordProperty("calls", std::to_string(calls.load()));
  RecordProperty("control_rounds", std::to_string(round));
}

// A coverage check replaced (or unset) while calls run: a call that read the
// old one before the change still runs it whole, so every check a router was
// given lives as long as the router. Each check reads what it captured; a
// freed one (the allocator fills freed memory in mutant runs) reads garbage
// or crashes.
TEST_F(ConcurrencyTest, ACoverageCheckReplacedWhileCallsRunStaysWholeForThem) {
  register_override(mul_cpu(), constant_cond(true), fill_impl(1), {}, "dsl_a");
  registry().install_graph(mul_cpu());
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0}, bad{0};
  std::vector<std::thread> callers = start_callers(4, stop, calls, [&](const at::Tensor& out) {
    const float first = out[0].item<float>();
    if (first != 1.f && first != 8.f) ++bad;  // routed, or covered
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  int round = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (++round % 3 == 0) {
      registry().set_coverage_check({});
    } else {
      auto tag = std::make_shared<std::string>("alive, round " + std::to_string(round));
      registry().set_coverage_check([tag, &bad](const GraphKey&, const c10::OperatorHandle&,
                                                c10::DispatchKeySet, const Stack&) {
        if (tag->rfind("alive, round ", 0) != 0) ++bad;
        return tag->size() % 2 == 0;
      });
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop = true;
  for (auto& caller : callers) caller.join();
  registry().set_coverage_check({});
  EXPECT_EQ(bad.load(), 0) << "a call ran a coverage check that had been freed";
  EXPECT_GT(calls.load(), 0);
  EXPECT_GT(round, 6);
}

// Stops the thread that undefines a `_native` op, inside the dispatcher's
// deregistration, until let go.
struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  bool arrived = false, let_go = false;
};
class HoldsNativeOpDeregistration : public c10::OpRegistrationListener {
 public:
  explicit HoldsNativeOpDeregistration(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle& op) override {
    if (op.operator_name().name.rfind("_native::", 0) != 0) return;
    std::unique_lock<std::mutex> lock(gate_->mutex);
    gate_->arrived = true;
    gate_->changed.notify_all();
    gate_->changed.wait(lock, [this] { return gate_->let_go; });
  }

 private:
  std::shared_ptr<Gate> gate_;
};

// A registry's destruction sweeps the store of retired `_native` ops after
// its own lock has left the fork handlers; a fork meanwhile waits for the
// store's lock (the prepare handler takes it), so that the child never copies
// the store half-swept and the parent's handler never frees a lock another
// thread holds.
TEST_F(ConcurrencyTest, AForkWaitsForADyingRegistrysSweepOfTheRetiredOps) {
  auto gate = std::make_shared<Gate>();
  auto listening = c10::Dispatcher::singleton().addRegistrationListener(
      std::make_unique<HoldsNativeOpDeregistration>(gate));
  std::thread dying([] {
    std::shared_ptr<const c10::OperatorHandle> held;
    {
      Registry first;
      const NodePtr node = first.register_op_override("d", "aten", "mul.Tensor", "CPU",
                                                      constant_cond(false), fill_impl(1));
      first.install_all();
      held = hold_native_op(node->node_id);
    }  // its op retired, kept: held
    held.reset();
    Registry second;  // whose destruction sweeps the op out of the store
  });
  bool arrived = false;
  {
    std::unique_lock<std::mutex> lock(gate->mutex);
    arrived = gate->changed.wait_for(lock, std::chrono::seconds(20), [&] { return gate->arrived; });
  }
  std::thread letting_go([gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::lock_guard<std::mutex> lock(gate->mutex);
    gate->let_go = true;
    gate->changed.notify_all();
  });
  bool swept_before_the_fork = false;
  if (arrived) {
    const pid_t pid = fork();
    if (pid == 0) std::_Exit(0);
    {
      std::lock_guard<std::mutex> lock(gate->mutex);
      swept_before_the_fork = gate->let_go;
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  letting_go.join();
  dying.join();
  ASSERT_TRUE(arrived) << "the dying registry never undefined the op";
  EXPECT_TRUE(swept_before_the_fork) << "fork() went ahead while the store's lock was held";
}

// A registry destroyed on another thread while a fork is being prepared
// leaves the fork handlers' list only once the fork is done: one that left
// it meanwhile would keep the lock the prepare handler took on it (the
// parent's handler releases the locks of the list as it is then), and its
// destructor, which takes that lock next, would wait for ever. The test's
// own prepare handler, installed before the process's first registry
// installs the registry's, runs after theirs (pthread_atfork runs prepare
// handlers last installed first): it lets the registry's destruction start
// while the fork holds every lock, and waits. Exit code 0 if the
// destruction finished after the fork.
std::atomic<bool> g_destroy{false}, g_destroyed{false}, g_destroyed_in_prepare{false};

[[noreturn]] void destroy_a_registry_while_a_fork_is_prepared() {
  pthread_atfork(
      [] {
        g_destroy = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        g_destroyed_in_prepare = g_destroyed.load();
      },
      nullptr, nullptr);
  auto dying = std::make_unique<Registry>();
  std::thread destroyer([&dying] {
    while (!g_destroy) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    dying.reset();
    g_destroyed = true;
  });
  const pid_t pid = fork();
  if (pid == 0) std::_Exit(0);
  waitpid(pid, nullptr, 0);
  if (g_destroyed_in_prepare) {
    std::fprintf(stderr, "the registry was destroyed while the fork held its locks: the "
                         "registry's fork handlers ran after the test's, which tests nothing\n");
    std::_Exit(2);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!g_destroyed && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!g_destroyed) {
    std::fprintf(stderr, "the registry destroyed while a fork was prepared never finished: "
                         "the fork left its lock held\n");
    std::_Exit(3);  // its thread waits for ever: not joined
  }
  destroyer.join();
  std::_Exit(0);
}

// In a threadsafe death test's child: a process that made no registry
// before this test's.
TEST(ForkGuardTest, ARegistryDestroyedWhileAForkIsPreparedFinishesAfterTheFork) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(destroy_a_registry_while_a_fork_is_prepared(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace native_registry::testing
