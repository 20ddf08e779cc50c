#pragma once

// FilterSet: what makes a node enabled. The disabled entries (dsl names, op
// symbols, dispatch keys that deregister_op_overrides named and
// reenable_op_overrides has not taken back) and the depth of the
// unconditional mask (Registry::UnconditionalMask).
//
// Invariants (check()): the mask depth is never negative. A node no entry
// names is enabled; an unconditional override is enabled whatever the
// entries say while no mask is up (it is the op's implementation, not a
// route to the same answer); any other node an entry names is disabled.
//
// Owns: the entries and the mask, and the rule above (here and nowhere
// else). May not touch: graphs, routers, `_native` ops. A snapshot copies
// the entries only: the mask in force is the caller's scope, not state to
// restore.

#include <native_registry/types.h>

#include <set>
#include <string>

namespace native_registry::detail {

// The disabled entries.
struct FilterEntries {
  std::set<std::string> dsl_names, op_symbols, dispatch_keys;
  // Which kinds of entry name a node (Registry::explain reports them).
  struct Naming {
    bool dsl_name = false, op_symbol = false, dispatch_key = false;
    bool any() const { return dsl_name || op_symbol || dispatch_key; }
  };
  Naming naming(const OverrideNode& node) const;
  bool names(const OverrideNode& node) const { return naming(node).any(); }
  Filter as_filter() const;  // sorted, as Registry::filters() gives it
  void add(const Filter& filter);
};

// Throws, naming the entry, where an entry of `filter` is blank; `labels`
// name its three lists (dsl names, op symbols, dispatch keys) in the message.
void check_filter_entries(const Filter& filter, const char* const (&labels)[3]);

class FilterSet {
 public:
  // The rule: whether `entries` leave `node` enabled with the mask at `mask_depth`.
  static bool enabled_under(const FilterEntries& entries, int mask_depth, const OverrideNode& node);
  bool is_enabled(const OverrideNode& node) const { return enabled_under(entries_, mask_depth_, node); }
  // Whether an entry names `node`, enabled or not (the unconditional exemption aside).
  bool names(const OverrideNode& node) const { return entries_.names(node); }
  const FilterEntries& entries() const { return entries_; }
  void set_entries(FilterEntries entries) { entries_ = std::move(entries); }
  void disable(const Filter& filter);
  void enable(const Filter& filter);

  int mask_depth() const { return mask_depth_; }
  void push_mask() { ++mask_depth_; }
  void pop_mask() { --mask_depth_; }

  void check() const;

 private:
  FilterEntries entries_;
  int mask_depth_ = 0;
};

}  // namespace native_registry::detail
