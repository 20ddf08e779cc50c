// A call's path through a router, and nothing else: the trace shortcut and
// its re-entrancy flag, the copy-on-write check, the coverage check and its
// switch, the impl error policy's fallback, the choice among the
// chain's nodes (in the host's scope when a node needs it; this thread's
// disables skipped), the decline to the captured kernel, what a call counts,
// logs and shows a profiler, and the boxed and typed kernels that enter it.
// Reads the router's shared state; writes only its counters and its log
// rate limit; never takes a lock.

#include "router_shared.h"
#include "tensor_walk.h"
#include "thread_disables.h"

#include <ATen/core/op_registration/infer_schema.h>
#include <ATen/record_function.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

// The hot path's forced inlining. A coverage build keeps these functions out
// of line (plain `inline`, which -O0 does not inline): inlined into every
// typed kernel, each source branch would count once per kernel signature in
// gcov's figures. The code is the same either way.
#ifdef NR_COVERAGE_BUILD
#define NR_HOT inline
#else
#define NR_HOT C10_ALWAYS_INLINE
#endif

namespace native_registry {
namespace {

std::atomic<TraceShortcutFn> g_trace_shortcut{nullptr};
// TORCH_DISABLE_NATIVE_AOT=1 turns coverage checks off, as it does upstream's.
bool coverage_checks_enabled_by_default() {
  const char* disabled = std::getenv("TORCH_DISABLE_NATIVE_AOT");
  return disabled == nullptr || std::string_view(disabled) != "1";
}
std::atomic<bool> g_coverage_checks_enabled{coverage_checks_enabled_by_default()};
std::atomic<MustPropagateFn> g_must_propagate{nullptr};
std::atomic<FallbackNoticeFn> g_fallback_notice{nullptr};
std::atomic<HostScopeFn> g_host_scope{nullptr};
std::atomic<HostCondResolver> g_host_cond_resolver{nullptr};
std::atomic<RoutingLogFn> g_routing_log{nullptr};
thread_local bool t_in_diverted_call = false;

// Sets the re-entrancy flag for one diverted call; clears it on every exit,
// exceptions included.
class DivertedCallScope {
 public:
  DivertedCallScope() { t_in_diverted_call = true; }
  ~DivertedCallScope() { t_in_diverted_call = false; }
  DivertedCallScope(const DivertedCallScope&) = delete;
  DivertedCallScope& operator=(const DivertedCallScope&) = delete;
};

// Copy-on-write inputs always take the ordinary path: a diverted call would
// hand them to a tracer that cannot see their copy-on-write state.
bool has_cow_argument(const Stack& stack) {
  return detail::for_each_tensor(stack, std::nullopt,
                                 [](const at::Tensor& tensor) { return !detail::is_cow(tensor); })
      .stopped;
}

}  // namespace

void set_trace_shortcut(TraceShortcutFn fn) {
  g_trace_shortcut.store(fn, std::memory_order_release);
}

bool in_diverted_call() { return t_in_diverted_call; }

void set_host_scope(HostScopeFn fn) { g_host_scope.store(fn, std::memory_order_release); }

void set_host_cond_resolver(HostCondResolver fn) {
  g_host_cond_resolver.store(fn, std::memory_order_release);
}

void set_coverage_checks_enabled(bool enabled) {
  g_coverage_checks_enabled.store(enabled, std::memory_order_relaxed);
}

bool coverage_checks_enabled() { return g_coverage_checks_enabled.load(std::memory_order_relaxed); }

void set_must_propagate(MustPropagateFn fn) { g_must_propagate.store(fn, std::memory_order_release); }

void set_fallback_notice(FallbackNoticeFn fn) {
  g_fallback_notice.store(fn, std::memory_order_release);
}

void set_routing_log(RoutingLogFn fn) { g_routing_log.store(fn, std::memory_order_release); }

namespace detail {

HostCondResolver host_cond_resolver() {
  return g_host_cond_resolver.load(std::memory_order_acquire);
}

namespace {

// A typed call's tensors, boxed without references of their own: they are
// the caller's, alive for the whole call, and a call that declines to the
// captured kernel (called unboxed, with the caller's arguments) saves an
// increment and a decrement per tensor. Before anything may take a value off
// the stack (an impl, a diverted call, a fallthrough's redispatch, the boxed
// fallback), own() gives the stack references of its own; a call that ends
// before that (it declined, or raised) lets the borrowed values go without a
// decrement. Conds, coverage checks and the trace shortcut only read the
// stack. Bit i of `tensors`: the i-th value on the stack is a borrowed tensor
// (the typed kernel boxes into an empty stack).
class BorrowedArguments {
 public:
  BorrowedArguments(Stack* stack, uint64_t tensors) : stack_(stack), tensors_(tensors) {}
  NR_HOT ~BorrowedArguments() {
    if (tensors_ == 0) return;
    // Still what the kernel boxed (all of it, unless the boxing itself
    // failed): nothing took a value before own().
    // Each borrowed value ends as None without its destructor, which would
    // drop a reference it never had.
    c10::IValue* const values = stack_->data();
    const size_t boxed = stack_->size();
    for (uint64_t bits = tensors_; bits != 0; bits &= bits - 1) {
      const auto i = static_cast<size_t>(__builtin_ctzll(bits));
      if (i >= boxed) break;
      new (&values[i]) c10::IValue();
    }
  }
  BorrowedArguments(const BorrowedArguments&) = delete;
  BorrowedArguments& operator=(const BorrowedArguments&) = delete;

