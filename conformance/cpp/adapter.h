#pragma once

// The interface an implementation exposes to the C++ conformance suite.
//
// The suite (a static library of value-parameterised GoogleTest tests) is
// written once against RegistryAdapter. An implementation links the suite and
// instantiates it with a factory for its adapter:
//
//   INSTANTIATE_TEST_SUITE_P(Mine, Conformance,
//       ::testing::Values(conformance::Implementation{"mine", &make_my_adapter}));
//
// The interface names no type of any implementation (the reference's
// included): conds, impls and runtime checks are std::functions over the c10
// dispatcher's boxed calling convention, which any implementation on the
// dispatcher can take as they are. Errors are reported with the two
// exception types below. conformance/ADAPTERS.md describes every member.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace conformance {

using Stack = torch::jit::Stack;

// Whether an override takes this call; sees the boxed call, must not change it.
using CondFn = std::function<bool(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                  const Stack& stack)>;
// A boxed kernel: pops the arguments, pushes the results.
using ImplFn = std::function<void(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                  Stack* stack)>;
// Whether the override's runtime is usable; false skips the node.
using TryInitializeRuntimeFn = std::function<bool()>;

struct Key;
// Feature aot-coverage: whether a kernel compiled into the op's own serves
// this call (upstream main's aot_manifest covers); told the key of the graph
// whose router the call reached.
using CoverageCheckFn = std::function<bool(const Key& graph, const c10::OperatorHandle& op,
                                           c10::DispatchKeySet keys, const Stack& stack)>;

// A graph's key: (lib_symbol, op_symbol, dispatch_key).
struct Key {
  std::string lib_symbol;    // "aten" or another namespace
  std::string op_symbol;     // "mul.Tensor", "bmm"
  std::string dispatch_key;  // "CPU", "AutocastCPU", ...

  friend bool operator==(const Key& a, const Key& b) {
    return std::tie(a.lib_symbol, a.op_symbol, a.dispatch_key) ==
           std::tie(b.lib_symbol, b.op_symbol, b.dispatch_key);
  }
  friend bool operator<(const Key& a, const Key& b) {
    return std::tie(a.lib_symbol, a.op_symbol, a.dispatch_key) <
           std::tie(b.lib_symbol, b.op_symbol, b.dispatch_key);
  }
};

// The three lists of deregister_op_overrides / reenable_op_overrides.
struct Filter {
  std::vector<std::string> dsl_names;
  std::vector<std::string> op_symbols;  // bare symbols, any namespace
  std::vector<std::string> dispatch_keys;
};

// Refused input (Python: ValueError).
struct InvalidArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// An op that does not resolve at install (Python: AttributeError).
struct OperatorNotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Override {
  std::string dsl_name, lib_symbol, op_symbol, dispatch_key;
  CondFn cond;  // empty: none given
  ImplFn impl;
  TryInitializeRuntimeFn try_initialize_runtime;  // empty: none given
  bool unconditional_override = false;
};

// What the suite can see of a node.
struct NodeInfo {
  std::string dsl_name, lib_symbol, op_symbol, dispatch_key, node_id;
  bool unconditional_override = false;
  bool has_try_initialize_runtime = false;
  bool active = true;
};

// Feature explain: what a call would do, told node by node (the reference's
// Registry::explain). Verdicts: "disabled", "masked", "accepted", "declined",
// "raised", "runtime check", "not reached", "native op" (and "not
// published"); kernel kinds: "impl", "fallback", "fallthrough", "no kernel",
// "no router", "raises".
struct ExplainedNodeInfo {
  std::string node_id, dsl_name, verdict, detail;
};
struct ExplainInfo {
  std::string op;            // "aten::mul.Tensor"
  std::string dispatch_key;  // of the graph explained
  std::string why_key;       // why that key, in words
  std::string router;        // the router's state, in words
  std::string coverage;      // what the coverage check answered, in words
  std::vector<ExplainedNodeInfo> nodes;
  std::string kernel;           // its kind
  std::string kernel_node_id;   // for "impl"
  std::string kernel_dsl_name;  // for "impl"
  std::string kernel_detail;
  std::string table;  // the readable form
};

// Undoes something when destroyed (a scope, a mask).
struct Scope {
  virtual ~Scope() = default;
};

// Receives (op_symbol, dispatch_key, nodes) and returns node ids in the new order.
using Ordering = std::function<std::vector<std::string>(
    const std::string& op_symbol, const std::string& dispatch_key,
    const std::vector<NodeInfo>& graph)>;

class RegistryAdapter {
 public:
  virtual ~RegistryAdapter() = default;
  virtual std::string name() const = 0;
  // Feature names as in conformance/catalogue.toml's `requires`.
  virtual bool supports(const std::string& feature) const = 0;

  // Everything done while the returned scope lives is undone when it dies,
  // dispatcher included.
  virtual std::unique_ptr<Scope> scope() = 0;
  // Optional: the implementation's own consistency check, throwing on a
  // broken invariant. The suite runs it after each test, before and after
  // the test's scope is undone.
  virtual void self_check() {}

  virtual void register_override(const Override& o) = 0;
  virtual std::vector<NodeInfo> graph(const Key& key) = 0;
  // Replaces the graph by the named nodes of it, in that order.
  virtual void set_graph(const Key& key, const std::vector<std::string>& node_ids) = 0;
  virtual void reorder(const Ordering& fn) = 0;
  // Warnings logged since the adapter was made.
  virtual std::vector<std::string> warnings() = 0;
  // Calls `handler` with each warning as the registry logs it, besides
  // keeping it for warnings(); an empty handler: none. A log handler is user
  // code, so (feature reentrant-control-plane) it may use the registry.
  virtual void set_warning_handler(std::function<void(const std::string&)> handler) = 0;

