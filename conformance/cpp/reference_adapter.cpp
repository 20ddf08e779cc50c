// The reference registry (native_registry::Registry) under the C++
// conformance suite. Each adapter owns a Registry of its own; a scope is a
// snapshot restored when it dies.

#include "suite.h"

#include <native_registry/native_registry.h>


namespace conformance {
namespace {

namespace nr = native_registry;

// The suite's neutral vocabulary to the reference's: the same fields.
nr::GraphKey to_reference(const Key& key) {
  return {key.lib_symbol, key.op_symbol, key.dispatch_key};
}
nr::Filter to_reference(const Filter& filter) {
  return {filter.dsl_names, filter.op_symbols, filter.dispatch_keys};
}

// A setting put back when the scope dies (coverage_check, impl_error_policy, aot_enabled).
struct Undo final : Scope {
  explicit Undo(std::function<void()> put_back) : undo(std::move(put_back)) {}
  ~Undo() override { undo(); }
  std::function<void()> undo;
};

class ReferenceAdapter final : public RegistryAdapter {
 public:
  ReferenceAdapter() {
    registry_.set_log_sink([this](nr::LogLevel level, const std::string& message) {
      if (level != nr::LogLevel::kWarning) return;
      warnings_.push_back(message);
      if (warning_handler_) warning_handler_(message);
    });
  }

  std::string name() const override { return "reference"; }
  bool supports(const std::string&) const override { return true; }

  std::unique_ptr<Scope> scope() override {
    struct Restore final : Scope {
      Restore(nr::Registry& r) : registry(r), saved(r.snapshot()) {}
      ~Restore() override { registry.restore(saved); }
      nr::Registry& registry;
      nr::Snapshot saved;
    };
    return std::make_unique<Restore>(registry_);
  }

  void self_check() override { registry_.check_invariants(); }

  void register_override(const Override& o) override {
    nr::OverrideOptions options;
    options.try_initialize_runtime = o.try_initialize_runtime;
    options.unconditional_override = o.unconditional_override;
    translated([&] {
      registry_.register_op_override(o.dsl_name, o.lib_symbol, o.op_symbol, o.dispatch_key,
                                     o.cond, o.impl, options);
    });
  }

  std::vector<NodeInfo> graph(const Key& key) override {
    std::vector<NodeInfo> out;
    for (const nr::NodePtr& node : registry_.graph(to_reference(key))) {
      out.push_back({node->dsl_name, node->key.lib_symbol, node->key.op_symbol, node->key.dispatch_key,
                     node->node_id, node->options.unconditional_override,
                     static_cast<bool>(node->options.try_initialize_runtime), registry_.is_enabled(*node)});
    }
    return out;
  }

  void set_graph(const Key& key, const std::vector<std::string>& node_ids) override {
    registry_.reorder_graphs([&](const std::string&, const std::string&, const nr::Graph& g) {
      if (g.empty() || !(g[0]->key == to_reference(key))) return g;
      return nodes_by_ids(g, node_ids);
    });
  }

  void reorder(const Ordering& fn) override {
    registry_.reorder_graphs([&](const std::string& op, const std::string& key, const nr::Graph& g) {
      std::vector<NodeInfo> infos;
      for (const auto& node : g) infos.push_back({node->dsl_name, node->key.lib_symbol,
                                                  node->key.op_symbol, node->key.dispatch_key, node->node_id});
      return nodes_by_ids(g, fn(op, key, infos));
    });
  }

  std::vector<std::string> warnings() override { return warnings_; }
  void set_warning_handler(std::function<void(const std::string&)> handler) override {
    warning_handler_ = std::move(handler);
  }

  void install(const Key& key) override {
    translated([&] { registry_.install_graph(to_reference(key), nr::InstallMode::kReinstall); });
  }
  void install_all() override {
    translated([&] { registry_.install_all(); });
  }
  bool router_installed(const Key& key) override {
    return registry_.router_state(to_reference(key)) != nr::RouterState::kAbsent;
  }

  void disable(const Filter& filter) override {
    translated([&] { registry_.deregister_op_overrides(to_reference(filter)); });
  }
  void enable(const Filter& filter) override {
    translated([&] { registry_.reenable_op_overrides(to_reference(filter)); });
  }

  std::unique_ptr<Scope> unconditional_masked() override {
    struct Mask final : Scope {
      explicit Mask(nr::Registry& r) : mask(r) {}
      nr::Registry::UnconditionalMask mask;
    };
    return std::make_unique<Mask>(registry_);
  }

  std::vector<std::string> dsl_operations(const std::string& dsl,
                                          const std::string& lib_symbol) override {
    return registry_.get_dsl_operations(dsl, lib_symbol);
  }
  void allow_namespace(const std::string& lib_symbol) override {
    translated([&] { registry_.allow_namespace(lib_symbol); });
  }
  bool namespace_allowed(const std::string& lib_symbol) override {
    return registry_.is_namespace_allowed(lib_symbol);
  }

