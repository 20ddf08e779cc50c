#pragma once

// The opaque op `_native::<node_id>` that carries one override, so that
// FakeTensor, export and compile can name it and shape-infer through it:
//  * its schema is the target op's, renamed;
//  * while active, its kernel at the override's dispatch key is the node's
//    impl, and its Meta kernel calls the target op, so meta and fake inputs
//    get the target's shapes without running the impl or initialising any
//    runtime;
//  * once retired (its node torn down by restore, or its registry
//    destroyed), every call raises an error naming the override that is
//    gone.
//
// The definition is kept for the life of the process, as upstream keeps its
// `_native` ops: programs exported or compiled while the override was
// installed hold handles to the op, and an undefined op would leave those
// handles dangling (a crash on the next call). Only the `_native` namespace
// keeps anything; every other op's dispatch table is restored exactly.
//
// A call of the active impl holds a reference to the node for its whole
// length, so an impl that retires its own op (restore() from inside) finishes.
//
// A node given new callables (Registry::replace_node_callables) is a new
// node with the same node_id; rebind() points the active op's kernel at it
// with one atomic store, without touching the dispatcher, so it is as safe
// while other threads call the op as a router's publish.
//
// The target op may leave the dispatcher while this op lives (its library
// destroyed, the op perhaps defined again with another schema). The kernels
// watch it (op_watch.h): once it is gone, every call raises an error naming
// the override and the op, and never touches the stale handle. activate()
// refuses a target whose schema is not this op's (OperatorChangedError),
// changing nothing.
//
// Owns: NativeOp's interface (native_op.cpp defines it). May not touch:
// registry state or any op outside `_native`.

#include "op_watch.h"

#include <native_registry/types.h>

#include <torch/library.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace native_registry::detail {

class NativeOp {
 public:
  // Defines the op and activates it for `node`.
  NativeOp(const NodePtr& node, const c10::OperatorHandle& target,
           c10::DispatchKey dispatch_key);
  // Keeps the definition (see above). The owner retires the op first, and
  // frees the node retire() hands back once it holds no lock; an op destroyed
  // active would be left defined with no kernel at all.
  ~NativeOp();
  NativeOp(const NativeOp&) = delete;
  NativeOp& operator=(const NativeOp&) = delete;

  // "_native::<node_id>", the name the dispatcher knows it by.
  static c10::OperatorName name_for(const OverrideNode& node);

  // Routes the op's calls to `node` again (a restore to a snapshot taken
  // while it was active). No-op when active on a target still in the
  // dispatcher. Throws OperatorChangedError, changing nothing, if `target`
  // (the op of that name now) has another schema than the one this op was
  // defined with.
  void activate(const NodePtr& node, const c10::OperatorHandle& target,
                c10::DispatchKey dispatch_key);
  // Points the active op at `node`, a node of the same node_id with other
  // callables (see above). The op must be active.
  void rebind(const NodePtr& node);
  // Throws what activate() would for `target`.
  void check_target(const c10::OperatorHandle& target) const;
  // Whether the target op this op was last activated for has left the
  // dispatcher since.
  bool target_gone() const {
    return target_watch_ && target_watch_->gone.load(std::memory_order_acquire);
  }
  // Swaps the kernels for the one that raises, and hands back what held the
  // node(s), which the caller frees once it holds no lock (a node may own
  // host objects whose release enters the host runtime). No-op (null) when
  // retired.
  std::shared_ptr<const void> retire();

  // The node the active op's kernel runs, and every node it ran since it
  // was activated: a call may still be inside one it loaded before a
  // rebind, so all stay alive until the op is retired. Shared with the
  // kernel, which holds it for each call.
  struct Binding {
    std::atomic<const OverrideNode*> current{nullptr};
    std::vector<NodePtr> kept;  // changed under the registry's lock only
  };

  bool active() const { return node_ != nullptr; }
  const NodePtr& node() const { return node_; }  // null when retired

 private:
  std::string name_;         // "_native::<node_id>"
  std::string description_;  // which override, for the retired op's error
  std::string schema_;       // the target's schema this op was defined with, as text
  NodePtr node_;  // the bound node, null when retired
  std::shared_ptr<Binding> binding_;  // while active
  std::shared_ptr<const OpWatch> target_watch_;  // of the target last activated for
  std::unique_ptr<torch::Library> definition_;
  std::unique_ptr<torch::Library> kernels_;  // while active
  std::unique_ptr<torch::Library> retired_;  // while retired
};

}  // namespace native_registry::detail