  // The stack's tensors made its own (once).
  void own() {
    c10::IValue* const values = stack_->data();
    for (uint64_t bits = std::exchange(tensors_, 0); bits != 0; bits &= bits - 1) {
      c10::IValue& value = values[__builtin_ctzll(bits)];
      // A reference of its own, over the borrowed value without its
      // destructor (as ~BorrowedArguments lets one go).
      at::Tensor owned(value.toTensor());
      new (&value) c10::IValue(std::move(owned));
    }
  }
  bool borrowed() const { return tensors_ != 0; }

 private:
  Stack* stack_;
  uint64_t tensors_;
};

// Before a value may be taken off a typed call's stack (null: a boxed call,
// whose stack owns its values).
NR_HOT void own_arguments(BorrowedArguments* borrowed) {
  if (borrowed != nullptr) borrowed->own();
}

// What a call does, chosen by the trace shortcut and the conds.
struct Choice {
  bool divert = false;                  // call the op again from the top
  const OverrideNode* node = nullptr;   // else this node's impl, else the fallback
  bool done = false;                    // the node's impl ran already (in the host scope)
  bool counted = false;                 // the graph's count of calls has this one already
  bool covered = false;                 // the fallback, because the coverage check covered it
  const OverrideNode* fell_back_from = nullptr;  // the fallback, because this node's impl failed
};

// ---- what a call counts, logs and shows a profiler ----------------------------

inline void bump(std::atomic<uint64_t>& count) { count.fetch_add(1, std::memory_order_relaxed); }

// Runs `body` inside a profiler range named name() while a profiler (or any
// observer of user scopes) records; otherwise just runs it. The name is made
// only then.
template <class Name, class Body>
inline auto in_profiler_range(const Name& name, const Body& body) -> decltype(body()) {
  std::optional<at::StepCallbacks> callbacks =
      at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
  if (C10_LIKELY(!callbacks.has_value())) return body();
  at::RecordFunction range(std::move(*callbacks));
  range.before(name());
  return body();
}

std::string node_range_name(const OverrideNode& node) {
  return "native_registry::" + node.dsl_name + "::" + node.key.op_symbol;
}

std::string fallback_range_name(const Router::Shared& shared) {
  return "native_registry::fallback::" + shared.key.op_symbol;
}

// At most this many decisions a second per router reach the routing log; the
// rest are counted and the count goes with the next one logged.
constexpr uint32_t kLoggedDecisionsPerSecond = 10;

C10_NOINLINE void log_decision(const Router::Shared& shared, RoutingLogFn log,
                               RoutingDecision::Kind kind, const OverrideNode* node) {
  const int64_t second = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t window = shared.log_window.load(std::memory_order_relaxed);
  if (window != second &&
      shared.log_window.compare_exchange_strong(window, second, std::memory_order_relaxed)) {
    shared.logged_in_window.store(0, std::memory_order_relaxed);
  }
  if (shared.logged_in_window.fetch_add(1, std::memory_order_relaxed) >= kLoggedDecisionsPerSecond) {
    bump(shared.not_logged);
    return;
  }
  const uint64_t not_logged = shared.not_logged.exchange(0, std::memory_order_relaxed);
  try {
    log(RoutingDecision{kind, shared.key, node, not_logged});
  } catch (const std::exception&) {
    // A log that fails must not fail the call it describes.
  }
}

inline void maybe_log(const Router::Shared& shared, RoutingDecision::Kind kind,
                      const OverrideNode* node) {
  RoutingLogFn log = g_routing_log.load(std::memory_order_acquire);
  if (C10_UNLIKELY(log != nullptr)) log_decision(shared, log, kind, node);
}

// A node's cond: inside the host scope, as the host resolved it when
// `host_cond` is not empty (set_host_cond_resolver); else the CondFn itself.
NR_HOT bool ask_cond(const OverrideNode& node, const HostCond& host_cond,
                                bool in_host_scope, const c10::OperatorHandle& op,
                                c10::DispatchKeySet keys, const Stack& stack) {
  if (in_host_scope && host_cond.call != nullptr) {
    return host_cond.call(host_cond.context, op, keys, stack);
  }
  return node.cond(op, keys, stack);
}

// The cond of a counted call: declines and errors counted.
C10_NOINLINE bool counted_cond(const OverrideNode& node, const HostCond& host_cond,
                               bool in_host_scope, const c10::OperatorHandle& op,
                               c10::DispatchKeySet keys, const Stack& stack) {
  bool accepted = false;
  try {
    accepted = ask_cond(node, host_cond, in_host_scope, op, keys, stack);
  } catch (...) {
    bump(node.counters->raised);
    throw;
  }
  if (!accepted) bump(node.counters->declined);
  return accepted;
}

C10_NOINLINE void raise_op_gone(const Router::Shared& shared);

// Raises the router's error if its op left the dispatcher: asked after every
// piece of user code a call runs (a cond, a runtime check, an impl), which
// may destroy the op's library, and the op with it, or define it again.
inline void check_op_still_there(const Router::Shared& shared) {
  if (C10_UNLIKELY(shared.watch->gone.load(std::memory_order_acquire))) raise_op_gone(shared);
}

}  // namespace

bool must_propagate(const std::exception& error) {
  MustPropagateFn fn = g_must_propagate.load(std::memory_order_acquire);
  return fn != nullptr && fn(error);
}

bool ask_coverage_check(const CoverageCheck& check, const GraphKey& graph,
                        const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        const Stack& stack, std::string* error) {
  bool answer = false;  // also when the check throws
  try {
    answer = check(graph, op, keys, stack);
  } catch (const std::exception& e) {
    if (must_propagate(e)) throw;
    if (error != nullptr) *error = e.what();
  }
  return answer;
}

namespace {

// Whether the registry's coverage check says a kernel compiled into the op's
// own serves this call (see ask_coverage_check).
C10_NOINLINE bool covered(const Router::Shared& shared, const CoverageCheck& check,
                          const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                          const Stack& stack) {
  const bool answer = ask_coverage_check(check, shared.key, op, keys, stack, nullptr);
  check_op_still_there(shared);  // the check is user code too
  return answer;
}

// Reports, once per node for the life of the process, that its impl's error
// made a call fall back (set_fallback_notice). The error path only: the set
// and its lock are never touched by a call whose impl returns.
void notice_fallback_once(const OverrideNode& node, const c10::OperatorHandle& op,
                          const std::exception& error) {
  static std::mutex* noticed_mutex = new std::mutex;  // never freed: used up to exit
  static auto* noticed = new std::set<std::string>;
  {
    std::lock_guard<std::mutex> lock(*noticed_mutex);
    if (!noticed->insert(node.node_id).second) return;
  }
  if (FallbackNoticeFn notice = g_fallback_notice.load(std::memory_order_acquire)) {
    notice(node, op, error);
    return;
  }
  TORCH_WARN("native_registry: the impl of override ", node.node_id, " (dsl ", node.dsl_name,
             ") of ", op.operator_name(), " raised: ", error.what(),
             "; the call ran the op's own kernel instead (impl error policy 'fallback'); "
             "later errors of this override fall back without a warning");
}

// The impl of `node` under ImplErrorPolicy::kFallback: the call's arguments
// are copied first, and an error puts them back where they were and returns
// false, for the caller to run the fallback on them.
C10_NOINLINE bool run_impl_falling_back(const OverrideNode& node, const c10::OperatorHandle& op,
                                        c10::DispatchKeySet keys, Stack* stack) {
  const size_t count = op.schema().arguments().size();
  TORCH_INTERNAL_ASSERT(stack->size() >= count, "a call of ", op.operator_name(), " with ",
                        stack->size(), " values on its stack, expected ", count);
  const size_t base = stack->size() - count;
  const std::vector<c10::IValue> arguments(stack->begin() + static_cast<std::ptrdiff_t>(base),
                                           stack->end());
  try {
    node.run_impl(op, keys, stack);
    return true;
  } catch (const std::exception& error) {
    if (must_propagate(error) || stack->size() < base) throw;
    stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
    stack->insert(stack->end(), arguments.begin(), arguments.end());
    notice_fallback_once(node, op, error);
    return false;
  }
}

// Runs the chosen node's impl; false when its error made the call decline
// instead (ImplErrorPolicy::kFallback, for an op whose schema writes no
// argument): the caller then runs the fallback.
inline bool run_impl_as_policy_says(const Router::Shared& shared, const OverrideNode& node,
                                    const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                    Stack* stack) {
  if (C10_LIKELY(shared.impl_errors.load(std::memory_order_relaxed) == ImplErrorPolicy::kRaise) ||
      !shared.schema_writes_nothing) {
    node.run_impl(op, keys, stack);
    return true;
  }
  return run_impl_falling_back(node, op, keys, stack);
}

C10_NOINLINE bool run_impl_counted(const Router::Shared& shared, const OverrideNode& node,
                                   const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                   Stack* stack) {
  bool ran = false;
  try {
    ran = run_impl_as_policy_says(shared, node, op, keys, stack);
  } catch (...) {
    bump(node.counters->raised);
    throw;
  }
  if (!ran) {
    bump(node.counters->raised);
    bump(shared.counters->fell_back_after_error);
  }
  return ran;
}

// The chosen node's impl, in its profiler range, counted when `counting`.
inline bool run_chosen_impl(const Router::Shared& shared, const OverrideNode& node,
                            const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack,
                            bool counting) {
  return in_profiler_range([&node] { return node_range_name(node); },
                           [&]() -> bool {
                             if (C10_UNLIKELY(counting)) {
                               return run_impl_counted(shared, node, op, keys, stack);
                             }
                             return run_impl_as_policy_says(shared, node, op, keys, stack);
                           });
}

// The choice; kCounting: the router collects stats, and the choice counts
// each node's declines, errors, unavailable runtimes and the call it takes.
// Inlined into both of its callers (in the host scope and without one):
// the hop would cost a declined call more than the copy costs the library.
template <bool kCounting>
NR_HOT Choice choose(const Router::Shared& shared, const Chain& chain, const c10::OperatorHandle& op,
              c10::DispatchKeySet keys, const Stack& stack, bool in_host_scope) {
  // The tracer is asked on every call, as upstream's router asks Dynamo; the
  // inputs are walked for copy-on-write ones only while it traces.
  if (chain.divert_when_tracing && !t_in_diverted_call) {
    TraceShortcutFn shortcut = g_trace_shortcut.load(std::memory_order_acquire);
    if (shortcut != nullptr && shortcut(in_host_scope) && !has_cow_argument(stack)) {
      return {true, nullptr};
    }
  }
  // Once per call, before any cond, unconditional nodes included: a covered
  // call declines them all.
  const CoverageCheck* coverage = shared.coverage.load(std::memory_order_acquire);
  if (C10_UNLIKELY(coverage != nullptr) &&
      g_coverage_checks_enabled.load(std::memory_order_relaxed) &&
      covered(shared, *coverage, op, keys, stack)) {
    return {.covered = true};
  }
  const HostCond* host_cond = chain.host_conds.data();  // one per node
  for (const NodePtr& node : chain.nodes) {
    const HostCond& node_host_cond = *host_cond++;
    // Read afresh for each node: a cond may open or close this thread's scopes.
    if (detail::disabled_in_this_thread(*node)) continue;
    const bool accepted =
        kCounting ? counted_cond(*node, node_host_cond, in_host_scope, op, keys, stack)
                  : ask_cond(*node, node_host_cond, in_host_scope, op, keys, stack);
    check_op_still_there(shared);  // the next cond, or the impl, would read its schema
    if (!accepted) continue;
    // Only an accepting cond initialises the runtime, immediately before the
    // impl (upstream's documented order): a declining cond never enters it.
    if (node->options.try_initialize_runtime) {
      const bool ready = node->ensure_runtime();
      check_op_still_there(shared);
      if (!ready) {
        if constexpr (kCounting) bump(node->counters->runtime_unavailable);
        continue;
      }
    }
    if constexpr (kCounting) bump(node->counters->taken);
    return {false, node.get()};
  }
  return {};
}

// choose() inside the host scope, when the chain needs one and a host set it;
// inside it too, the chosen node's impl when that is the host's own
// (impl_in_host_scope), and the choice comes back done.
NR_HOT Choice choose_counting_or_not(const Router::Shared& shared, const Chain& chain,
                                     const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                     const Stack& stack, bool counting, bool in_host_scope) {
  return C10_UNLIKELY(counting) ? choose<true>(shared, chain, op, keys, stack, in_host_scope)
                                : choose<false>(shared, chain, op, keys, stack, in_host_scope);
}

NR_HOT Choice choose_in_scope(const Router::Shared& shared, const Chain& chain,
                       const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack,
                       bool counting, BorrowedArguments* borrowed) {
  HostScopeFn scope = chain.needs_host_scope ? g_host_scope.load(std::memory_order_acquire)
                                             : nullptr;
  if (scope == nullptr) {
    return choose_counting_or_not(shared, chain, op, keys, *stack, counting, false);
  }
  struct Context {
    const Router::Shared& shared;
    const Chain& chain;
    const c10::OperatorHandle& op;
    c10::DispatchKeySet keys;
    Stack* stack;
    bool counting;
    BorrowedArguments* borrowed;
    Choice choice;
  } context{shared, chain, op, keys, stack, counting, borrowed, Choice{}};
  scope(
      [](void* raw) {
        auto* c = static_cast<Context*>(raw);
        c->choice = choose_counting_or_not(c->shared, c->chain, c->op, c->keys, *c->stack,
                                           c->counting, /*in_host_scope=*/true);
        if (c->choice.node != nullptr && c->choice.node->options.impl_in_host_scope) {
          // Counted before the impl runs, as route() counts an impl it runs:
          // a call whose impl raises is still one its router decided.
          if (C10_UNLIKELY(c->counting)) bump(c->shared.counters->calls);
          c->choice.counted = true;
          own_arguments(c->borrowed);  // the impl takes them
          if (run_chosen_impl(c->shared, *c->choice.node, c->op, c->keys, c->stack,
                              c->counting)) {
            c->choice.done = true;
          } else {
            // Its error fell back: the fallback runs outside the scope, on
            // the op as the call started (the impl may have removed it).
            check_op_still_there(c->shared);
            c->choice.fell_back_from = c->choice.node;
            c->choice.node = nullptr;
          }
        }
      },
      &context);
  return context.choice;
}

// The routing itself, on a boxed call; both kernels end here. It only reads
// `shared`; the Router that owns the registration may publish new chains
// into it meanwhile.
C10_NOINLINE void raise_op_gone(const Router::Shared& shared) {
  TORCH_CHECK(false, "the native_registry router at ", shared.dispatch_key(), " of ",
              shared.watch->name,
              " was installed for an op that has since left the dispatcher (its library "
              "destroyed, the op perhaps defined again; before this call or by code this call "
              "ran: a cond, a runtime check, an impl): its overrides and its fallback are "
              "the old op's; install the graph again (or restore) to route the op as it is now");
}

// What route() leaves to the kernel that called it: nothing (the call's
// results are on its stack, or it raised), or the call of the captured
// kernel, which that kernel makes in the fallback's profiler range
// (run_fallback_boxed, or the typed kernel's unboxed call); [[nodiscard]], so a
// new caller cannot drop the fallback by ignoring it.
enum class [[nodiscard]] Routed : bool { kDone, kRunFallback };

// `borrowed`: a typed call's BorrowedArguments, else null.
NR_HOT Routed route(const Router::Shared& shared, const c10::OperatorHandle& op,
             c10::DispatchKeySet keys, Stack* stack, BorrowedArguments* borrowed) {
  check_op_still_there(shared);
  const Chain* chain = shared.chain.load(std::memory_order_acquire);
  const bool counting = shared.collect_stats.load(std::memory_order_relaxed);
  Choice choice = choose_in_scope(shared, *chain, op, keys, stack, counting, borrowed);
  if (choice.divert) {  // counted and logged when it comes back in
    own_arguments(borrowed);
    DivertedCallScope diverted;
    op.callBoxed(stack);
    return Routed::kDone;
  }
  if (C10_UNLIKELY(counting) && !choice.counted) bump(shared.counters->calls);
  if (choice.done) {
    // The impl ran in the host scope; its results are the op's as the call
    // started, which the caller would misread if the op changed meanwhile.
    check_op_still_there(shared);
    maybe_log(shared, RoutingDecision::Kind::kTaken, choice.node);
    return Routed::kDone;
  }
  if (choice.node != nullptr) {
    maybe_log(shared, RoutingDecision::Kind::kTaken, choice.node);
    own_arguments(borrowed);  // the impl takes them
    const bool ran = run_chosen_impl(shared, *choice.node, op, keys, stack, counting);
    check_op_still_there(shared);  // as above; and a fallback must not run the old op's kernel
    if (ran) return Routed::kDone;
    choice.fell_back_from = choice.node;
  }
  if (C10_UNLIKELY(counting)) {
    bump(shared.counters->fallbacks);
    if (choice.covered) bump(shared.counters->covered);
  }
  maybe_log(shared,
            choice.fell_back_from != nullptr ? RoutingDecision::Kind::kFellBack
            : choice.covered                 ? RoutingDecision::Kind::kCovered
                                             : RoutingDecision::Kind::kFallback,
            choice.fell_back_from);
  if (!shared.fallback) {
    if (shared.fallthrough) {
      own_arguments(borrowed);  // the next kernel takes them
      in_profiler_range([&shared] { return fallback_range_name(shared); }, [&] {
        op.redispatchBoxed(
            keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, shared.dispatch_key()),
            stack);
      });
      return Routed::kDone;
    }
    TORCH_CHECK_NOT_IMPLEMENTED(false, "no override took this call of ",
                                op.operator_name(), " and the op had no kernel at ",
                                shared.dispatch_key(), " before the router");
  }
  // Straight to the captured kernel, not through the dispatcher's entry:
  // this is what keeps autograd formulas that call this op from coming
  // back into the router. The calling kernel makes the call.
  return Routed::kRunFallback;
}

// The captured kernel on the boxed call, in the fallback's profiler range.
C10_NOINLINE void run_fallback_boxed(const Router::Shared& shared, const c10::OperatorHandle& op,
                                     c10::DispatchKeySet keys, Stack* stack) {
  in_profiler_range([&shared] { return fallback_range_name(shared); },
                    [&] { shared.fallback->callBoxed(op, keys, stack); });
}

// The kernel for every signature: the dispatcher boxes the call for it.
class BoxedRouterKernel final : public c10::OperatorKernel {
 public:
  explicit BoxedRouterKernel(std::shared_ptr<const Router::Shared> shared)
      : shared_(std::move(shared)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
    const Router::Shared& shared = *shared_;  // this functor may go during the call
    CallHold hold(shared);
    if (route(shared, op, keys, stack, nullptr) == Routed::kRunFallback) {
      run_fallback_boxed(shared, op, keys, stack);
    }
  }

