#pragma once

// The vocabulary of the registry: graph keys, override nodes, the callables a
// DSL author supplies, and the options of a registration.
//
// Owns: those types (types.cpp defines their few functions). May not touch:
// the registry: nothing here refers to Registry or to src/.
// OverrideNode::run_impl and ensure_runtime are for the core's call path
// (call_path.cpp, native_op.cpp), public only because nodes are.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace native_registry {

using Stack = torch::jit::Stack;

// Decides whether an override takes this call. It sees the boxed call as the
// router received it and must not change the stack.
using CondFn = std::function<bool(const c10::OperatorHandle& op,
                                  c10::DispatchKeySet keys, const Stack& stack)>;

// Runs the override: a boxed kernel that pops the arguments off `stack` and
// pushes the results, exactly as a kernel of the target op would.
using ImplFn = std::function<void(const c10::OperatorHandle& op,
                                  c10::DispatchKeySet keys, Stack* stack)>;

// Says whether the override's runtime (a JIT, a driver, ...) is usable. An
// override whose runtime is unavailable is skipped as if its cond declined.
using TryInitializeRuntimeFn = std::function<bool()>;

// One graph per (namespace, op symbol, dispatch key).
struct GraphKey;

// Whether a kernel compiled ahead of time into the op's own kernel serves
// this call (upstream main's aot_manifest `covers`): a covered call declines
// every node of the graph, unconditional ones too, and runs the kernel the
// router replaced. Asked once per call, before any cond; an exception it
// throws (std::exception and derived) counts as "not covered". `graph` is the
// key of the router the call reached. See Registry::set_coverage_check.
using CoverageCheck = std::function<bool(const GraphKey& graph, const c10::OperatorHandle& op,
                                         c10::DispatchKeySet keys, const Stack& stack)>;

struct GraphKey {
  std::string lib_symbol;    // "aten", or another allowlisted namespace
  std::string op_symbol;     // "mul.Tensor", "bmm": name with optional overload
  std::string dispatch_key;  // canonical name, e.g. "CPU"
  // `dispatch_key` parsed, once, where the registry admits the key (a
  // registration, or an install of a key given by name); Undefined in a key
  // built from the three names alone. Not part of the key's identity.
  c10::DispatchKey parsed_dispatch_key = c10::DispatchKey::Undefined;

  // "aten::mul.Tensor/CPU", for messages.
  std::string to_string() const;

  friend bool operator<(const GraphKey& a, const GraphKey& b) {
    return std::tie(a.lib_symbol, a.op_symbol, a.dispatch_key) <
           std::tie(b.lib_symbol, b.op_symbol, b.dispatch_key);
  }
  friend bool operator==(const GraphKey& a, const GraphKey& b) {
    return std::tie(a.lib_symbol, a.op_symbol, a.dispatch_key) ==
           std::tie(b.lib_symbol, b.op_symbol, b.dispatch_key);
  }
};

struct OverrideOptions {
  // Consulted before cond; see TryInitializeRuntimeFn.
  TryInitializeRuntimeFn try_initialize_runtime;
  // The impl *is* the op's implementation: cond may be empty (then it always
  // matches), and an ordinary disable does not remove it.
  bool unconditional_override = false;
  // Lets the process-wide trace shortcut (set_trace_shortcut) divert calls
  // that reach this node's router. The Python binding sets it for nodes with
  // Python callables; chains of pure C++ nodes never consult the shortcut.
  bool divert_when_tracing = false;
  // The cond or try_initialize_runtime runs code of a host runtime that must
  // be entered first (Python: the GIL). A call whose chain holds such a node
  // consults every cond, and the trace shortcut, inside one host scope (see
  // set_host_scope) instead of entering the runtime once per callable.
  bool needs_host_scope = false;
  // The impl runs code of that host runtime too (a Python impl). When the
  // node is chosen inside a host scope, its impl runs before the scope is
  // left, so an accepted call enters the runtime once instead of twice. A
  // C++ impl leaves it false: it must not run holding the host's lock.
  bool impl_in_host_scope = false;
};

// What a router counts of one node's calls while its registry collects
// stats (Registry::set_collect_stats). Relaxed atomics: exact totals under
// any number of threads, no order between counters. Shared by a node and the
// copies replace_node_callables makes of it (one override, one record).
struct NodeCounters {
  std::atomic<uint64_t> taken{0};                // its impl was chosen (ran, or raised)
  std::atomic<uint64_t> declined{0};             // its cond said no
  std::atomic<uint64_t> runtime_unavailable{0};  // cond said yes, the runtime check no
  std::atomic<uint64_t> raised{0};               // its cond or its impl raised

  void reset() {
    for (auto* count : {&taken, &declined, &runtime_unavailable, &raised}) {
      count->store(0, std::memory_order_relaxed);
    }
  }
};

