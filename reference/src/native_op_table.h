#pragma once

// NativeOpTable: the active `_native` ops of a registry's nodes, by node_id,
// and their hand-off to and from the process-wide store of retired ops
// (retired_native_ops.h). See Note [Retired _native ops] (native_op.h).
//
// Invariants (check() throws std::logic_error naming the first one broken):
//  * it holds active ops only, none of them also in the retired store;
//  * the retired store holds no more than its bound.
// So the `_native` ops defined in the process are the active ones of every
// registry plus the store's: a scope per test leaves no op behind.
//
// Owns: the active ops; activation (all or nothing) and retirement. May not
// touch: graphs, filters, routers. The registry's lock guards it; what it
// drops it hands back (`released`), for the caller to free once the lock is
// gone.

#include "native_op.h"

#include <native_registry/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace native_registry::detail {

// What outlives the registry's lock before it is freed (Registry::Impl::Pending).
using Released = std::vector<std::shared_ptr<const void>>;

// An active op as a snapshot records it: its node, and the signature of the
// target it was defined for (a restore that must define it again refuses a
// target of another schema, as the op itself would).
struct NativeRecord {
  NodePtr node;
  std::string signature;
};
using NativeRecords = std::map<std::string, NativeRecord>;

class NativeOpTable {
 public:
  const std::map<std::string, std::unique_ptr<NativeOp>>& ops() const { return ops_; }
  // Throws what activate(chain, recorded) would, changing nothing.
  void check_activation(const Graph& chain, const NativeRecords* recorded) const;
  // Activates the op of every node of `chain`: defines it if it is not
  // defined, takes it back from the retired store if kept there, points it
  // at the node it names now. All or nothing: throws OperatorChangedError,
  // changing nothing, if the op of one was defined for a schema its target
  // no longer has (for an op undefined since: the signature `recorded` for
  // it, when a snapshot recorded one).
  void activate(const Graph& chain, const NativeRecords* recorded, Released& released);
  // Retires the active op of `node_id`: undefined at once when nothing
  // outside holds it, else kept in the retired store.
  void retire(const std::string& node_id, Released& released);
  void retire_all(Released& released);
  NativeRecords records() const;

  void check() const;

 private:
  std::map<std::string, std::unique_ptr<NativeOp>> ops_;
};

}  // namespace native_registry::detail
