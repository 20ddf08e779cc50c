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
// Note [Retired _native ops]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Reclaimed, not kept (issue 23: a scope per test left one defined op per
// scope): a retired op is undefined as soon as nothing outside the registry
// can hold it, and otherwise kept (retired_native_ops.h) until nothing does.
// What can hold one is a handle to it: programs exported or compiled while
// the override was installed hold its torch.ops objects, and an undefined
// op would leave those handles dangling (a crash on the next call). Every
// torch.ops object of an op holds the op's torch::jit::Operator, which
// LibTorch makes for each op it defines, so held_outside() counts the
// holders of that operator beyond LibTorch's own; C++ code holds an op the
// same way through hold_native_op() (registry.h). TorchScript holds copies
// of the operator's Operation instead; the op's operator is LibTorch's with
// an Operation that also holds a token (NativeOpToken), so those count too.
// A bare OperatorHandle
// from Dispatcher::findSchema is valid only while the op is active.
//
// A call of the active impl holds a reference to the node for its whole
// length, so an impl that retires its own op (restore() from inside) finishes.
//
// A node given new callables (Registry::replace_node_callables) is a new
// node with the same node_id; rebind() points the active op's kernel at it
// with one atomic store, without touching the dispatcher, so it is as safe
// while other threads call the op as a router's publish. The binding holds
// the current node only: a call holds the node it loaded, and the node
// replaced goes back to the caller to free, so writes in a loop keep
// nothing.
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

// What the op's JIT Operation holds (native_op.cpp: every copy TorchScript
// keeps of it counts as a holder of the op).
struct NativeOpToken {
  std::atomic<bool> defined{true};
  std::string gone_message;
};

class NativeOp {
 public:
  // Defines the op and activates it for `node`.
  NativeOp(const NodePtr& node, const c10::OperatorHandle& target,
           c10::DispatchKey dispatch_key);
  // Undefines the op: its kernels and its definition leave the dispatcher.
  // Only for an op nothing outside holds (held_outside() false). The owner
  // first takes out what holds the node(s) with retire() or release(), and
  // frees it once it holds no lock.
  ~NativeOp();
  NativeOp(const NativeOp&) = delete;
  NativeOp& operator=(const NativeOp&) = delete;

  // "_native::<node_id>", the name the dispatcher knows it by.
  static c10::OperatorName name_for(const OverrideNode& node);
  // What of a schema a `_native` op copies, as text in the schema language's
  // notation: each argument's and result's type and name, which arguments are
  // keyword-only and which have defaults; not the name, nor the defaults' values.
  static std::string signature_of(const c10::FunctionSchema& schema);

  // Routes the op's calls to `node` again (a restore to a snapshot taken
  // while it was active), with kernels made anew. For an op that is retired
  // or whose target has left the dispatcher (an active op whose target is
  // still there is rebound instead). Throws OperatorChangedError, changing
  // nothing, if `target` (the op of that name now) has another schema than
  // the one this op was defined with.
  void activate(const NodePtr& node, const c10::OperatorHandle& target,
                c10::DispatchKey dispatch_key);
  // Points the active op at `node`, another node of the same node_id with
  // other callables (see above), and hands back the node it replaces, for
  // the caller to free once it holds no lock. The op must be active; its
  // one caller (NativeOpTable::activate) never passes the node it has.
  NodePtr rebind(const NodePtr& node);
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
  // For an op about to be destroyed: hands back what held the node(s), as
  // retire() does, without installing the raising kernel.
  std::shared_ptr<const void> release();
  // Whether anything outside the registry holds the op (see above): a
  // torch.ops object, a program holding one, a hold_native_op() handle.
  bool held_outside() const;

  // The node the active op's kernel runs. Shared with the kernel, which
  // loads it once per call and holds it for the call.
  struct Binding {
    std::atomic<NodePtr> current;
  };

  bool active() const { return node_ != nullptr; }
  const NodePtr& node() const { return node_; }  // null when retired
  const std::string& node_id() const { return node_id_; }
  const std::string& signature() const { return signature_; }

 private:
  std::string node_id_;
  std::string name_;         // "_native::<node_id>"
  std::string description_;  // which override, for the retired op's error
  std::string signature_;    // signature_of() the target's schema this op was defined with
  // Holders of the op's torch::jit::Operator that are LibTorch's own,
  // counted right after the definition; -1 if LibTorch made none.
  long jit_holders_baseline_ = -1;
  // Held by the op's JIT Operation and every copy of it; null if LibTorch
  // made no operator. Holders counted right after the definition.
  std::shared_ptr<NativeOpToken> token_;
  long token_holders_baseline_ = 0;
  NodePtr node_;  // the bound node, null when retired
  std::shared_ptr<Binding> binding_;  // while active
  std::shared_ptr<const OpWatch> target_watch_;  // of the target last activated for
  std::unique_ptr<torch::Library> definition_;
  std::unique_ptr<torch::Library> kernels_;  // while active
  std::unique_ptr<torch::Library> retired_;  // while retired
};

// Throws OperatorChangedError, naming `node` and the op, if `target`'s
// schema is not the one of `signature` (NativeOp::signature_of): for an op
// of `node` defined with that signature and since reclaimed.
void check_signature(const OverrideNode& node, const std::string& signature,
                     const c10::OperatorHandle& target);

}  // namespace native_registry::detail
