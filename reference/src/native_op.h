#pragma once

// The opaque op `_native::<node_id>` that carries one override, so that
// FakeTensor, export and compile can name it and shape-infer through it:
//  * its schema is the target op's, renamed;
//  * its kernel at the override's dispatch key is the node's impl;
//  * its Meta kernel calls the target op, so meta and fake inputs get the
//    target's shapes without running the impl or initialising any runtime.
// Destroying a NativeOp undefines the op (its own torch::Library handle).

#include <native_registry/types.h>

#include <torch/library.h>

#include <memory>

namespace native_registry::detail {

class NativeOp {
 public:
  NativeOp(const NodePtr& node, const c10::OperatorHandle& target,
           c10::DispatchKey dispatch_key);
  ~NativeOp();
  NativeOp(const NativeOp&) = delete;
  NativeOp& operator=(const NativeOp&) = delete;

  // "_native::<node_id>", the name the dispatcher knows it by.
  static c10::OperatorName name_for(const OverrideNode& node);

  const NodePtr& node() const { return node_; }

 private:
  NodePtr node_;
  std::unique_ptr<torch::Library> library_;
};

}  // namespace native_registry::detail