  std::unique_ptr<Scope> coverage_check(CoverageCheckFn check) override {
    auto undo = [this, previous = registry_.coverage_check()] { registry_.set_coverage_check(previous); };
    registry_.set_coverage_check([check = std::move(check)](
                                     const nr::GraphKey& graph, const c10::OperatorHandle& op,
                                     c10::DispatchKeySet keys, const Stack& stack) {
      return check(Key{graph.lib_symbol, graph.op_symbol, graph.dispatch_key}, op, keys, stack);
    });
    return std::make_unique<Undo>(std::move(undo));
  }

  std::unique_ptr<Scope> impl_error_policy(const std::string& policy) override {
    if (policy != "raise" && policy != "fallback") throw InvalidArgument("impl error policy " + policy);
    auto undo = [this, previous = registry_.impl_error_policy()] {
      registry_.set_impl_error_policy(previous);
    };
    registry_.set_impl_error_policy(policy == "fallback" ? nr::ImplErrorPolicy::kFallback
                                                         : nr::ImplErrorPolicy::kRaise);
    return std::make_unique<Undo>(std::move(undo));
  }

  std::unique_ptr<Scope> disabled_in_thread(const Filter& filter) override {
    struct Disabled final : Scope {
      Disabled(const nr::Registry& registry, const nr::Filter& filter) : scope(registry, filter) {}
      nr::Registry::DisabledInThread scope;
    };
    return std::make_unique<Disabled>(
        registry_, nr::Filter{filter.dsl_names, filter.op_symbols, filter.dispatch_keys});
  }

  std::unique_ptr<Scope> collect_stats(bool collect) override {
    auto undo = [this, previous = registry_.collect_stats()] { registry_.set_collect_stats(previous); };
    registry_.set_collect_stats(collect);
    return std::make_unique<Undo>(std::move(undo));
  }

  NodeCounts node_counts(const NodeInfo& node) override {
    for (const nr::NodeStats& entry : registry_.stats().nodes) {
      if (entry.node_id == node.node_id) {
        return {entry.taken, entry.declined, entry.runtime_unavailable, entry.raised};
      }
    }
    throw std::logic_error("no node " + node.node_id + " in the registry's graphs");
  }

  GraphCounts graph_counts(const Key& key) override {
    for (const nr::GraphStats& entry : registry_.stats().graphs) {
      if (entry.key == to_reference(key)) return {entry.calls, entry.fallbacks};
    }
    return {};
  }

  void reset_stats() override { registry_.reset_stats(); }

  std::unique_ptr<Scope> aot_enabled(bool enabled) override {
    auto undo = [previous = nr::coverage_checks_enabled()] { nr::set_coverage_checks_enabled(previous); };
    nr::set_coverage_checks_enabled(enabled);
    return std::make_unique<Undo>(std::move(undo));
  }

  ExplainInfo explain(const c10::OperatorHandle& op, const Stack& stack,
                      const std::string& dispatch_key) override {
    ExplainInfo out;
    translated([&] {
      const nr::Explanation e = registry_.explain(op, stack, dispatch_key);
      out.op = e.op_name;
      out.dispatch_key = e.graph.dispatch_key;
      out.why_key = e.why_key;
      out.router = e.router;
      out.coverage = e.coverage;
      for (const nr::ExplainedNode& node : e.nodes) {
        out.nodes.push_back({node.node_id, node.dsl_name, nr::to_string(node.verdict), node.detail});
      }
      out.kernel = nr::to_string(e.kernel);
      out.kernel_node_id = e.kernel_node_id;
      out.kernel_dsl_name = e.kernel_dsl_name;
      out.kernel_detail = e.kernel_detail;
      out.table = e.to_string();
    });
    return out;
  }

  std::optional<c10::OperatorHandle> native_op(const NodeInfo& node) override {
    // Held while the adapter lives, as a recorded program holds the op: the
    // reference undefines a retired op nothing holds.
    auto held = nr::hold_native_op(node.node_id);
    if (!held) return std::nullopt;
    held_native_ops_.push_back(held);
    return *held;
  }

 private:
  template <typename F>
  static void translated(F&& f) {
    with_suite_errors<nr::InvalidArgumentError, nr::OperatorNotFoundError>(std::forward<F>(f));
  }

  nr::Registry registry_;
  std::vector<std::string> warnings_;
  std::function<void(const std::string&)> warning_handler_;
  // Released before the registry goes, whose destruction then undefines them.
  std::vector<std::shared_ptr<const c10::OperatorHandle>> held_native_ops_;
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(
    Reference, Conformance,
    ::testing::Values(Implementation{"reference",
                                     [] { return std::make_unique<ReferenceAdapter>(); }}),
    [](const ::testing::TestParamInfo<Implementation>& info) { return info.param.name; });

}  // namespace conformance
