#pragma once

// RouterTable: the routers a registry has in the dispatcher, by graph key;
// the keys install_graph has taken charge of ("installed": a filter change
// or a reorder republishes these); the empty-chain policy, which decides
// what an installed graph whose chain empties keeps; and the settings its
// routers follow (the coverage check, the impl error policy).
//
// Invariants (check() throws std::logic_error naming the first one broken):
//  * every key it holds was admitted (its dispatch key parsed once);
//  * a router exists only for an installed key;
//  * every router follows the table's settings (its coverage check, or
//    none, its impl error policy, whether it counts);
//  * every router counts into its key's entry of counters();
//  * a router's published chain holds only nodes of its key and of this
//    registry. (Each of them has its `_native` op active: an invariant
//    across this table and the NativeOpTable, which Registry::check_invariants checks.)
//
// Owns: the routers (made on an op the caller resolved, published into,
// removed), the installed keys, the policy. May not touch: graphs, filters,
// `_native` ops; it resolves no op itself. The registry's lock guards it;
// what it drops it hands back (`released`), for the caller to free once the
// lock is gone.

#include "native_op_table.h"
#include "router.h"

#include <native_registry/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>

namespace native_registry::detail {

class RouterTable {
 public:
  const std::map<GraphKey, std::unique_ptr<Router>>& routers() const { return routers_; }
  const Router* find(const GraphKey& key) const;
  RouterState state(const GraphKey& key) const;

  // What publishing a chain at `key` under `mode` takes, the router in
  // place considered: one whose op left the dispatcher since (Router::op_gone)
  // is rebuilt on the op as it is now, or removed if the chain is empty.
  enum class Step { kNothing, kPublishInPlace, kRemove, kNewRouter };
  Step step_for(const GraphKey& key, bool empty_chain, InstallMode mode) const;
  // Publishes `chain` into the router of `key`, which exists.
  void publish_in_place(const GraphKey& key, const Graph& chain);
  // Installs a router at `key` on `op` routing through `chain`. The router
  // in place goes first, so the new one falls back to the op's own kernel
  // rather than to the router it replaces.
  void install(const GraphKey& key, const c10::OperatorHandle& op, const Graph& chain,
               Released& released);
  // Takes the router of `key` out of the dispatcher (if any). Its chains and
  // nodes outlive it until the lock is released (and until the last call
  // inside it returns).
  void remove(const GraphKey& key, Released& released);
  void remove_all(Released& released);

  bool is_installed(const GraphKey& key) const { return installed_.count(key) > 0; }
  void mark_installed(const GraphKey& key) { installed_.insert(key); }
  void forget_installed(const GraphKey& key) { installed_.erase(key); }
  const std::set<GraphKey>& installed() const { return installed_; }
  void set_installed(std::set<GraphKey> keys) { installed_ = std::move(keys); }

  // The settings every router follows, those in place at once.
  const RouterSettings& settings() const { return settings_; }
  void set_coverage(std::shared_ptr<const CoverageCheck> coverage, Released& released);
  void set_impl_error_policy(ImplErrorPolicy policy);
  void set_collect_stats(bool collect);
  // The counters of each graph a router has served, by key: kept across
  // routers rebuilt at a key, zeroed by reset_counters().
  const std::map<GraphKey, std::shared_ptr<GraphCounters>>& counters() const { return counters_; }
  void reset_counters();

  EmptyChainPolicy empty_chain_policy() const { return policy_; }
  void set_empty_chain_policy(EmptyChainPolicy policy) { policy_ = policy; }

  void check(uint64_t registry_serial) const;

 private:
  std::map<GraphKey, std::unique_ptr<Router>> routers_;
  std::set<GraphKey> installed_;
  EmptyChainPolicy policy_ = EmptyChainPolicy::kKeepDormantRouter;
  RouterSettings settings_;
  std::map<GraphKey, std::shared_ptr<GraphCounters>> counters_;
};

}  // namespace native_registry::detail
