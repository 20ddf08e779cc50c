// A fuzzer for the C++ API. GCC has no libFuzzer, so this is a seeded,
// structure-aware random driver: NR_FUZZ_INPUTS (default 2,000) calls, each
// with arguments drawn from valid names, hostile names (empty, blank, NULs,
// control bytes, invalid UTF-8, "ns::op", extra dots, 100,000 characters),
// byte-level mutations of valid names, and every dispatch key name LibTorch
// knows. Every call is checked against an oracle written here:
//
//  * it is accepted exactly when the oracle says the input is valid;
//  * a refusal is InvalidArgumentError (or OperatorNotFoundError for an op
//    the dispatcher lacks), names a field that is wrong, quotes no raw bytes,
//    and leaves the registry (and, sampled, the dispatcher) unchanged;
//  * an accepted call does what it says (the node is in its graph, an
//    installed chain is the enabled nodes, a filter lists its entries);
//
// and every 200 calls the registry is restored to its first snapshot, which
// must put every dispatch table the fuzzer touched back exactly.

#include "observed.h"

#include <ATen/ops/add.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <random>

namespace native_registry::testing {
namespace {

using ::testing::HasSubstr;

long env_count(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  const long value = std::strtol(text, nullptr, 10);
  return value > 0 ? value : fallback;
}

// ---- the oracle ----------------------------------------------------------------

bool blank(const std::string& s) {
  for (unsigned char c : s) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\v' && c != '\f' && c != '\r') return false;
  }
  return true;
}

bool identifier(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (unsigned char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool lib_ok(const std::string& s) { return identifier(s); }

bool op_ok(const std::string& s) {
  const auto dot = s.find('.');
  if (dot == std::string::npos) return identifier(s);
  return identifier(s.substr(0, dot)) && identifier(s.substr(dot + 1));
}

// The canonical name of a key an override may use, or "" if it may not.
std::string key_ok(const std::string& s) {
  if (blank(s)) return "";
  c10::DispatchKey key;
  try {
    key = c10::parseDispatchKey(s);
  } catch (const c10::Error&) {
    return "";
  }
  using K = c10::DispatchKey;
  if (key == K::Meta || key == K::CompositeImplicitAutograd ||
      key == K::CompositeExplicitAutograd || key == K::Undefined ||
      c10::isAliasDispatchKey(key) ||
      c10::isPerBackendFunctionalityKey(key)) {  // Dense, Sparse, ...: no kernel runs there
    return "";
  }
  return c10::toString(key);
}

c10::OperatorName op_name(const GraphKey& key) {
  const auto dot = key.op_symbol.find('.');
  if (dot == std::string::npos) return {key.lib_symbol + "::" + key.op_symbol, ""};
  return {key.lib_symbol + "::" + key.op_symbol.substr(0, dot), key.op_symbol.substr(dot + 1)};
}

bool op_exists(const GraphKey& key) {
  return c10::Dispatcher::singleton().findSchema(op_name(key)).has_value();
}

// ---- the generator -------------------------------------------------------------

class Fuzzer {
 public:
  Fuzzer(Registry& registry, uint64_t seed) : registry_(registry), rng_(seed) {
    for (uint16_t i = 0; i < static_cast<uint16_t>(c10::DispatchKey::EndOfAliasKeys); ++i) {
      dispatch_keys_.push_back(c10::toString(static_cast<c10::DispatchKey>(i)));
    }
  }

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  bool chance(int percent) { return pick(100) < percent; }
  template <class T>
  const T& one_of(const std::vector<T>& items) {
    return items[static_cast<size_t>(pick(static_cast<int>(items.size())))];
  }

  std::string random_bytes(size_t max_length) {
    std::string out(static_cast<size_t>(pick(static_cast<int>(max_length) + 1)), '\0');
    for (char& c : out) c = static_cast<char>(pick(256));
    return out;
  }

  std::string random_identifier() {
    static const std::string first = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
    static const std::string rest = first + "0123456789";
    // "zq" keeps random identifiers clear of real aten ops ("t", "mm", ...),
    // whose kernels LibTorch itself calls.
    std::string out = "zq";
    out += first[static_cast<size_t>(pick(static_cast<int>(first.size())))];
    const int length = pick(10);
    for (int i = 0; i < length; ++i) out += rest[static_cast<size_t>(pick(static_cast<int>(rest.size())))];
    return out;
  }

  std::string mutate(std::string s) {
    const int edits = 1 + pick(3);
    for (int i = 0; i < edits; ++i) {
      const size_t at = s.empty() ? 0 : static_cast<size_t>(pick(static_cast<int>(s.size()) + 1));
      const char byte = static_cast<char>(pick(256));
      switch (pick(3)) {
        case 0: s.insert(s.begin() + static_cast<long>(at), byte); break;
        case 1: if (at < s.size()) s.erase(at, 1); break;
        case 2: if (at < s.size()) s[at] = byte; break;
      }
    }
    return s;
  }

  std::string hostile() {
    static const std::vector<std::string> pool{
        "", " ", "\t", "\n", " \r\n\v\f", "a b", "ns::op", "aten::mul", "mul.Tensor.out", ".",
        "..", "mul.", ".Tensor", "9abc", "m\xc3\xbcl", "\xff\xfe", std::string("a\0b", 3),
        "_native", "CPU", "cpu", "Meta", "Autograd", "CompositeImplicitAutograd", "\x7f",
        "\xe2\x80\x8b", "mul\xe2\x80\x8b.Tensor", "__", "_", "a.b.c", "::", "aten.", "%s%n"};
    switch (pick(10)) {
      case 0: return std::string(static_cast<size_t>(1000 + pick(99001)), 'a');  // very long
      case 1: return random_bytes(16);
      case 2: return random_bytes(300);
      default: return one_of(pool);
    }
  }

  // A name for `field`, valid or not.
  std::string name(const std::vector<std::string>& valid) {
    const int roll = pick(100);
    if (roll < 55) return one_of(valid);
    if (roll < 70) return mutate(one_of(valid));
    if (roll < 80) return random_identifier();
    return hostile();
  }

  std::string dsl() { return name({"dsl_a", "dsl_b", "dsl_c", "d\xc3\xa9j\xc3\xa0", "x y"}); }
  std::string lib() {
    return name({"aten", "aten", fixtures::kTestNamespace, fixtures::kSecondTestNamespace,
                 fixtures::kMissingNamespace});
  }
  std::string op(const std::string& lib) {
    if (lib == "aten") return name({"mul.Tensor", "add.Tensor", "bmm", "mul.NoSuchOverload", "zq_absent"});
    return name({"twice", "twice", "zq_absent", "twice.overload"});
  }
  std::string key() {
    const int roll = pick(100);
    if (roll < 45) return "CPU";
    if (roll < 75) return one_of(dispatch_keys_);
    if (roll < 90) return mutate(one_of(dispatch_keys_));
    return hostile();
  }

  Registry& registry_;
  std::mt19937_64 rng_;
  std::vector<std::string> dispatch_keys_;
};

// Ops whose kernels LibTorch may call while the fuzzer runs are never given a
// router; these are the ones the fuzzer may install on (or ops that do not
// exist, which fail at install).
bool safe_to_install(const GraphKey& key) {
  if (!op_exists(key)) return true;
  const c10::OperatorName name = op_name(key);
  for (const c10::OperatorName& watched : watched_ops()) {
    if (name == watched) return true;
  }
  return false;
}

class FuzzTest : public RegistryTest {
 protected:
  void SetUp() override {
    RegistryTest::SetUp();
    registry().set_log_sink([this](LogLevel level, const std::string&) {
      if (level == LogLevel::kWarning) ++warning_count_;
    });
  }

  bool enabled(const OverrideNode& node, const std::set<std::string>& dsl,
               const std::set<std::string>& ops, const std::set<std::string>& keys) const {
    const bool filtered =
        dsl.count(node.dsl_name) || ops.count(node.key.op_symbol) || keys.count(node.key.dispatch_key);
    return !filtered || node.options.unconditional_override;
  }
  Graph enabled_chain(const Graph& graph, const std::set<std::string>& dsl,
                      const std::set<std::string>& ops, const std::set<std::string>& keys) const {
    Graph out;
    for (const NodePtr& node : graph) {
      if (enabled(*node, dsl, ops, keys)) out.push_back(node);
    }
    return out;
  }
  Graph enabled_now(const GraphKey& key) const {
    Graph out;
    for (const NodePtr& node : registry_const().graph(key)) {
      if (registry_const().is_enabled(*node)) out.push_back(node);
    }
    return out;
  }
  const Registry& registry_const() const { return const_cast<FuzzTest*>(this)->registry(); }

  // Whether publishing `chain` at `key` would need a router the dispatcher
  // cannot take: an installed graph without one, a chain, and no such op.
  bool needs_missing_router(const GraphKey& key, const Graph& chain) {
    return installed_.count(key) && registry().router_state(key) == RouterState::kAbsent &&
           !chain.empty() && !op_exists(key);
  }

  void expect_unchanged(const std::string& before, const char* what) {
    const std::string after = observe(registry());
    if (after != before) {
      ADD_FAILURE() << what << " refused, yet the registry changed (input " << inputs_ << ")";
      ++failures_;
    }
  }
  void check_error_message(const std::string& message, const std::vector<std::string>& fields,
                           const char* what) {
    bool named = false;
    for (const std::string& field : fields) named |= message.find(field) != std::string::npos;
    if (!named || !printable(message) || message.empty()) {
      ADD_FAILURE() << what << ": the error names none of the wrong fields or quotes raw bytes: "
                    << message.substr(0, 300);
      ++failures_;
    }
  }

  void fuzz_register(Fuzzer& f);
  void fuzz_install(Fuzzer& f);
  void fuzz_install_all();
  void fuzz_filter(Fuzzer& f);
  void fuzz_reorder(Fuzzer& f);
  void fuzz_namespace(Fuzzer& f);
  void fuzz_queries(Fuzzer& f);
  void fuzz_call(Fuzzer& f);
  void restore_pristine();

  std::set<GraphKey> installed_;  // install_graph has taken charge of these
  std::vector<NodePtr> ever_;     // every node registered, for junk orderings
  std::set<std::string> node_ids_;
  long inputs_ = 0, accepted_ = 0, refused_ = 0, failures_ = 0, calls_ = 0, restores_ = 0;
  long dispatcher_checks_ = 0;
  int warning_count_ = 0;
  Snapshot pristine_;
  std::string pristine_observed_;
  fixtures::DispatcherFingerprint pristine_tables_;
};

void FuzzTest::fuzz_register(Fuzzer& f) {
  const std::string dsl = f.dsl(), lib = f.lib(), op = f.op(lib), key = f.key();
  const bool with_impl = !f.chance(5);
  const bool unconditional = f.chance(10);
  const bool with_cond = !f.chance(unconditional ? 50 : 5);
  const bool with_runtime = f.chance(10);
  std::vector<std::string> wrong;
  if (blank(dsl)) wrong.push_back("dsl_name");
  if (!lib_ok(lib)) wrong.push_back("lib_symbol");
  if (!op_ok(op)) wrong.push_back("op_symbol");
  if (key_ok(key).empty()) wrong.push_back("dispatch_key");
  if (!with_impl) wrong.push_back("impl");
  if (unconditional && with_runtime) wrong.push_back("try_initialize_runtime");
  if (!unconditional && !with_cond) wrong.push_back("cond");
  if (lib_ok(lib) && !registry().is_namespace_allowed(lib)) wrong.push_back("lib_symbol");

  CondFn cond;
  if (with_cond) {
    switch (f.pick(3)) {
      case 0: cond = constant_cond(true); break;
      case 1: cond = constant_cond(false); break;
      case 2:
        cond = [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
          throw std::runtime_error("fuzzed cond throws");
        };
        break;
    }
  }
  OverrideOptions options;
  options.unconditional_override = unconditional;
  if (with_runtime) {
    const bool up = f.chance(50);
    options.try_initialize_runtime = [up] { return up; };
  }
  const std::string before = observe(registry());
  try {
    NodePtr node = registry().register_op_override(
        dsl, lib, op, key, cond, with_impl ? fill_impl(100 + f.pick(50)) : ImplFn{}, options);
    ++accepted_;
    if (!wrong.empty()) {
      ADD_FAILURE() << "accepted a registration the oracle refuses (" << wrong[0] << ")";
      ++failures_;
      return;
    }
    const GraphKey graph_key{lib, op, key_ok(key)};
    const Graph graph = registry().graph(graph_key);
    const bool ok = node && node->dsl_name == dsl && node->key == graph_key &&
                    !graph.empty() && graph.back() == node && identifier(node->node_id) &&
                    node_ids_.insert(node->node_id).second;
    if (!ok) {
      ADD_FAILURE() << "registered node does not record its input or is not last in its graph";
      ++failures_;
    }
    ever_.push_back(node);
  } catch (const InvalidArgumentError& e) {
    ++refused_;
    if (wrong.empty()) {
      ADD_FAILURE() << "refused a registration the oracle accepts: " << e.what();
      ++failures_;
    }
    check_error_message(e.what(), wrong, "register_op_override");
    expect_unchanged(before, "register_op_override");
  }
}

void FuzzTest::fuzz_install(Fuzzer& f) {
  GraphKey key;
  const std::vector<GraphKey> keys = registry().graph_keys();
  if (!keys.empty() && f.chance(70)) {
    key = f.one_of(keys);
  } else {
    key = {f.lib(), "", f.key()};
    key.op_symbol = f.op(key.lib_symbol);
  }
  const bool valid =
      lib_ok(key.lib_symbol) && op_ok(key.op_symbol) && !key_ok(key.dispatch_key).empty();
  if (valid && !safe_to_install(key)) return;
  ++inputs_;
  const InstallMode mode = f.chance(20) ? InstallMode::kReinstall : InstallMode::kUpdate;
  const Graph chain = enabled_now(key);
  const bool missing = !chain.empty() && !op_exists(key);
  const std::string before = observe(registry());
  const auto tables = dispatcher_now();
  try {
    registry().install_graph(key, mode);
    ++accepted_;
    installed_.insert(key);
    if (!valid || missing) {
      ADD_FAILURE() << "install_graph took " << key.to_string().substr(0, 200);
      ++failures_;
    } else if (!chain.empty() && registry().published_chain(key) != chain) {
      ADD_FAILURE() << "installed chain is not the enabled nodes of " << key.to_string();
      ++failures_;
    }
  } catch (const RegistryError& e) {
    ++refused_;
    const bool expected = valid ? missing && dynamic_cast<const OperatorNotFoundError*>(&e)
                                : dynamic_cast<const InvalidArgumentError*>(&e) != nullptr;
    if (!expected) {
      ADD_FAILURE() << "install_graph of " << key.to_string().substr(0, 200)
                    << " failed unexpectedly: " << std::string(e.what()).substr(0, 300);
      ++failures_;
    }
    check_error_message(e.what(), {"lib_symbol", "op_symbol", "dispatch_key", "not found"},
                        "install_graph");
    expect_unchanged(before, "install_graph");
    ++dispatcher_checks_;
    EXPECT_EQ(dispatcher_now().difference(tables), "");
  }
}

void FuzzTest::fuzz_install_all() {
  bool missing = false;
  for (const GraphKey& key : registry().graph_keys()) {
    if (!safe_to_install(key)) return;
    missing |= !enabled_now(key).empty() && !op_exists(key);
  }
  ++inputs_;
  const std::string before = observe(registry());
  try {
    registry().install_all();
    ++accepted_;
    for (const GraphKey& key : registry().graph_keys()) installed_.insert(key);
    if (missing) {
      ADD_FAILURE() << "install_all installed graphs of an op that does not exist";
      ++failures_;
    }
  } catch (const OperatorNotFoundError& e) {
    ++refused_;
    if (!missing) {
      ADD_FAILURE() << "install_all failed unexpectedly: " << e.what();
      ++failures_;
    }
    expect_unchanged(before, "install_all");
  }
}

void FuzzTest::fuzz_filter(Fuzzer& f) {
  ++inputs_;
  Filter filter;
  const int entries = f.pick(4);
  for (int i = 0; i < entries; ++i) {
    switch (f.pick(3)) {
      case 0: filter.dsl_names.push_back(f.dsl()); break;
      case 1: filter.op_symbols.push_back(f.op(f.chance(50) ? "aten" : "ns")); break;
      case 2: filter.dispatch_keys.push_back(f.key()); break;
    }
  }
  bool any_blank = false;
  for (const auto* list : {&filter.dsl_names, &filter.op_symbols, &filter.dispatch_keys}) {
    for (const std::string& entry : *list) any_blank |= blank(entry);
  }
  const bool disable = f.chance(55);
  // The filters after the call, and the graphs it names.
  const Filter now = registry().filters();
  std::set<std::string> dsl(now.dsl_names.begin(), now.dsl_names.end());
  std::set<std::string> ops(now.op_symbols.begin(), now.op_symbols.end());
  std::set<std::string> keys(now.dispatch_keys.begin(), now.dispatch_keys.end());
  for (auto [list, set] : {std::pair{&filter.dsl_names, &dsl}, std::pair{&filter.op_symbols, &ops},
                           std::pair{&filter.dispatch_keys, &keys}}) {
    for (const std::string& entry : *list) disable ? (void)set->insert(entry) : (void)set->erase(entry);
  }
  std::set<GraphKey> named;
  for (auto [index, list] : {std::pair{registry().graphs_by_dsl_name(), &filter.dsl_names},
                             std::pair{registry().graphs_by_op_symbol(), &filter.op_symbols},
                             std::pair{registry().graphs_by_dispatch_key(), &filter.dispatch_keys}}) {
    for (const std::string& entry : *list) {
      auto it = index.find(entry);
      if (it != index.end()) named.insert(it->second.begin(), it->second.end());
    }
  }
  bool missing = false;
  for (const GraphKey& key : named) {
    missing |= needs_missing_router(key, enabled_chain(registry().graph(key), dsl, ops, keys));
  }
  const std::string before = observe(registry());
  try {
    disable ? registry().deregister_op_overrides(filter) : registry().reenable_op_overrides(filter);
    ++accepted_;
    if (any_blank || missing) {
      ADD_FAILURE() << "a filter change the oracle refuses went through";
      ++failures_;
      return;
    }
    for (const GraphKey& key : named) {
      if (registry().router_state(key) == RouterState::kAbsent) continue;
      if (registry().published_chain(key) != enabled_chain(registry().graph(key), dsl, ops, keys)) {
        ADD_FAILURE() << "after a filter change " << key.to_string() << " routes a stale chain";
        ++failures_;
      }
    }
  } catch (const RegistryError& e) {
    ++refused_;
    const bool expected = any_blank ? dynamic_cast<const InvalidArgumentError*>(&e) != nullptr
                                    : missing && dynamic_cast<const OperatorNotFoundError*>(&e);
    if (!expected) {
      ADD_FAILURE() << "a filter change failed unexpectedly: " << std::string(e.what()).substr(0, 300);
      ++failures_;
    }
    check_error_message(e.what(), {"entry", "not found"}, "filter change");
    expect_unchanged(before, "filter change");
  }
}

void FuzzTest::fuzz_reorder(Fuzzer& f) {
  ++inputs_;
  const bool reinstall = f.chance(50);
  // For each graph: 0 keeps a random subset in random order, 1..6 are junk.
  std::map<GraphKey, int> plan;
  std::map<GraphKey, Graph> expected;
  int junk = 0;
  for (const GraphKey& key : registry().graph_keys()) {
    const Graph graph = registry().graph(key);
    // The function is told op symbol and key, not namespace: it finds its
    // graph by content, which only empty graphs share, so those keep order.
    const int kind = graph.empty() || f.chance(50) ? 0 : 1 + f.pick(6);
    plan[key] = kind;
    if (kind == 0) {
      Graph out;
      for (const NodePtr& node : graph) {
        if (f.chance(85)) out.push_back(node);
      }
      std::shuffle(out.begin(), out.end(), f.rng_);
      expected[key] = out;
    } else {
      expected[key] = graph;
      ++junk;
    }
  }
  const std::vector<NodePtr> foreign = ever_;
  const uint64_t salt = f.rng_();
  OrderingFn fn = [&](const std::string& op_symbol, const std::string& dispatch_key,
                      const Graph& graph) -> Graph {
    GraphKey key;
    for (const auto& [candidate, kind] : plan) {
      if (candidate.op_symbol == op_symbol && candidate.dispatch_key == dispatch_key &&
          registry().graph(candidate) == graph) {
        key = candidate;
      }
    }
    switch (plan[key]) {
      case 0: return expected[key];
      case 1: throw std::runtime_error("fuzzed ordering throws");
      case 2: throw static_cast<int>(salt);
      case 3: { Graph g = graph; g.push_back(nullptr); return g; }
      case 4: { Graph g = graph; g.push_back(graph.empty() ? nullptr : graph[0]); return g; }
      case 5: {  // a node of another graph (or a null one when there is none)
        for (const NodePtr& node : foreign) {
          if (!(node->key == key)) return Graph{node};
        }
        return Graph{nullptr};
      }
      default: {  // a node of the same key this graph does not hold
        auto stranger = std::make_shared<OverrideNode>();
        stranger->key = key;
        stranger->node_id = "stranger";
        return Graph{stranger};
      }
    }
  };
  bool missing = false;
  if (reinstall) {
    const Filter now = registry().filters();
    const std::set<std::string> dsl(now.dsl_names.begin(), now.dsl_names.end());
    const std::set<std::string> ops(now.op_symbols.begin(), now.op_symbols.end());
    const std::set<std::string> keys(now.dispatch_keys.begin(), now.dispatch_keys.end());
    for (const auto& [key, graph] : expected) {
      if (graph != registry().graph(key)) {
        missing |= needs_missing_router(key, enabled_chain(graph, dsl, ops, keys));
      }
    }
  }
  const std::string before = observe(registry());
  const int warnings_before = warning_count_;
  try {
    registry().reorder_graphs(fn, reinstall);
    ++accepted_;
    if (missing) {
      ADD_FAILURE() << "reorder with reinstall published a chain whose op does not exist";
      ++failures_;
    }
    for (const auto& [key, graph] : expected) {
      if (registry().graph(key) != graph) {
        ADD_FAILURE() << "reorder left " << key.to_string() << " other than the oracle says";
        ++failures_;
      }
    }
    if (warning_count_ - warnings_before != junk) {
      ADD_FAILURE() << "expected " << junk << " failed transformations, got "
                    << warning_count_ - warnings_before;
      ++failures_;
    }
  } catch (const OperatorNotFoundError& e) {
    ++refused_;
    if (!missing) {
      ADD_FAILURE() << "reorder failed unexpectedly: " << e.what();
      ++failures_;
    }
    expect_unchanged(before, "reorder_graphs");
  }
}

void FuzzTest::fuzz_namespace(Fuzzer& f) {
  ++inputs_;
  const std::string ns = f.chance(30) ? f.hostile() : f.lib();
  const std::string before = observe(registry());
  if (f.chance(25)) {
    registry().disallow_namespace(ns);
    ++accepted_;
    if (registry().is_namespace_allowed(ns)) {
      ADD_FAILURE() << "disallowed namespace is still allowed";
      ++failures_;
    }
    return;
  }
  const bool valid = lib_ok(ns) && ns != "_native";
  try {
    registry().allow_namespace(ns);
    ++accepted_;
    if (!valid || !registry().is_namespace_allowed(ns)) {
      ADD_FAILURE() << "allow_namespace misbehaved on a " << (valid ? "valid" : "bad") << " name";
      ++failures_;
    }
  } catch (const InvalidArgumentError& e) {
    ++refused_;
    if (valid) {
      ADD_FAILURE() << "allow_namespace refused a valid name: " << e.what();
      ++failures_;
    }
    check_error_message(e.what(), {"lib_symbol"}, "allow_namespace");
    expect_unchanged(before, "allow_namespace");
  }
}

void FuzzTest::fuzz_queries(Fuzzer& f) {
  ++inputs_;
  ++accepted_;
  const GraphKey key{f.lib(), f.op("aten"), f.key()};
  const std::string before = observe(registry());
  const std::vector<GraphKey> keys = registry().graph_keys();
  const bool known = std::find(keys.begin(), keys.end(), key) != keys.end();
  (void)registry().get_dsl_operations(f.dsl(), key.lib_symbol);
  (void)registry().router_state(key);
  (void)registry().published_chain(key);
  if (!known && (registry().router_state(key) != RouterState::kAbsent ||
                 !registry().published_chain(key).empty())) {
    ADD_FAILURE() << "a key without a graph reports a router";
    ++failures_;
  }
  if (observe(registry()) != before) {
    ADD_FAILURE() << "a query changed the registry";
    ++failures_;
  }
}

void FuzzTest::fuzz_call(Fuzzer& f) {
  ++inputs_;
  ++calls_;
  try {
    switch (f.pick(4)) {
      case 0: (void)call_mul(tensor({2, 3}), tensor({4, 5})); break;
      case 1: (void)at::add(tensor({2, 3}), tensor({4, 5})); break;
      case 2: (void)at::bmm(at::full({1, 2, 2}, 1.f), at::full({1, 2, 2}, 2.f)); break;
      case 3: (void)(f.chance(50) ? ns1() : ns2()).twice(tensor({1, 2})); break;
    }
  } catch (const std::exception&) {
    // Fuzzed conds and impls may throw; the call must fail cleanly, no more.
  }
}

void FuzzTest::restore_pristine() {
  ++restores_;
  registry().restore(pristine_);
  registry().set_empty_chain_policy(EmptyChainPolicy::kKeepDormantRouter);
  installed_.clear();
  node_ids_.clear();
  if (ever_.size() > 64) ever_.erase(ever_.begin(), ever_.end() - 64);  // some dead nodes stay
  EXPECT_EQ(observe(registry()), pristine_observed_);
  EXPECT_EQ(dispatcher_now().difference(pristine_tables_), "");
}

TEST_F(FuzzTest, HostileCallsAreRefusedCleanlyOrDoWhatTheySay) {
  const long budget = env_count("NR_FUZZ_INPUTS", 2000);
  const auto seed = static_cast<uint64_t>(env_count("NR_FUZZ_SEED", 6151));
  RecordProperty("seed", std::to_string(seed));
  registry().allow_namespace(fixtures::kTestNamespace);
  registry().allow_namespace(fixtures::kSecondTestNamespace);
  registry().allow_namespace(fixtures::kMissingNamespace);
  pristine_ = registry().snapshot();
  pristine_observed_ = observe(registry());
  pristine_tables_ = dispatcher_now();
  Fuzzer f(registry(), seed);

  long since_restore = 0;
  while (inputs_ < budget && failures_ < 20) {
    const int roll = f.pick(100);
    if (roll < 40) {
      ++inputs_;
      fuzz_register(f);
    } else if (roll < 55) {
      fuzz_install(f);
    } else if (roll < 58) {
      fuzz_install_all();
    } else if (roll < 72) {
      fuzz_filter(f);
    } else if (roll < 78) {
      fuzz_reorder(f);
    } else if (roll < 84) {
      fuzz_namespace(f);
    } else if (roll < 88) {
      fuzz_queries(f);
    } else if (roll < 90) {
      ++inputs_;
      ++accepted_;
      registry().set_empty_chain_policy(f.chance(50) ? EmptyChainPolicy::kRemoveRouter
                                                     : EmptyChainPolicy::kKeepDormantRouter);
    } else {
      fuzz_call(f);
    }
    // After every step, as PyTorch's OperatorEntry::checkInvariants.
    try {
      registry().check_invariants();
    } catch (const std::logic_error& broken) {
      ++failures_;
      ADD_FAILURE() << broken.what() << "\n" << registry().dump_state();
    }
    if (++since_restore >= 200) {
      since_restore = 0;
      restore_pristine();
    }
  }
  restore_pristine();
  EXPECT_EQ(failures_, 0);
  EXPECT_GT(accepted_, 0);
  EXPECT_GT(refused_, 0);
  RecordProperty("inputs", std::to_string(inputs_));
  RecordProperty("accepted", std::to_string(accepted_));
  RecordProperty("refused", std::to_string(refused_));
  RecordProperty("restores", std::to_string(restores_));
  std::printf("fuzz: %ld inputs (%ld accepted, %ld refused, %ld op calls), %ld restores, "
              "seed %llu\n",
              inputs_, accepted_, refused_, calls_, restores_,
              static_cast<unsigned long long>(seed));
}

}  // namespace
}  // namespace native_registry::testing