 private:
  std::shared_ptr<const Router::Shared> shared_;
};

// ---- the typed kernel ----------------------------------------------------------

// The Stacks typed calls box into: one per nesting depth (an impl, a cond or
// the fallback may call another routed op, or this one), kept for the life of
// the thread and reused, so that a typed call allocates nothing of its own
// once this thread has made one at that depth. Deeper than kScratchDepth, a
// call boxes into a Stack of its own.
constexpr size_t kScratchDepth = 8;
struct ScratchStacks {
  Stack stacks[kScratchDepth];
  size_t depth = 0;
};

// This thread's ScratchStacks. The pointer is a trivial thread_local, so the
// call path pays no initialisation guard; the stacks are made on the thread's
// first typed call and freed when it exits. A typed call made after that,
// from another thread_local's destructor, boxes into a Stack of its own.
thread_local ScratchStacks* t_scratch = nullptr;
thread_local bool t_scratch_released = false;

struct ScratchOwner {
  ScratchStacks stacks;
  ~ScratchOwner() {
    t_scratch = nullptr;
    t_scratch_released = true;
  }
};

C10_NOINLINE ScratchStacks* make_scratch() {
  if (t_scratch_released) return nullptr;
  thread_local ScratchOwner owner;
  t_scratch = &owner.stacks;
  return t_scratch;
}

// Takes this depth's Stack for one call and leaves it empty on every exit,
// exceptions included, so that no argument outlives the call.
class ScratchStack {
 public:
  ScratchStack() : scratch_(t_scratch) {
    if (C10_UNLIKELY(scratch_ == nullptr)) scratch_ = make_scratch();
    if (C10_LIKELY(scratch_ != nullptr && scratch_->depth < kScratchDepth)) {
      stack_ = &scratch_->stacks[scratch_->depth++];
    } else {
      scratch_ = nullptr;
      stack_ = &own_.emplace();
    }
  }
  NR_HOT ~ScratchStack() {
    stack_->clear();
    if (scratch_ != nullptr) --scratch_->depth;
  }
  ScratchStack(const ScratchStack&) = delete;
  ScratchStack& operator=(const ScratchStack&) = delete;
  Stack* get() const { return stack_; }

