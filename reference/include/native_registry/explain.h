#pragma once

// What Registry::explain gives: for the graph a call would reach, each node
// in routing order with what decided it, and which kernel would run. A plain
// value: it holds names and texts, no node, no callable, no router.
//
// Owns: these types and their table form (to_string, in src/explain.cpp).
// May not touch: the registry; an Explanation is computed once and never
// follows later changes.

#include <native_registry/types.h>

#include <string>
#include <vector>

namespace native_registry {

// What decided one node for the call explained.
enum class ExplainVerdict {
  kDisabled,       // a filter entry names it (detail: which ones)
  kMasked,         // unconditional, named by a filter entry, an UnconditionalMask up
  kNotPublished,   // enabled, but not in the chain the router routes through now
                   // (registered, reordered or given callables since the last install)
  kAccepted,       // its cond said true: it takes the call
  kDeclined,       // its cond said false
  kRaised,         // its cond raised (detail: the message): the call raises it
  kRuntimeCheck,   // its cond said true; the runtime check would be asked
                   // first (not asked here): ready, it takes the call, else
                   // the nodes after it decide
  kNotReached,     // an earlier node took the call, the coverage check
                   // covered it, or a cond raised
  kNativeOp,       // the `_native` op explained is this node's
};

// Which kernel the call would run.
enum class ExplainKernel {
  kNodeImpl,     // the impl of `node_id` (also: a `_native` op's own node)
  kFallback,     // the op's own kernel, captured when the router went in
  kFallthrough,  // the key was a fallthrough before the router: the next key's kernel
  kNoKernel,     // no kernel at the key before the router: NotImplementedError
  kNoRouter,     // no router at the key: the op's own kernel, the graph's nodes unused
  kRaises,       // a cond raises, or the router's op left the dispatcher: no kernel runs
};

// "disabled", "masked", ... and "impl", "fallback", ...: the names the
// Python binding and the table use.
const char* to_string(ExplainVerdict verdict);
const char* to_string(ExplainKernel kernel);

struct ExplainedNode {
  std::string node_id;
  std::string dsl_name;
  ExplainVerdict verdict = ExplainVerdict::kNotReached;
  std::string detail;  // the filter entries, the exception's message, ...
};

struct Explanation {
  GraphKey graph;            // the graph the call reaches
  std::string op_name;       // "aten::mul.Tensor" (for a `_native` op: that op's name)
  std::string why_key;       // how the dispatch key was chosen
  std::string router;        // "active", "dormant" or "absent", and why absent
  std::string coverage;      // what the coverage check answered, or why it was not asked
  std::vector<ExplainedNode> nodes;  // in routing order
  ExplainKernel kernel = ExplainKernel::kNoRouter;
  std::string kernel_node_id;   // for kNodeImpl
  std::string kernel_dsl_name;  // for kNodeImpl
  std::string kernel_detail;    // in words, with what happens if a runtime check fails

  // A readable table: the op and key, then one row per node, then the kernel.
  std::string to_string() const;
};

}  // namespace native_registry
