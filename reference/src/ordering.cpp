// Ordering: reorder_graphs runs the user's ordering function on a copy of
// every graph without the lock, checks that each result is a reordering of
// its graph, and replaces the graphs that changed (and are unchanged since).
// What it installs afterwards is install.cpp's work, asked for by mode.

#include "registry_impl.h"

#include <algorithm>
#include <set>
#include <utility>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

namespace native_registry {

namespace {

// Why `candidate` cannot replace `original` as the graph of `key`, or "".
std::string why_not_a_reordering(const GraphKey& key, const Graph& original,
                                 const Graph& candidate) {
  std::set<const OverrideNode*> seen;
  for (const NodePtr& node : candidate) {
    if (!node) return "it holds a null node";
    if (!(node->key == key)) {
      return "node " + node->node_id + " belongs to the graph of " +
             node->key.to_string();
    }
    if (std::none_of(original.begin(), original.end(),
                     [&](const NodePtr& n) { return n.get() == node.get(); })) {
      return "node " + node->node_id + " is not in this graph";
    }
    if (!seen.insert(node.get()).second) {
      return "node " + node->node_id + " appears twice";
    }
  }
  return "";
}

}  // namespace

// ---- ordering ---------------------------------------------------------------

std::vector<GraphKey> Registry::reorder_graphs(const OrderingFn& fn, bool reinstall) {
  return reorder_graphs(fn, reinstall ? ReorderInstall::kInstalled : ReorderInstall::kNothing);
}

std::vector<GraphKey> Registry::reorder_graphs(const OrderingFn& fn, ReorderInstall install) {
  if (!fn) throw InvalidArgumentError("the ordering function must be callable");
  // The ordering function runs without the lock, on a copy of the graphs:
  // it may call the control plane itself, or log.
  Impl& r = *impl_;
  std::map<GraphKey, Graph> originals;
  {
    std::lock_guard<std::mutex> lock(r.mutex_);
    originals = r.graphs_.graphs();
  }
  std::map<GraphKey, Graph> results;
  for (const auto& [key, original] : originals) {
    const std::string where = key.to_string();
    Graph reordered;
    try {
      reordered = fn(key.op_symbol, key.dispatch_key, original);
    } catch (const AbortError&) {
      throw;  // nothing has changed
#if defined(__GLIBCXX__)
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is ending (pthread_exit), not the function failing
#endif
    } catch (const std::exception& e) {
      r.log_unlocked(LogLevel::kWarning, "Graph transformation failed for " + where + ": " +
                                           e.what() + ". Preserving original graph.");
      continue;
    } catch (...) {
      r.log_unlocked(LogLevel::kWarning, "Graph transformation failed for " + where +
                                           ": unknown exception. Preserving original graph.");
      continue;
    }
    const std::string problem = why_not_a_reordering(key, original, reordered);
    if (!problem.empty()) {
      r.log_unlocked(LogLevel::kWarning, "Graph transformation failed for " + where +
                                           ": the returned graph is invalid (" + problem +
                                           "). Preserving original graph.");
      continue;
    }
    if (reordered != original) results.emplace(key, std::move(reordered));
  }

  Impl::ControlScope scope(r);
  std::map<GraphKey, Graph> replaced;  // the originals of graphs that changed
  for (auto& [key, reordered] : results) {
    const Graph* current = r.graphs_.find(key);
    if (current == nullptr || *current != originals.at(key)) {
      r.log(LogLevel::kWarning, "Graph transformation failed for " + key.to_string() +
                                  ": the graph changed while the ordering function ran. "
                                  "Preserving the current graph.");
      continue;
    }
    replaced.emplace(key, r.graphs_.replace(key, std::move(reordered)));
  }
  std::vector<GraphKey> changed;
  for (const auto& entry : replaced) changed.push_back(entry.first);
  try {
    if (install == ReorderInstall::kInstalled) {
      r.republish_installed({changed.begin(), changed.end()});  // all or nothing: see there
    } else if (install == ReorderInstall::kChanged) {
      r.install_graphs_locked(changed);
    }
  } catch (...) {
    for (auto& [key, original] : replaced) r.graphs_.replace(key, std::move(original));
    throw;
  }
  // Nodes an ordering function dropped are freed with `originals`, which
  // holds every node `replaced` does and outlives the lock (declared first).
  return changed;
}

}  // namespace native_registry
