// Routers at install time: capturing the kernel live at the key (or noting
// a fallthrough), installing the router's kernel in a library handle of its
// own, publishing interned chains, and the switch between typed and boxed
// kernels. The call path itself is call_path.cpp's.

#include "router_shared.h"

#include "quiet_override_warning.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace native_registry::detail {

namespace {
std::atomic<uint64_t> g_next_router_id{1};
}  // namespace

namespace {
// NATIVE_REGISTRY_BOXED_ROUTERS=1 gives every router the boxed kernel, so
// that a suite can be run over that path too (meson test
// conformance_cpp_reference_boxed): the typed kernels are for speed only.
bool typed_routers_by_default() {
  const char* boxed = std::getenv("NATIVE_REGISTRY_BOXED_ROUTERS");
  return boxed == nullptr || std::string_view(boxed) != "1";
}
std::atomic<bool> g_typed_routers_enabled{typed_routers_by_default()};
}  // namespace

}  // namespace native_registry::detail

// See native_registry/router_kind.h.
void native_registry::set_typed_routers_enabled(bool enabled) {
  detail::g_typed_routers_enabled.store(enabled, std::memory_order_relaxed);
}

bool native_registry::typed_routers_enabled() {
  return detail::g_typed_routers_enabled.load(std::memory_order_relaxed);
}

namespace native_registry::detail {

namespace {

// Whether the kernel the dispatcher computed for `key` is a fallthrough. The
// handle has no query for a computed entry (isKernelFallthroughKernel wants a
// kernel registered at the key itself, and most fallthroughs are backend
// fallbacks), so this reads the computed table's dump, where such an entry
// reads "<Key>: fallthrough registered at ...". Called at install only.
// Built with append, not operator+: GCC 12 at -O3 reports a false -Wrestrict
// on the inlined concatenation.
C10_NOINLINE bool computed_kernel_is_fallthrough(const c10::OperatorHandle& op,
                                                 c10::DispatchKey key) {
  std::string entry("\n");
  entry.append(c10::toString(key)).append(": fallthrough ");
  std::string table("\n");
  table.append(op.dumpComputedTable());
  return table.find(entry) != std::string::npos;
}

}  // namespace

Router::Shared::Shared(const GraphKey& graph_key, const c10::OperatorHandle& handle)
    : key(graph_key), op(handle), watch(watch_op(handle)),
      schema_writes_nothing(!handle.schema().is_mutable()) {
  if (computed_kernel_is_fallthrough(op, dispatch_key())) {
    fallthrough = true;
  } else if (op.hasComputedKernelForDispatchKey(dispatch_key())) {
    fallback.emplace(op.getComputedKernelForDispatchKey(dispatch_key()));
  }
}

namespace {

std::shared_ptr<Router::Shared> make_shared_state(const GraphKey& key,
                                                  const c10::OperatorHandle& op) {
  return std::shared_ptr<Router::Shared>(new Router::Shared(key, op),
                                         [](Router::Shared* shared) { let_go(shared); });
}

}  // namespace

Router::Router(const GraphKey& key, const c10::OperatorHandle& op, const Graph& chain,
               const RouterSettings& settings, std::shared_ptr<GraphCounters> counters)
    : shared_(make_shared_state(key, op)),
      id_(g_next_router_id.fetch_add(1)) {
  TORCH_INTERNAL_ASSERT(counters != nullptr, "a router of ", key.to_string(), " without counters");
  shared_->counters = std::move(counters);
  publish(chain);
  apply(settings);
  RouterKernel kernel = router_kernel(shared_, typed_routers_enabled());
  QuietOverrideWarning quiet;
  // Registered as torch::Library::impl would (the same debug text, which
  // compile_routing.py reads) but with no kernel schema. torch::Library
  // records the one it infers from a typed kernel's C++ signature; LibTorch
  // keeps it on the op's name while this registration stands, even once the
  // op's definition is gone, and refused a new definition of the name with
  // another schema against it. The boxed kernel has none to record.
  registration_.emplace(c10::Dispatcher::singleton().registerImpl(
      op.operator_name(), key.parsed_dispatch_key, std::move(kernel.function), kernel.signature,
      /*inferred_function_schema=*/nullptr, "registered at " __FILE__ ":" + std::to_string(__LINE__)));
}

Router::~Router() = default;

void Router::publish(const Graph& nodes) {
  std::vector<const OverrideNode*> identity;
  identity.reserve(nodes.size());
  for (const NodePtr& node : nodes) identity.push_back(node.get());
  auto& slot = shared_->interned[identity];
  if (!slot) {
    auto chain = std::make_unique<Chain>();
    chain->nodes = nodes;
    const HostCondResolver resolve = host_cond_resolver();
    chain->host_conds.reserve(nodes.size());
    for (const NodePtr& node : nodes) {
      chain->divert_when_tracing |= node->options.divert_when_tracing;
      chain->needs_host_scope |= node->options.needs_host_scope;
      chain->host_conds.push_back(resolve != nullptr ? resolve(node->cond) : HostCond{});
    }
    slot = std::move(chain);
  }
  shared_->chain.store(slot.get(), std::memory_order_release);
}

void Router::apply(const RouterSettings& settings) {
  const std::shared_ptr<const CoverageCheck>& coverage = settings.coverage;
  if (coverage && std::find(shared_->coverages.begin(), shared_->coverages.end(), coverage) ==
                      shared_->coverages.end()) {
    shared_->coverages.push_back(coverage);
  }
  shared_->coverage.store(coverage.get(), std::memory_order_release);
  shared_->impl_errors.store(settings.impl_errors, std::memory_order_relaxed);
  shared_->collect_stats.store(settings.collect_stats, std::memory_order_relaxed);
}

const GraphCounters* Router::counters() const { return shared_->counters.get(); }

bool Router::collects_stats() const {
  return shared_->collect_stats.load(std::memory_order_relaxed);
}

ImplErrorPolicy Router::impl_error_policy() const {
  return shared_->impl_errors.load(std::memory_order_relaxed);
}

const CoverageCheck* Router::coverage() const {
  return shared_->coverage.load(std::memory_order_acquire);
}

bool Router::op_gone() const { return shared_->watch->gone.load(std::memory_order_acquire); }

bool Router::has_fallback() const { return shared_->fallback.has_value(); }

bool Router::falls_through() const { return shared_->fallthrough; }

Graph Router::published() const {
  return shared_->chain.load(std::memory_order_acquire)->nodes;
}

}  // namespace native_registry::detail