// One registered override. Immutable once registered (but for the counts
// behind `counters`): reordering, disabling
// and re-enabling never change a node, they change which graph or chain
// holds it, so a node can be shared by a running call and a new chain.
struct OverrideNode {
  std::string dsl_name;
  GraphKey key;  // the graph it was registered into; dispatch_key canonical
  CondFn cond;   // never empty: an unconditional node gets an always-true cond
  ImplFn impl;
  OverrideOptions options;
  // Names the opaque op `_native::<node_id>` that carries this override.
  // Unique for the life of the process and never reused.
  std::string node_id;
  // The serial of the registry that registered it (Registry serials are
  // unique for the life of the process), so that a registry can tell its own
  // nodes without keeping a record of each.
  uint64_t registry_serial = 0;
  // Never null for a node a registry made.
  std::shared_ptr<NodeCounters> counters;

  // Whether the runtime is usable: true without try_initialize_runtime;
  // otherwise asks it, on every call that reaches it, as upstream does (the
  // hook may cache its own answer; a remembered success would hide a runtime
  // that went away).
  bool ensure_runtime() const;

  // Runs impl on a boxed call and checks that it left exactly the op's
  // results where the arguments were, which is where the caller reads them;
  // any other count would have it read past the stack or take an argument.
  // The router and the `_native` op's kernel both call the impl through it.
  void run_impl(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) const;
};

using NodePtr = std::shared_ptr<const OverrideNode>;
using Graph = std::vector<NodePtr>;

// Receives (op_symbol, dispatch_key, graph) and returns the graph to keep:
// a reordering or a subset of the nodes it was given.
using OrderingFn = std::function<Graph(const std::string& op_symbol,
                                       const std::string& dispatch_key,
                                       const Graph& graph)>;

// What a disable or re-enable names. Op-symbol entries match the bare symbol
// ("mul.Tensor", "twice") in every namespace; "ns::op" matches nothing.
struct Filter {
  std::vector<std::string> dsl_names;
  std::vector<std::string> op_symbols;
  std::vector<std::string> dispatch_keys;
};

// Where a graph's router stands in the dispatcher.
enum class RouterState {
  kAbsent,   // no router: the op's own kernel runs
  kDormant,  // a router with an empty chain: every call goes to the fallback
  kActive,   // a router with at least one node in its chain
};

// What happens to an installed router whose chain becomes empty through a
// disable, a reorder or the unconditional mask.
enum class EmptyChainPolicy {
  // Keep it in the dispatcher with an empty chain. The dispatcher is then
  // only changed by install and teardown, so toggling is safe while other
  // threads call the op. The default.
  kKeepDormantRouter,
  // Remove it, as upstream does. Changes the dispatcher on a disable, which
  // LibTorch does not allow while the op is being called.
  kRemoveRouter,
};

// What a router does when the impl it chose throws (Registry::set_impl_error_policy).
enum class ImplErrorPolicy {
  // The error is the call's, as upstream has it. The default.
  kRaise,
  // The call runs the kernel the router replaced instead, with the call's
  // arguments as they came in, and the first such error of each node is
  // reported (set_fallback_notice in call_hooks.h). Only for ops whose schema
  // writes no argument: an impl that failed halfway through an in-place or
  // out= op may have written some of its output, which no fallback can undo,
  // so those still raise. An error a host marks as one that must propagate
  // (set_must_propagate: Python's KeyboardInterrupt, SystemExit) always does.
  kFallback,
};

// Registry::stats(): the counts of each node of the registry's graphs, and
// of each graph's router, since collection began or the last reset_stats().
struct NodeStats {
  std::string node_id;
  std::string dsl_name;
  GraphKey key;
  uint64_t taken = 0, declined = 0, runtime_unavailable = 0, raised = 0;
};
struct GraphStats {
  GraphKey key;
  uint64_t calls = 0;      // calls that reached the router
  uint64_t fallbacks = 0;  // of those, calls that ran the op's own kernel:
  uint64_t covered = 0;    //   because the coverage check covered them,
  uint64_t fell_back_after_error = 0;  // or an impl's error fell back
};
struct RoutingStats {
  std::vector<NodeStats> nodes;    // in graph key order, each graph's nodes in order
  std::vector<GraphStats> graphs;  // in graph key order, graphs a router has served
};

enum class LogLevel { kInfo, kWarning };
using LogSink = std::function<void(LogLevel, const std::string&)>;
// Takes what a control-plane operation retired (nodes, graphs, router
// states, with the host's callables and the kernels they captured) once the
// registry's lock is released, and frees it where its destructors may run
// host code: a Python host, under the GIL (a destructor that takes the GIL
// itself aborts a daemon thread CPython ends at exit).
using ReleaseSink = std::function<void(std::vector<std::shared_ptr<const void>>&&)>;

}  // namespace native_registry
