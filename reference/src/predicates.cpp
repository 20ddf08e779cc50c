// The composable C++ conds of native_registry/predicates.h: the expression
// tree a Predicate holds, its evaluation on a boxed call (short-circuiting,
// allocating nothing), its description, and the factories.
//
// Owns: what each predicate decides and how it describes itself. May not
// touch: registry state or the call path (a predicate is a cond like any
// other; the Python factories are the binding's, predicates_py.cpp).

#include <native_registry/predicates.h>

#include "names.h"
#include "tensor_walk.h"

#include <bitset>

namespace native_registry::predicates {

// Leaves test tensors; inner nodes combine children. Evaluation short-circuits
// and allocates nothing.
struct Predicate::Node {
  enum class Kind { kConstant, kTensors, kDtypeIn, kAnd, kOr, kNot, kNotCow, kSameShape } kind;
  bool constant = false;
  TensorCheck check;
  // kDtypeIn: the accepted dtypes, tested inline (the commonest cond, where
  // a std::function and a search would cost more than the test); its
  // `check` has a description and no test.
  std::bitset<static_cast<size_t>(c10::ScalarType::NumOptions)> dtypes;
  std::optional<size_t> arg_index;
  std::shared_ptr<const Node> left, right;
  std::string description;
};

namespace {

using Node = Predicate::Node;
// The arguments a predicate reads, `arg` indices counting from the first.
using Arguments = c10::ArrayRef<c10::IValue>;

using native_registry::detail::for_each_tensor;
using native_registry::detail::is_cow;

bool evaluate(const Node& node, Arguments stack) {
  switch (node.kind) {
    case Node::Kind::kConstant:
      return node.constant;
    case Node::Kind::kTensors: {
      bool all = true;
      const bool any = for_each_tensor(stack, node.arg_index, [&](const at::Tensor& t) {
        all = node.check.test(t);
        return all;
      }).any;
      return any && all;
    }
    case Node::Kind::kDtypeIn: {
      bool all = true;
      const bool any = for_each_tensor(stack, node.arg_index, [&](const at::Tensor& t) {
        const auto dtype = static_cast<size_t>(t.scalar_type());
        all = dtype < node.dtypes.size() && node.dtypes[dtype];
        return all;
      }).any;
      return any && all;
    }
    case Node::Kind::kAnd:
      return evaluate(*node.left, stack) && evaluate(*node.right, stack);
    case Node::Kind::kOr:
      return evaluate(*node.left, stack) || evaluate(*node.right, stack);
    case Node::Kind::kNot:
      return !evaluate(*node.left, stack);
    case Node::Kind::kNotCow: {
      bool none = true;
      for_each_tensor(stack, std::nullopt, [&](const at::Tensor& t) {
        none = !is_cow(t);
        return none;
      });
      return none;
    }
    case Node::Kind::kSameShape: {
      std::optional<c10::IntArrayRef> first;
      bool same = true;
      for_each_tensor(stack, std::nullopt, [&](const at::Tensor& t) {
        if (!first) first = t.sizes();
        same = t.sizes() == *first;
        return same;
      });
      return same;
    }
  }
  return false;
}

std::string where(std::optional<size_t> arg) {
  return arg ? "args[" + std::to_string(*arg) + "]" : "all tensors";
}

}  // namespace

namespace detail {
void fail_short_stack(const c10::OperatorHandle& op, size_t values, size_t arguments) {
  TORCH_CHECK(false, "the stack holds ", values, " values, fewer than the ", arguments,
              " arguments of ", op.operator_name());
}
}  // namespace detail

Predicate Predicate::on_tensors(TensorCheck check, std::optional<size_t> arg_index) {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::kTensors;
  node->description = check.description + " (" + where(arg_index) + ")";
  node->check = std::move(check);
  node->arg_index = arg_index;
  return Predicate(std::move(node));
}

Predicate Predicate::constant(bool answer) {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::kConstant;
  node->constant = answer;
  node->description = answer ? "always" : "never";
  return Predicate(std::move(node));
}

bool Predicate::operator()(const Stack& stack) const { return evaluate(*node_, stack); }

bool Predicate::operator()(const c10::OperatorHandle& op, c10::DispatchKeySet,
                           const Stack& stack) const {
  return evaluate(*node_, op_arguments(op, stack));
}

CondFn Predicate::as_cond() const { return *this; }

const std::string& Predicate::description() const { return node_->description; }

Predicate Predicate::operator&&(const Predicate& other) const {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::kAnd;
  node->left = node_;
  node->right = other.node_;
  node->description = "(" + description() + " & " + other.description() + ")";
  return Predicate(std::move(node));
}

Predicate Predicate::operator||(const Predicate& other) const {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::kOr;
  node->left = node_;
  node->right = other.node_;
  node->description = "(" + description() + " | " + other.description() + ")";
  return Predicate(std::move(node));
}

Predicate Predicate::operator!() const {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::kNot;
  node->left = node_;
  node->description = "~" + description();
  return Predicate(std::move(node));
}

Predicate always() { return Predicate::constant(true); }
Predicate never() { return Predicate::constant(false); }

Predicate dtype_in(std::vector<c10::ScalarType> dtypes, std::optional<size_t> arg) {
  const std::string names = native_registry::detail::comma_separated(
      dtypes, [](c10::ScalarType dtype) { return std::string(c10::toString(dtype)); });
  // A kTensors node for the description, made a kDtypeIn one; no test.
  Predicate predicate = Predicate::on_tensors({nullptr, "dtype in {" + names + "}"}, arg);
  auto node = std::make_shared<Node>(*predicate.node_);
  node->kind = Node::Kind::kDtypeIn;
  for (auto dtype : dtypes) {
    const auto index = static_cast<size_t>(dtype);
    if (index < node->dtypes.size()) node->dtypes.set(index);
  }
  return Predicate(std::move(node));
}

Predicate device_type_is(c10::DeviceType type, std::optional<size_t> arg) {
  return Predicate::on_tensors(
      {[type](const at::Tensor& t) { return t.device().type() == type; },
       "device type " + c10::DeviceTypeName(type, /*lower_case=*/true)},
      arg);
}

Predicate contiguous(std::optional<size_t> arg) {
  return Predicate::on_tensors({[](const at::Tensor& t) { return t.is_contiguous(); }, "contiguous"},
                               arg);
}

Predicate min_rank(int64_t rank, std::optional<size_t> arg) {
  return Predicate::on_tensors(
      {[rank](const at::Tensor& t) { return t.dim() >= rank; }, "rank >= " + std::to_string(rank)},
      arg);
}

Predicate max_rank(int64_t rank, std::optional<size_t> arg) {
  return Predicate::on_tensors(
      {[rank](const at::Tensor& t) { return t.dim() <= rank; }, "rank <= " + std::to_string(rank)},
      arg);
}

Predicate min_numel(int64_t numel, std::optional<size_t> arg) {
  return Predicate::on_tensors({[numel](const at::Tensor& t) { return t.sym_numel() >= numel; },
                                "numel >= " + std::to_string(numel)},
                               arg);
}

Predicate max_numel(int64_t numel, std::optional<size_t> arg) {
  return Predicate::on_tensors({[numel](const at::Tensor& t) { return t.sym_numel() <= numel; },
                                "numel <= " + std::to_string(numel)},
                               arg);
}

Predicate max_size(int64_t dim, int64_t size, std::optional<size_t> arg) {
  return Predicate::on_tensors(
      {[dim, size](const at::Tensor& t) {
         const int64_t d = dim < 0 ? dim + t.dim() : dim;
         return d >= 0 && d < t.dim() && t.sym_size(d) <= size;
       },
       "size(" + std::to_string(dim) + ") <= " + std::to_string(size)},
      arg);
}

Predicate not_cow() {
  auto node = std::make_shared<Predicate::Node>();
  node->kind = Predicate::Node::Kind::kNotCow;
  node->description = "not copy-on-write";
  return Predicate(std::move(node));
}

Predicate same_shape() {
  auto node = std::make_shared<Predicate::Node>();
  node->kind = Predicate::Node::Kind::kSameShape;
  node->description = "same shape";
  return Predicate(std::move(node));
}

}  // namespace native_registry::predicates
