// Concurrency stress, checked against a model.
//
// Eight threads (NR_STRESS_THREADS) call three overridden aten ops while the
// test's own thread changes the registry in a loop for a bounded time
// (NR_STRESS_SECONDS, default 1): it registers nodes, disables and re-enables
// by dsl name, op symbol and dispatch key, reorders with reinstall, installs
// in place (InstallMode::kUpdate), runs install_all and raises the
// unconditional mask. Routers go into the dispatcher before the callers start
// and leave it after they stop, as LibTorch requires.
//
// The check is exact. A model of the registry written here, independent of
// the implementation, says what every (op, input) returns in each state the
// control thread publishes. States are numbered; the control thread writes a
// state's expected results *before* the registry publishes it
// (`announced`) and bumps `version` *after*. A call that read version v0
// before it started and announced a1 after it returned can only have seen
// states v0..a1, so its result must be what one of those states gives.

#include "../support.h"

#include <ATen/Parallel.h>
#include <ATen/ops/add.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace native_registry::testing {
namespace {

constexpr int kKeys = 3;     // mul.Tensor, add.Tensor, sub.Tensor at CPU
constexpr int kClasses = 2;  // a 2-element input and a 5-element input
constexpr int kMaxNodesPerKey = 16;
constexpr float kValueBase = 100.f;  // node n returns kValueBase + n

double env_number(const char* name, double fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  return (end != text && value > 0) ? value : fallback;
}

enum class Cond { kAlways, kNever, kSmall };  // kSmall: first argument has < 4 elements

bool takes(Cond cond, int input_class) {
  switch (cond) {
    case Cond::kAlways: return true;
    case Cond::kNever: return false;
    case Cond::kSmall: return input_class == 0;
  }
  return false;
}

CondFn cond_fn(Cond cond) {
  if (cond != Cond::kSmall) return constant_cond(cond == Cond::kAlways);
  return [](const c10::OperatorHandle& op, c10::DispatchKeySet, const Stack& stack) {
    const size_t arity = op.schema().arguments().size();
    return stack[stack.size() - arity].toTensor().numel() < 4;
  };
}

// ---- the model ---------------------------------------------------------------

struct ModelNode {
  NodePtr node;  // the registry's node, to compare published chains by identity
  int key;
  std::string dsl;
  Cond cond;
  bool unconditional;
};

class Model {
 public:
  const std::vector<GraphKey> keys{
      {"aten", "mul.Tensor", "CPU"}, {"aten", "add.Tensor", "CPU"}, {"aten", "sub.Tensor", "CPU"}};
  std::vector<ModelNode> nodes;
  std::vector<std::vector<int>> graphs = std::vector<std::vector<int>>(kKeys);
  std::vector<std::vector<int>> published = std::vector<std::vector<int>>(kKeys);
  std::set<std::string> off_dsl, off_op, off_key;
  int mask_depth = 0;

  bool enabled(int n) const {
    const ModelNode& node = nodes[n];
    const bool filtered = off_dsl.count(node.dsl) ||
                          off_op.count(keys[node.key].op_symbol) || off_key.count("CPU");
    return !filtered || (node.unconditional && mask_depth == 0);
  }
  void publish(int k) {
    published[k].clear();
    for (int n : graphs[k]) {
      if (enabled(n)) published[k].push_back(n);
    }
  }
  void publish_all() {
    for (int k = 0; k < kKeys; ++k) publish(k);
  }
  // The graphs a filter entry names: those holding a node it matches.
  std::set<int> named(const std::string& dsl, const std::string& op, const std::string& key) const {
    std::set<int> out;
    for (int k = 0; k < kKeys; ++k) {
      for (int n : graphs[k]) {
        if (nodes[n].dsl == dsl || keys[k].op_symbol == op || keys[k].dispatch_key == key) {
          out.insert(k);
        }
      }
    }
    return out;
  }
  // 0: the op's own kernel; n + 1: node n's impl.
  uint8_t outcome(int k, int input_class) const {
    for (int n : published[k]) {
      if (takes(nodes[n].cond, input_class)) return static_cast<uint8_t>(n + 1);
    }
    return 0;
  }
  uint64_t packed() const {
    uint64_t out = 0;
    for (int k = 0; k < kKeys; ++k) {
      for (int c = 0; c < kClasses; ++c) {
        out |= static_cast<uint64_t>(outcome(k, c)) << (8 * (k * kClasses + c));
      }
    }
    return out;
  }
};

uint8_t unpack(uint64_t packed, int k, int c) {
  return static_cast<uint8_t>(packed >> (8 * (k * kClasses + c)));
}

// What each op returns on the fallback path for a = 2, b = 4.
constexpr float kFallback[kKeys] = {8.f, 6.f, -2.f};

// ---- the test ----------------------------------------------------------------

class StressTest : public RegistryTest {
 protected:
  int add_node(int k, const std::string& dsl, Cond cond, bool unconditional = false) {
    const int n = static_cast<int>(model_.nodes.size());
    OverrideOptions options;
    options.unconditional_override = unconditional;
    NodePtr node = register_override(model_.keys[k], unconditional ? CondFn{} : cond_fn(cond),
                                     fill_impl(kValueBase + n), options, dsl);
    model_.nodes.push_back({node, k, dsl, unconditional ? Cond::kAlways : cond, unconditional});
    model_.graphs[k].push_back(n);
    return n;
  }

