// Stats: Registry::set_collect_stats, stats() and reset_stats(), over the
// nodes' counters (NodeCounters, held by each node) and the graphs'
// (GraphCounters, held by the RouterTable per key). The call path counts
// (call_path.cpp); this file only switches it and reads the counts.

#include "registry_impl.h"

namespace native_registry {

namespace {

uint64_t read(const std::atomic<uint64_t>& count) { return count.load(std::memory_order_relaxed); }

}  // namespace

void Registry::set_collect_stats(bool collect) {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  impl_->routers_.set_collect_stats(collect);
}

bool Registry::collect_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  return impl_->routers_.settings().collect_stats;
}

RoutingStats Registry::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  RoutingStats stats;
  for (const auto& [key, graph] : impl_->graphs_.graphs()) {
    for (const NodePtr& node : graph) {
      const NodeCounters& counts = *node->counters;
      stats.nodes.push_back({node->node_id, node->dsl_name, node->key, read(counts.taken),
                             read(counts.declined), read(counts.runtime_unavailable),
                             read(counts.raised)});
    }
  }
  for (const auto& [key, counters] : impl_->routers_.counters()) {
    stats.graphs.push_back({key, read(counters->calls), read(counters->fallbacks),
                            read(counters->covered), read(counters->fell_back_after_error)});
  }
  return stats;
}

void Registry::reset_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex_);
  for (const auto& [key, graph] : impl_->graphs_.graphs()) {
    for (const NodePtr& node : graph) node->counters->reset();
  }
  impl_->routers_.reset_counters();
}

}  // namespace native_registry