 private:
  ScratchStacks* scratch_;
  Stack* stack_;
  std::optional<Stack> own_;
};

// ---- the captured kernel, unboxed ------------------------------------------

// c10::SafeKernelFunction offers callBoxed() only: the KernelFunction it
// holds and the token that says whether the registration it was taken from
// still stands are private. A typed call that declines would box its
// arguments once more for it, the kernel's wrapper unbox them and box the
// result, and the typed kernel unbox that again (about 150 instructions a
// call on torch 2.13). The two members are named here through explicit
// instantiations, which the language exempts from access checking
// ([temp.spec.general]); a PyTorch that renames or retypes either fails to
// compile here, it is never misread. A check torch might add to callBoxed
// would not fail to compile, though: only the PyTorch whose callBoxed was
// read (2.13: the token's check, then kernel_.callBoxed) takes this path;
// any other calls the fallback boxed, through callBoxed itself.
// (-DNR_FALLBACK_UNBOXED=0 builds the other path here.)
#ifndef NR_FALLBACK_UNBOXED
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 13
#define NR_FALLBACK_UNBOXED 1
#else
#define NR_FALLBACK_UNBOXED 0
#endif
#endif

#if NR_FALLBACK_UNBOXED
template <class Tag, typename Tag::type kMember>
struct PrivateMember {
  friend typename Tag::type member_of(Tag) { return kMember; }
};
struct SafeKernelKernel {
  using type = c10::KernelFunction c10::SafeKernelFunction::*;
  friend type member_of(SafeKernelKernel);
};
struct SafeKernelToken {
  using type = std::shared_ptr<c10::KernelToken> c10::SafeKernelFunction::*;
  friend type member_of(SafeKernelToken);
};
template struct PrivateMember<SafeKernelKernel, &c10::SafeKernelFunction::kernel_>;
template struct PrivateMember<SafeKernelToken, &c10::SafeKernelFunction::token_>;

// SafeKernelFunction::callBoxed unboxed: its check, with its error, when the
// registration the kernel was captured from is gone; else the kernel through
// KernelFunction::call, the dispatcher's own unboxed call (which boxes for a
// kernel that has no unboxed function).
template <class Return, class... Args>
NR_HOT Return call_unboxed(const c10::SafeKernelFunction& kernel,
                                      const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                      Args... args) {
  const std::shared_ptr<c10::KernelToken>& token = kernel.*member_of(SafeKernelToken{});
  TORCH_CHECK(token && token->isValid(), "SafeKernelFunction has been invalidated ",
              kernel.debug());
  return (kernel.*member_of(SafeKernelKernel{})).template call<Return, Args...>(op, keys, args...);
}
#else
// Named by the typed kernel's branch that `if constexpr` discards here: never
// instantiated, so never defined.
template <class Return, class... Args>
Return call_unboxed(const c10::SafeKernelFunction& kernel, const c10::OperatorHandle& op,
                    c10::DispatchKeySet keys, Args... args);
#endif  // NR_FALLBACK_UNBOXED
// In code, not around it: the typed kernel's body then holds no preprocessor
// line, and a seeded fault can switch a region of it (harness/mutation/cpp_schemata.py).
constexpr bool kFallbackUnboxed = NR_FALLBACK_UNBOXED;

// A typed call's argument as boxed: a tensor borrowed (BorrowedArguments),
// anything else copied.
inline c10::IValue boxed(const at::Tensor& tensor) {
  return c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor));
}
template <class T>
c10::IValue boxed(const T& value) {
  return c10::IValue(value);
}