  // The registry's published chains are the model's, node for node.
  std::string chains_differ() {
    for (int k = 0; k < kKeys; ++k) {
      const Graph actual = registry().published_chain(model_.keys[k]);
      Graph expected;
      for (int n : model_.published[k]) expected.push_back(model_.nodes[n].node);
      if (actual != expected) {
        std::ostringstream out;
        out << model_.keys[k].to_string() << ": published " << actual.size()
            << " nodes, the model " << expected.size();
        return out.str();
      }
    }
    return "";
  }

  Model model_;
};

TEST_F(StressTest, EveryCallReturnsWhatAStateItCouldHaveSeenGives) {
  at::set_num_threads(1);  // intra-op threads are LibTorch's, not under test
  const int threads = static_cast<int>(env_number("NR_STRESS_THREADS", 8));
  const double seconds = env_number("NR_STRESS_SECONDS", 1.0);
  const auto seed = static_cast<uint32_t>(env_number("NR_STRESS_SEED", 20240611));
  RecordProperty("seed", std::to_string(seed));

  for (int k = 0; k < kKeys; ++k) {
    add_node(k, "dsl_a", Cond::kSmall);
    add_node(k, "dsl_b", Cond::kAlways);
  }
  // add.Tensor also holds an unconditional node, which survives disables
  // except while the mask is up.
  add_node(1, "dsl_u", Cond::kAlways, /*unconditional=*/true);
  registry().install_all();  // the only dispatcher edit before teardown
  model_.publish_all();
  ASSERT_EQ(chains_differ(), "");

  // State i's expected results live in history[i]; capacity bounds the run.
  const size_t capacity = std::max<size_t>(1 << 16, static_cast<size_t>(seconds * 200000));
  std::vector<uint64_t> history(capacity);
  history[0] = model_.packed();
  std::atomic<uint64_t> announced{0}, version{0};
  std::atomic<bool> stop{false};

  struct Bad {
    int op, input_class;
    float value;
    uint64_t from, to;
  };
  std::mutex bad_mutex;
  std::vector<Bad> bad;
  std::atomic<uint64_t> calls{0}, bad_count{0}, spanning{0};

  auto caller = [&](int t) {
    const at::Tensor a[kClasses] = {at::full({2}, 2.f), at::full({5}, 2.f)};
    const at::Tensor b[kClasses] = {at::full({2}, 4.f), at::full({5}, 4.f)};
    uint64_t i = static_cast<uint64_t>(t), mine = 0, mine_spanning = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const int k = static_cast<int>(i % kKeys);
      const int c = static_cast<int>((i / kKeys) % kClasses);
      ++i;
      const uint64_t from = version.load(std::memory_order_acquire);
      const at::Tensor out = k == 0   ? at::mul(a[c], b[c])
                             : k == 1 ? at::add(a[c], b[c])
                                      : at::sub(a[c], b[c]);
      const uint64_t to = announced.load(std::memory_order_acquire);
      ++mine;
      if (to != from) ++mine_spanning;
      // Every element must be one value, and that value one some state gives.
      const float* data = out.data_ptr<float>();
      const float value = data[0];
      bool uniform = out.numel() == a[c].numel();
      for (int64_t e = 1; uniform && e < out.numel(); ++e) uniform = data[e] == value;
      int outcome = -1;
      if (value == kFallback[k]) {
        outcome = 0;
      } else if (value >= kValueBase && value < kValueBase + 255) {
        outcome = static_cast<int>(value - kValueBase) + 1;
      }
      bool ok = false;
      for (uint64_t v = from; uniform && outcome >= 0 && v <= to && !ok; ++v) {
        ok = unpack(history[v], k, c) == outcome;
      }
      if (!ok) {
        ++bad_count;
        std::lock_guard<std::mutex> lock(bad_mutex);
        if (bad.size() < 10) bad.push_back({k, c, value, from, to});
      }
    }
    calls += mine;
    spanning += mine_spanning;
  };

  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) callers.emplace_back(caller, t);

  // ---- the control loop --------------------------------------------------------
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const std::vector<std::string> dsls{"dsl_a", "dsl_b", "dsl_c", "dsl_u"};
  const std::vector<std::string> ops{"mul.Tensor", "add.Tensor", "sub.Tensor"};
  uint64_t state = 0;
  long control_ops = 0;
  std::string drift;
  // Runs one registry change whose effect the model already holds.
  auto change = [&](const std::function<void()>& act) {
    history[state + 1] = model_.packed();
    announced.store(state + 1, std::memory_order_release);
    act();
    version.store(++state, std::memory_order_release);
  };

  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::microseconds(static_cast<long>(seconds * 1e6));
  while (std::chrono::steady_clock::now() < until && state + 3 < capacity && drift.empty()) {
    ++control_ops;
    switch (pick(9)) {
      case 0:
      case 1: {  // disable / re-enable a dsl name
        const bool disable = pick(2) == 0;
        const std::string& dsl = dsls[static_cast<size_t>(pick(4))];
        const std::set<int> named = model_.named(dsl, "", "");
        disable ? (void)model_.off_dsl.insert(dsl) : (void)model_.off_dsl.erase(dsl);
        for (int k : named) model_.publish(k);
        change([&] {
          disable ? registry().deregister_op_overrides({{dsl}, {}, {}})
                  : registry().reenable_op_overrides({{dsl}, {}, {}});
        });
        break;
      }
      case 2: {  // disable / re-enable an op symbol or the dispatch key
        const bool disable = pick(2) == 0;
        const int which = pick(4);
        const std::string op = which < 3 ? ops[static_cast<size_t>(which)] : "";
        const std::string key = which < 3 ? "" : "CPU";
        const std::set<int> named = model_.named("", op, key);
        auto& set = which < 3 ? model_.off_op : model_.off_key;
        const std::string& entry = which < 3 ? op : key;
        disable ? (void)set.insert(entry) : (void)set.erase(entry);
        for (int k : named) model_.publish(k);
        const Filter filter =
            which < 3 ? Filter{{}, {op}, {}} : Filter{{}, {}, {key}};
        change([&] {
          disable ? registry().deregister_op_overrides(filter)
                  : registry().reenable_op_overrides(filter);
        });
        break;
      }
      case 3: {  // reorder every graph by a random permutation, reinstalling
        std::vector<std::vector<int>> orders(kKeys);
        for (int k = 0; k < kKeys; ++k) {
          orders[k] = model_.graphs[k];
          std::shuffle(orders[k].begin(), orders[k].end(), rng);
        }
        for (int k = 0; k < kKeys; ++k) {
          const bool changed = orders[k] != model_.graphs[k];
          model_.graphs[k] = orders[k];
          if (changed) model_.publish(k);
        }
        change([&] {
          registry().reorder_graphs(
              [&](const std::string& op, const std::string&, const Graph&) {
                const auto k = std::find(ops.begin(), ops.end(), op) - ops.begin();
                Graph out;
                for (int n : orders[static_cast<size_t>(k)]) out.push_back(model_.nodes[n].node);
                return out;
              },
              /*reinstall=*/true);
        });
        break;
      }
      case 4: {  // register a node; it goes live at the next publish of its graph
        const int k = pick(kKeys);
        if (model_.graphs[k].size() < kMaxNodesPerKey) {
          add_node(k, dsls[static_cast<size_t>(pick(3))], static_cast<Cond>(pick(3)));
        }
        break;
      }
      case 5:
      case 6: {  // install in place: a publish, not a dispatcher edit
        const int k = pick(kKeys);
        model_.publish(k);
        change([&] { registry().install_graph(model_.keys[k], InstallMode::kUpdate); });
        break;
      }
      case 7:
        model_.publish_all();
        change([&] { registry().install_all(); });
        break;
      case 8: {  // the unconditional mask: two states, raised then lifted
        std::optional<Registry::UnconditionalMask> mask;
        ++model_.mask_depth;
        model_.publish_all();
        change([&] { mask.emplace(registry()); });
        --model_.mask_depth;
        model_.publish_all();
        change([&] { mask.reset(); });
        break;
      }
    }
    drift = chains_differ();
    try {
      registry().check_invariants();
    } catch (const std::logic_error& broken) {
      drift = std::string(broken.what()) + "\n" + registry().dump_state();
    }
  }
  stop = true;
  for (auto& thread : callers) thread.join();

  EXPECT_EQ(drift, "") << "the registry published a chain the model did not";
  EXPECT_EQ(bad_count.load(), 0u) << "calls returned what no state they could see gives";
  for (const Bad& b : bad) {
    ADD_FAILURE() << "op " << model_.keys[static_cast<size_t>(b.op)].to_string() << " class "
                  << b.input_class << " returned " << b.value << " during states " << b.from
                  << ".." << b.to;
  }
  EXPECT_GE(calls.load(), static_cast<uint64_t>(threads));
  EXPECT_GT(control_ops, 0);
  RecordProperty("threads", std::to_string(threads));
  RecordProperty("seconds", std::to_string(seconds));
  RecordProperty("calls_checked", std::to_string(calls.load()));
  RecordProperty("calls_spanning_a_change", std::to_string(spanning.load()));
  RecordProperty("states_published", std::to_string(state));
  RecordProperty("control_ops", std::to_string(control_ops));
  std::printf("stress: %d threads x %.1f s, %llu calls checked (%llu spanning a change), "
              "%llu states, %ld control ops\n",
              threads, seconds, static_cast<unsigned long long>(calls.load()),
              static_cast<unsigned long long>(spanning.load()),
              static_cast<unsigned long long>(state), control_ops);
}

}  // namespace
}  // namespace native_registry::testing
