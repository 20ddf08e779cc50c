#pragma once

// One router: the kernel installed at (op, dispatch key) that walks a chain
// of override nodes and falls back to the kernel it replaced.
//
// Invariants:
//  * The fallback is captured before the router's own kernel is registered,
//    so it is the kernel that was live at the key, never this router.
//  * The published chain is immutable and read with one acquire load per
//    call; publish() swaps it with one release store. Every chain ever
//    published stays alive (interned by content, in Shared) as long as
//    Shared does, so a call that loaded a chain can finish with it.
//  * Every call holds Shared for its whole length (an intrusive count
//    taken on entry, see CallHold in router.cpp). Shared owns the chains, the
//    chains own their nodes, so a cond or impl that tears the router down
//    (restore(), a disable under kRemoveRouter) finishes on what it started
//    with; the last call out frees them. Destroying the Router only takes
//    its kernel out of the dispatcher.
//  * Destroying the router removes exactly its kernel from the dispatcher
//    (its own registration handle) and nothing else.
//  * The coverage check, when set, is asked once per call before any cond;
//    a check is swapped like a chain (one release store, every check ever
//    set kept alive in Shared).
//  * Under ImplErrorPolicy::kFallback a call whose impl threw runs the
//    fallback with the arguments it came in with, only where the op's
//    schema (as the router was installed for it) writes no argument.
//  * While the settings say collect_stats, every call counts into its
//    nodes' NodeCounters and the graph's GraphCounters; otherwise it pays
//    one relaxed load for it and counts nothing.
//  * publish() and destruction are called under the registry's lock; the
//    call path takes no lock and allocates nothing of its own.
//  * Where the op's C++ signature is one of a few common ones (see
//    router.cpp: Tensor(Tensor), Tensor(Tensor, Tensor), Tensor(Tensor,
//    Tensor, Scalar), Tensor(Tensor, Scalar), Tensor(Tensor, Scalar,
//    Scalar)), the op already has an unboxed kernel of exactly that
//    signature and the op's schema is that signature's (an op's name keeps
//    an earlier definition's signature while any registration stands
//    there), the router's kernel is typed: a C++ caller reaches it
//    without the dispatcher boxing the call into a new Stack. It boxes the
//    arguments into a per-thread, per-nesting-depth Stack that is reused
//    from call to call, and routes exactly as the boxed kernel does (the
//    conds and impls are boxed); a call that declines calls the fallback
//    unboxed, with its own arguments (the SafeKernelFunction's check, then
//    its KernelFunction's unboxed call: call_path.cpp). Every other op gets
//    the boxed kernel.
//
// Owns: the Router's interface (router.cpp builds it, call_path.cpp runs its
// kernels). May not touch: registry state; a router knows its chain and its
// fallback, never the graphs or the filters that made the chain.

#include <native_registry/call_hooks.h>
#include <native_registry/types.h>

#include <native_registry/router_kind.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace native_registry::detail {

// What a registry sets for all its routers at once (RouterTable).
struct RouterSettings {
  std::shared_ptr<const CoverageCheck> coverage;  // null: none
  ImplErrorPolicy impl_errors = ImplErrorPolicy::kRaise;
  bool collect_stats = false;  // count calls (NodeCounters, GraphCounters)
};

// What the router of one graph counts while its registry collects stats.
// Owned by the registry's RouterTable per graph key, so the counts outlive
// a router rebuilt at that key; relaxed atomics, as NodeCounters.
struct GraphCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> fallbacks{0};
  std::atomic<uint64_t> covered{0};
  std::atomic<uint64_t> fell_back_after_error{0};

  void reset() {
    for (auto* count : {&calls, &fallbacks, &covered, &fell_back_after_error}) {
      count->store(0, std::memory_order_relaxed);
    }
  }
};

// The hook set_host_cond_resolver set (call_path.cpp), or null.
HostCondResolver host_cond_resolver();

struct Chain {
  Graph nodes;
  // One per node: its cond as the host calls it inside the host scope, or
  // empty (set_host_cond_resolver), resolved when the chain was made.
  std::vector<HostCond> host_conds;
  bool divert_when_tracing = false;  // any node opted into the trace shortcut
  bool needs_host_scope = false;     // any node's cond runs in a host runtime
};

class Router {
 public:
  // Captures the kernel live at `key`'s dispatch key of `op`, then installs
  // the router there, routing through `chain` as `settings` say and counting
  // into `counters` while they say so.
  Router(const GraphKey& key, const c10::OperatorHandle& op, const Graph& chain,
         const RouterSettings& settings, std::shared_ptr<GraphCounters> counters);
  ~Router();  // removes the router's kernel from the dispatcher
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  void publish(const Graph& chain);
  // The settings calls follow from now on. Like a chain, every coverage
  // check ever set stays alive as long as Shared does.
  void apply(const RouterSettings& settings);
  const CoverageCheck* coverage() const;
  ImplErrorPolicy impl_error_policy() const;
  bool collects_stats() const;
  const GraphCounters* counters() const;
  Graph published() const;
  // Whether the op's schema has left the dispatcher since the router was
  // installed (see Shared::watch in router.cpp); such a router must be
  // rebuilt, not published into.
  bool op_gone() const;
  // What a call no node takes runs (Registry::explain says): the captured
  // kernel, else the next key's (a fallthrough), else neither (it raises).
  bool has_fallback() const;
  bool falls_through() const;
  // Unique for the life of the process: tells a router from one that
  // replaced it at the same key, even at the same address.
  uint64_t id() const { return id_; }
  // What calls still inside the router use (its chains, their nodes). The
  // registry holds it past the router's destruction until its own lock is
  // released, so that no node (and no host object a node holds) is freed
  // under that lock.
  std::shared_ptr<const void> keep_alive() const { return shared_; }

  struct Shared;  // what the router's kernel functor shares with it

 private:
  std::shared_ptr<Shared> shared_;
  std::optional<c10::RegistrationHandleRAII> registration_;  // the router's kernel's
  uint64_t id_;
};

}  // namespace native_registry::detail
