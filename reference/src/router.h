#pragma once

// One router: the kernel installed at (op, dispatch key) that walks a chain
// of override nodes and falls back to the kernel it replaced.
//
// Invariants:
//  * The fallback is captured before the router's own kernel is registered,
//    so it is the kernel that was live at the key, never this router.
//  * The published chain is immutable and read with one acquire load per
//    call; publish() swaps it with one release store. Every chain ever
//    published stays alive (interned by content) until the router is
//    destroyed, so a call that loaded a chain can finish with it.
//  * Destroying the router removes exactly its kernel from the dispatcher
//    (its own torch::Library handle) and nothing else.
//  * publish() and destruction are called under the registry's lock; the
//    call path takes no lock and allocates nothing of its own.

#include <native_registry/types.h>

#include <torch/library.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace native_registry::detail {

struct Chain {
  Graph nodes;
  bool divert_when_tracing = false;  // any node opted into the trace shortcut
};

class Router {
 public:
  // Captures the kernel live at `dispatch_key` of `op`, then installs the
  // router there, routing through `chain`.
  Router(const c10::OperatorHandle& op, c10::DispatchKey dispatch_key,
         const Graph& chain);
  ~Router();  // removes the router's kernel from the dispatcher
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  void publish(const Graph& chain);
  Graph published() const;
  // Unique for the life of the process: tells a router from one that
  // replaced it at the same key, even at the same address.
  uint64_t id() const { return id_; }

  struct Shared;  // what the router's kernel functor shares with it

 private:
  std::shared_ptr<Shared> shared_;
  std::map<std::vector<const OverrideNode*>, std::unique_ptr<const Chain>> interned_;
  std::unique_ptr<torch::Library> library_;
  uint64_t id_;
};

}  // namespace native_registry::detail
