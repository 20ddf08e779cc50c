#pragma once

// Process-wide hooks of the call path, set by a host runtime (the Python
// binding sets both): what a router consults before its conds. They are not
// part of a registry's state; routers read them with one atomic load each.
// For host runtimes (the Python binding, gil.cpp and trace_shortcut.cpp), and
// tests; adopters registering C++ overrides need neither.
//
// Owns: the declarations of the call path's hooks and the coverage switch
// (call_path.cpp holds them) and of
// the schema-removal epoch (op_watch.cpp). May not touch: any registry; a
// hook is process-wide.

#include <native_registry/types.h>

#include <atomic>
#include <cstdint>
#include <exception>

namespace native_registry {

// ---- the trace shortcut -----------------------------------------------------
//
// A tracer (Dynamo) must see the plain op, not the router. When a router whose
// chain holds a node with divert_when_tracing runs, this thread is not already
// inside a diverted call, no tensor argument is copy-on-write, and the
// shortcut says a tracer is active, the router calls the op again from the
// top with a thread-local re-entrancy flag set; that re-entered call takes
// the ordinary path, so cond is consulted once and nothing recurses.
// `in_host_scope`: the router asks from inside the host scope (below), whose
// function entered the host's runtime for the choice, so a shortcut of the
// host's own need not look whether it holds the runtime; false: it must.
using TraceShortcutFn = bool (*)(bool in_host_scope);
void set_trace_shortcut(TraceShortcutFn fn);  // nullptr turns it off
// True while this thread is inside a call the shortcut diverted.
bool in_diverted_call();

// ---- the host scope -----------------------------------------------------------
//
// Conds written for a host runtime (Python) must enter it to run, and entering
// costs more than a cheap cond. When a router's chain holds a node with
// needs_host_scope, the router makes its choice (the trace shortcut, then each
// node's try_initialize_runtime and cond, in order) inside one call of the
// host scope function, which must call choose(context) exactly once with the
// runtime entered and let its exceptions through. The fallback and a
// diverted call run after the scope has been left; so does the chosen impl,
// unless its node has impl_in_host_scope (an impl of the host's own, which
// would enter the runtime again at once): then it runs inside the scope.
using HostScopeFn = void (*)(void (*choose)(void*), void* context);
void set_host_scope(HostScopeFn fn);  // nullptr: conds enter the runtime themselves

// A cond of the host's own may be called inside the host scope without a
// look at whether the host's runtime is entered (the host scope function
// entered it, as for the trace shortcut's `in_host_scope`). When a router
// first publishes a chain, this hook is shown each node's CondFn; what it
// returns for one (a function and the context it is called with, which must
// stay valid as long as that CondFn does: the chain keeps its node, which
// never changes, alive) is what the router calls in the CondFn's place inside
// the host scope, for the same answer. An empty HostCond, and no hook set
// when the chain was first published: the CondFn itself, as everywhere
// outside the host scope.
struct HostCond {
  bool (*call)(const void* context, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
               const Stack& stack) = nullptr;
  const void* context = nullptr;
};
using HostCondResolver = HostCond (*)(const CondFn& cond);
void set_host_cond_resolver(HostCondResolver fn);  // nullptr: none resolved from now on

// ---- coverage checks ------------------------------------------------------------
//
// Whether routers ask their registry's coverage check (Registry::set_coverage_check)
// at all: upstream main's switch for kernels compiled ahead of time
// (`set_aot_enabled`). On unless the environment variable
// TORCH_DISABLE_NATIVE_AOT is "1" when the library loads. Off, a covered call
// routes through the conds as if no check were set.
void set_coverage_checks_enabled(bool enabled);
bool coverage_checks_enabled();

// ---- errors a router absorbs, and those it must not -----------------------------
//
// Where a router absorbs an error of user code (an impl's under
// ImplErrorPolicy::kFallback, a coverage check's), it first asks this hook
// whether the error must reach the caller anyway; the Python binding says so
// for KeyboardInterrupt and SystemExit. nullptr: any std::exception may be
// absorbed. A forced unwind is no std::exception and is never absorbed.
using MustPropagateFn = bool (*)(const std::exception& error);
void set_must_propagate(MustPropagateFn fn);

// Called on the calling thread, the first time (per node, for the life of the
// process) a router runs the op's own kernel because the node's impl threw
// under ImplErrorPolicy::kFallback; the binding turns it into a Python
// RuntimeWarning. nullptr: a c10 warning (TORCH_WARN). What it throws is the
// call's error.
using FallbackNoticeFn = void (*)(const OverrideNode& node, const c10::OperatorHandle& op,
                                  const std::exception& error);
void set_fallback_notice(FallbackNoticeFn fn);

// ---- the routing log --------------------------------------------------------------
//
// What a router decided for one call, for a host's log (the binding's
// `native_registry.routing` logger at DEBUG). At most ten decisions a second
// per router are passed on; `not_logged` counts those dropped at that router
// since the last one passed. Called on the calling thread, with no lock held;
// an exception it throws is dropped (a log must not fail the call). A
// diverted call is logged when it comes back in.
struct RoutingDecision {
  enum class Kind {
    kTaken,     // `node` takes the call (logged before its impl runs, or after
                // when the impl ran in the host scope)
    kFallback,  // no node took it: the op's own kernel runs
    kCovered,   // the coverage check covered it: the op's own kernel runs
    kFellBack,  // `node`'s impl failed under ImplErrorPolicy::kFallback: the op's own kernel runs
  };
  Kind kind;
  const GraphKey& graph;
  const OverrideNode* node;  // kTaken, kFellBack; else null
  uint64_t not_logged;
};
using RoutingLogFn = void (*)(const RoutingDecision& decision);
void set_routing_log(RoutingLogFn fn);  // nullptr (the default): a call pays one atomic load

// ---- ops leaving the dispatcher -------------------------------------------------
//
// How many op schemas the dispatcher has removed (an op's last definition
// gone) since watch_schema_removals() first ran. A host runtime that caches
// what it worked out from a schema (the binding's argument plans) records the
// epoch with it and works it out again once the epoch has moved: a schema
// removed may be defined again, another, at the same address. Counted by the
// one registration listener that also marks the routers and `_native` ops
// whose op has gone (src/op_watch.h).
void watch_schema_removals();  // idempotent; the first call takes the dispatcher's lock
namespace detail {
extern std::atomic<uint64_t> g_schema_removals;  // op_watch.cpp; read only as below
}  // namespace detail
// Read inline: a host's cache asks on every call it serves from what it cached.
inline uint64_t schema_removal_epoch() {
  return detail::g_schema_removals.load(std::memory_order_acquire);
}

}  // namespace native_registry
