// FilterSet (filter_set.h): the disabled entries, the unconditional mask, and
// whether a node is enabled.

#include "filter_set.h"

#include "names.h"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace native_registry::detail {

FilterEntries::Naming FilterEntries::naming(const OverrideNode& node) const {
  return {dsl_names.count(node.dsl_name) > 0, op_symbols.count(node.key.op_symbol) > 0,
          dispatch_keys.count(node.key.dispatch_key) > 0};
}

Filter FilterEntries::as_filter() const {
  return {{dsl_names.begin(), dsl_names.end()},
          {op_symbols.begin(), op_symbols.end()},
          {dispatch_keys.begin(), dispatch_keys.end()}};
}

void FilterEntries::add(const Filter& filter) {
  dsl_names.insert(filter.dsl_names.begin(), filter.dsl_names.end());
  op_symbols.insert(filter.op_symbols.begin(), filter.op_symbols.end());
  dispatch_keys.insert(filter.dispatch_keys.begin(), filter.dispatch_keys.end());
}

void check_filter_entries(const Filter& filter, const char* const (&labels)[3]) {
  const std::vector<std::string>* lists[] = {&filter.dsl_names, &filter.op_symbols,
                                             &filter.dispatch_keys};
  for (size_t i = 0; i < 3; ++i) {
    for (const std::string& entry : *lists[i]) check_not_blank(labels[i], entry);
  }
}

bool FilterSet::enabled_under(const FilterEntries& entries, int mask_depth,
                              const OverrideNode& node) {
  if (!entries.names(node)) return true;
  // An unconditional override is the op's implementation: a disable leaves
  // it in place unless the mask is also up.
  return node.options.unconditional_override && mask_depth == 0;
}

void FilterSet::disable(const Filter& filter) { entries_.add(filter); }

void FilterSet::enable(const Filter& filter) {
  for (const auto& name : filter.dsl_names) entries_.dsl_names.erase(name);
  for (const auto& name : filter.op_symbols) entries_.op_symbols.erase(name);
  for (const auto& name : filter.dispatch_keys) entries_.dispatch_keys.erase(name);
}

// ---- invariants -------------------------------------------------------------
void FilterSet::check() const {
  if (mask_depth_ < 0) throw std::logic_error("invariant: negative unconditional mask depth");
}

}  // namespace native_registry::detail
