#pragma once

// What a router's kernel shares with its Router (router.h), and the kernels
// themselves: router.cpp builds and installs routers (install time, under the
// registry's lock); call_path.cpp is every call's path through them.
//
// Owns: Router::Shared and the kernel types. May not touch: registry state,
// or the dispatcher outside the router's own registration handle.

#include "op_watch.h"
#include "router.h"

#include <native_registry/call_hooks.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace native_registry::detail {

struct Router::Shared {
  Shared(const GraphKey& graph_key, const c10::OperatorHandle& handle);

  GraphKey key;  // the graph the router was installed for; what a coverage check is told
  c10::OperatorHandle op;
  c10::DispatchKey dispatch_key() const { return key.parsed_dispatch_key; }
  // Marked when the op's schema leaves the dispatcher. The router's kernel
  // keeps the op's entry (so `op` stays valid) but not its schema: an op
  // defined again under the name reaches this router at keys where it has
  // no kernel of its own, with arguments the chain and the fallback were
  // not made for. Such a call raises; the registry rebuilds the router at
  // its next install, publish or restore.
  std::shared_ptr<const OpWatch> watch;
  // The kernel that was live before the router; absent if there was none.
  std::optional<c10::SafeKernelFunction> fallback;
  // The key was a fallthrough before the router (BackendSelect,
  // ADInplaceOrView, Autocast*, ... for most ops): a fallthrough kernel must
  // never be called, so a declined call skips the key instead, as the
  // dispatcher did.
  bool fallthrough = false;
  std::atomic<const Chain*> chain{nullptr};
  // Every chain ever published, by node identity; written by publish()
  // under the registry's lock, never read by calls (they hold `chain`).
  std::map<std::vector<const OverrideNode*>, std::unique_ptr<const Chain>> interned;
  // The registry's coverage check (null: none), and every one ever set here,
  // kept as the chains are.
  std::atomic<const CoverageCheck*> coverage{nullptr};
  std::atomic<ImplErrorPolicy> impl_errors{ImplErrorPolicy::kRaise};
  std::atomic<bool> collect_stats{false};
  std::shared_ptr<GraphCounters> counters;  // never null
  // The routing log's rate limit (call_path.cpp): the second being counted,
  // the decisions logged in it, those dropped since the last one logged.
  mutable std::atomic<int64_t> log_window{0};
  mutable std::atomic<uint32_t> logged_in_window{0};
  mutable std::atomic<uint64_t> not_logged{0};
  // The op's schema writes none of its arguments (no in-place, no out=):
  // only then may an impl's error fall back (see ImplErrorPolicy). Read at
  // install; a schema that changes since marks the router's op gone.
  bool schema_writes_nothing = false;
  std::vector<std::shared_ptr<const CoverageCheck>> coverages;
  // Holds on this object: one for all its shared_ptr owners together (the
  // Router, the kernel functor, the registry's deferred releases; see
  // make_shared_state), plus one per call inside the router. The last to let
  // go deletes it. Cheaper on the call path than copying a shared_ptr.
  mutable std::atomic<uint64_t> holds{1};
};

inline void let_go(const Router::Shared* shared) {
  if (shared->holds.fetch_sub(1, std::memory_order_acq_rel) == 1) delete shared;
}

// One call's hold on the router's shared state, for the whole call: an impl
// may remove the router, and its kernel functor with it.
class CallHold {
 public:
  explicit CallHold(const Router::Shared& shared) : shared_(&shared) {
    shared.holds.fetch_add(1, std::memory_order_relaxed);
  }
  ~CallHold() { let_go(shared_); }
  CallHold(const CallHold&) = delete;
  CallHold& operator=(const CallHold&) = delete;

 private:
  const Router::Shared* shared_;
};

// Whether an error of user code that the router would absorb must reach the
// caller all the same (set_must_propagate).
bool must_propagate(const std::exception& error);

// Asks a coverage check about a call, as the call path does and as
// Registry::explain reports it: its exceptions count as "not covered"
// (upstream's covers() degrades them likewise), but for those that must
// propagate; a forced unwind is no std::exception and goes through. `error`,
// when given, receives the message of an exception it absorbed.
bool ask_coverage_check(const CoverageCheck& check, const GraphKey& graph,
                        const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        const Stack& stack, std::string* error);

// A router's kernel as the dispatcher registers it: the kernel, and the C++
// signature of its unboxed entry (the typed kernel's; the boxed one has none).
struct RouterKernel {
  c10::KernelFunction function;
  std::optional<c10::impl::CppSignature> signature;
};

// The kernel to install for `shared`'s op: a typed one where the op's
// signature is one of the common ones and `typed` allows it, else the boxed one.
RouterKernel router_kernel(const std::shared_ptr<const Router::Shared>& shared, bool typed);

}  // namespace native_registry::detail