// Pushes a typed call's arguments: one call, with vector::emplace_back's
// fast path inlined into it (which GCC otherwise calls once per argument).
template <class... Args>
[[gnu::flatten]] C10_NOINLINE void box_arguments(Stack* stack, const Args&... args) {
  (stack->emplace_back(boxed(args)), ...);
}

// BorrowedArguments' bits for a typed call of these arguments.
template <class... Args>
constexpr uint64_t borrowed_tensors() {
  uint64_t bits = 0;
  uint64_t bit = 1;
  ((bits |= std::is_same_v<std::decay_t<Args>, at::Tensor> ? bit : 0, bit <<= 1), ...);
  return bits;
}

// `lambda` as a kernel with its C++ signature, as torch::CppFunction makes it
// but for the schema CppFunction infers from the signature (router.cpp says
// why the router registers none). The signature is the op's own
// (has_exactly_signature): the router records nothing new with it.
template <class Lambda>
RouterKernel unboxed_kernel(Lambda&& lambda) {
  return {c10::KernelFunction::makeFromUnboxedLambda(std::forward<Lambda>(lambda)),
          c10::impl::CppSignature::make<Lambda>()};
}

// An unboxed kernel of signature Tensor(Args...): boxes the arguments into
// the scratch Stack and routes; the one result comes back unboxed.
template <class... Args>
struct TypedRouter {
  using Signature = at::Tensor(Args...);