  // (Re)installs one graph: the router is replaced on a fresh capture of the
  // live kernel; an empty chain leaves no router.
  virtual void install(const Key& key) = 0;
  virtual void install_all() = 0;
  // Whether a router kernel for the key is in the dispatcher, whether or not
  // its chain holds a node (a dormant router counts).
  virtual bool router_installed(const Key& key) = 0;

  virtual void disable(const Filter& filter) = 0;
  virtual void enable(const Filter& filter) = 0;
  virtual std::unique_ptr<Scope> unconditional_masked() = 0;

  virtual std::vector<std::string> dsl_operations(const std::string& dsl,
                                                  const std::string& lib_symbol) = 0;
  virtual void allow_namespace(const std::string& lib_symbol) = 0;
  virtual bool namespace_allowed(const std::string& lib_symbol) = 0;

  // The `_native::<node_id>` op carrying a node, if the implementation has one.
  // The handle stays valid while the adapter lives, also once the override is
  // torn down (an implementation that undefines retired ops holds the op as
  // a program recorded with it would).
  virtual std::optional<c10::OperatorHandle> native_op(const NodeInfo& node) = 0;

  // Feature aot-coverage (upstream main's AOT pre-check). While the returned
  // scope lives, routers of graphs installed in it ask `check` once per call
  // before any cond; a covered call runs the op's own kernel.
  virtual std::unique_ptr<Scope> coverage_check(CoverageCheckFn check) {
    (void)check;
    throw std::logic_error(name() + " lacks feature aot-coverage");
  }
  // Feature impl-error-fallback: while the scope lives, a chosen impl's error
  // is the call's ("raise") or runs the op's own kernel ("fallback").
  virtual std::unique_ptr<Scope> impl_error_policy(const std::string& policy) {
    (void)policy;
    throw std::logic_error(name() + " lacks feature impl-error-fallback");
  }
  // Feature explain: what a call of `op` on `stack` (its boxed arguments)
  // would do; `dispatch_key` empty: the key the call reaches first that has
  // a graph. Runs no impl, asks no runtime check. Bad input (no graph at
  // the key, an unknown `_native` node) throws InvalidArgument.
  virtual ExplainInfo explain(const c10::OperatorHandle& op, const Stack& stack,
                              const std::string& dispatch_key) {
    (void)op, (void)stack, (void)dispatch_key;
    throw std::logic_error(name() + " lacks feature explain");
  }
  // Feature aot-coverage: coverage checks switched on or off while the scope lives.
  virtual std::unique_ptr<Scope> aot_enabled(bool enabled) {
    (void)enabled;
    throw std::logic_error(name() + " lacks feature aot-coverage");
  }
  // Feature thread-disables: while the scope lives (it is closed on the
  // thread that opened it), this thread's calls see the nodes `filter`
  // names as disabled.
  virtual std::unique_ptr<Scope> disabled_in_thread(const Filter& filter) {
    (void)filter;
    throw std::logic_error(name() + " lacks feature thread-disables");
  }
  // Feature routing-stats: counting on or off while the scope lives; a
  // node's counts, a graph's (zeros for a graph that routed nothing); reset.
  struct NodeCounts {
    uint64_t taken = 0, declined = 0, runtime_unavailable = 0, raised = 0;
    friend bool operator==(const NodeCounts&, const NodeCounts&) = default;
  };
  struct GraphCounts {
    uint64_t calls = 0, fallbacks = 0;
    friend bool operator==(const GraphCounts&, const GraphCounts&) = default;
  };
  virtual std::unique_ptr<Scope> collect_stats(bool collect) {
    (void)collect;
    throw std::logic_error(name() + " lacks feature routing-stats");
  }
  virtual NodeCounts node_counts(const NodeInfo& node) {
    (void)node;
    throw std::logic_error(name() + " lacks feature routing-stats");
  }
  virtual GraphCounts graph_counts(const Key& key) {
    (void)key;
    throw std::logic_error(name() + " lacks feature routing-stats");
  }
  virtual void reset_stats() { throw std::logic_error(name() + " lacks feature routing-stats"); }
};

struct Implementation {
  std::string name;
  std::function<std::unique_ptr<RegistryAdapter>()> make;
};

// ---- for adapters: small pieces most of them need ----

// The nodes of `nodes` named by `ids` (NodePtr: a pointer-like with a
// `node_id`), in the order of `ids`; an unknown id keeps no node.
template <typename NodePtr>
std::vector<NodePtr> nodes_by_ids(const std::vector<NodePtr>& nodes, const std::vector<std::string>& ids) {
  std::vector<NodePtr> out;
  for (const std::string& id : ids) {
    for (const NodePtr& node : nodes) {
      if (node->node_id == id) {
        out.push_back(node);
        break;
      }
    }
  }
  return out;
}

// Runs f, turning the implementation's refusal (Refused) and unknown-op
// (NotFound) exceptions into the suite's InvalidArgument and OperatorNotFound.
template <typename Refused, typename NotFound, typename F>
void with_suite_errors(F&& f) {
  try {
    f();
  } catch (const Refused& e) {
    throw InvalidArgument(e.what());
  } catch (const NotFound& e) {
    throw OperatorNotFound(e.what());
  }
}

}  // namespace conformance