  static RouterKernel kernel(std::shared_ptr<const Router::Shared> shared) {
    return unboxed_kernel(
        [shared = std::move(shared)](c10::DispatchKeySet keys, Args... args) -> at::Tensor {
          const Router::Shared& pinned = *shared;  // as in BoxedRouterKernel
          CallHold hold(pinned);
          ScratchStack scratch;
          Stack* stack = scratch.get();
          // Let go (or owned) before the scratch stack is cleared.
          BorrowedArguments borrowed(stack, borrowed_tensors<Args...>());
          box_arguments(stack, args...);
          if (route(pinned, pinned.op, keys, stack, &borrowed) == Routed::kRunFallback) {
            if constexpr (kFallbackUnboxed) {
              // Called unboxed, with the arguments the call came with: the
              // stack holds the same values (put back there, if an impl's
              // error fell back).
              return in_profiler_range([&pinned] { return fallback_range_name(pinned); }, [&] {
                return call_unboxed<at::Tensor, Args...>(*pinned.fallback, pinned.op, keys, args...);
              });
            } else {
              borrowed.own();  // the captured kernel takes them
              run_fallback_boxed(pinned, pinned.op, keys, stack);
            }
          }
          // Every path that left results on the stack took the arguments
          // off it, owned first.
          TORCH_INTERNAL_ASSERT(!borrowed.borrowed(), "a call of ", pinned.op.operator_name(),
                                " returned results with its arguments still borrowed");
          TORCH_INTERNAL_ASSERT(stack->size() == 1, "a kernel of ", pinned.op.operator_name(),
                                " left ", stack->size(), " values on the stack, expected 1");
          return std::move(stack->back()).toTensor();
        });
  }
};

// A signature no op has: see has_exactly_signature.
struct NoSuchArgument {};

// Whether `op` already has an unboxed kernel whose C++ signature is exactly
// Signature. OperatorHandle::typed<F>() throws when a kernel of another
// signature was registered and passes when none was; the second probe, with
// a signature no kernel can have, tells "Signature" from "none". Registering
// the typed router on an op without a C++ signature would record one the op
// keeps after the router is gone, so such ops get the boxed kernel.
template <class Signature>
bool has_exactly_signature(const c10::OperatorHandle& op) {
  try {
    (void)op.typed<Signature>();
  } catch (const c10::Error&) {
    return false;
  }
  try {
    (void)op.typed<void(NoSuchArgument)>();
  } catch (const c10::Error&) {
    return true;
  }
  return false;
}

// Whether `op`'s schema is the one LibTorch infers from Signature, compared
// as LibTorch compares a kernel's with the op's. An op's C++ signature can be
// another op's: LibTorch keeps it on the op's name while any registration
// stands there, so an op destroyed under its router and defined again with
// another schema still has the old op's, and a typed kernel of it would take
// the old op's arguments off a call of the new one.
template <class Signature>
bool schema_is_of_signature(const c10::OperatorHandle& op) {
  const c10::FunctionSchema inferred = c10::inferFunctionSchemaFlattenedReturns<Signature>();
  return !c10::findSchemaDifferences(op.schema().cloneWithRealTypes(), inferred.cloneWithRealTypes());
}

// Sets `out` to Typed's kernel if none is chosen yet and the op's signature is Typed's.
template <class Typed>
void try_typed(const c10::OperatorHandle& op, const std::shared_ptr<const Router::Shared>& shared,
               std::optional<RouterKernel>& out) {
  using Signature = typename Typed::Signature;
  if (!out && has_exactly_signature<Signature>(op) && schema_is_of_signature<Signature>(op)) {
    out.emplace(Typed::kernel(shared));
  }
}

// The typed kernel for the op's signature, if it is a common one; nullopt
// otherwise. The C++ signature alone decides (router.h): an op of no or
// several returns never has one of these, and the typed kernel decides as
// the boxed one does for an op that writes an argument its kernel takes as
// `const Tensor&` (a custom op's may).
std::optional<RouterKernel> typed_kernel(const c10::OperatorHandle& op,
                                         const std::shared_ptr<const Router::Shared>& shared) {
  std::optional<RouterKernel> out;
  using T = const at::Tensor&;
  using S = const c10::Scalar&;
  try_typed<TypedRouter<T>>(op, shared, out);
  try_typed<TypedRouter<T, T>>(op, shared, out);
  try_typed<TypedRouter<T, T, S>>(op, shared, out);
  try_typed<TypedRouter<T, S>>(op, shared, out);
  try_typed<TypedRouter<T, S, S>>(op, shared, out);
  return out;
}

}  // namespace

RouterKernel router_kernel(const std::shared_ptr<const Router::Shared>& shared, bool typed) {
  if (typed) {
    std::optional<RouterKernel> kernel = typed_kernel(shared->op, shared);
    if (kernel) return std::move(*kernel);
  }
  return {c10::KernelFunction::makeFromBoxedFunctor(std::make_unique<BoxedRouterKernel>(shared)), std::nullopt};
}

}  // namespace detail
}  // namespace native_registry
