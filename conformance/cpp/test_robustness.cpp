// Holds up where users actually go (issue 23): a target op redefined under a
// live `_native` op, or gone from the dispatcher; fork while another thread
// is in the control plane; an op defined after its override was registered.
// The crash- and hang-prone cases run in a child (a death test's, or a
// fork's) under alarm(), so a regression fails its test within a minute
// instead of the suite at meson's limit.

#include "suite.h"

#include <ATen/ATen.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <thread>


namespace conformance {
namespace {

using namespace native_registry::fixtures;

constexpr const char* kRedefNs = "_native_registry_redef_cpp";

// Boxed kernels, for foo defined again (and the ops beside it): while a
// router stands on the op's name, LibTorch keeps there the C++ signature of
// the kernels of foo(Tensor x), which are unboxed, and refuses an unboxed
// kernel of another signature.
template <int Arguments, bool Meta>
void foo_kernel(const c10::OperatorHandle&, c10::DispatchKeySet, Stack* stack) {
  at::Tensor x = (*stack)[stack->size() - Arguments].toTensor();
  at::Tensor result = Meta ? at::empty_like(x) : x + Arguments;
  torch::jit::drop(*stack, Arguments);
  stack->emplace_back(std::move(result));
}

// The schemas foo is defined with: the override's, and those it is defined
// again with (another argument list; the same argument made keyword-only;
// three arguments, the last two keyword-only). kScaled is another override's
// schema, kScaledDefault the same arguments with a default value for n.
enum class Foo { kOne, kThree, kKeywordOnly, kTwoKeywordOnly, kScaled, kScaledDefault };

std::unique_ptr<torch::Library> define_foo(Foo schema) {
  auto lib = std::make_unique<torch::Library>(torch::Library::DEF, kRedefNs, std::nullopt,
                                              __FILE__, __LINE__);
  if (schema == Foo::kScaled || schema == Foo::kScaledDefault) {
    lib->def(schema == Foo::kScaled ? "foo(Tensor x, int n) -> Tensor" : "foo(Tensor x, int n=1) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<2, false>>()));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<2, true>>()));
  } else if (schema == Foo::kThree || schema == Foo::kTwoKeywordOnly) {
    lib->def(schema == Foo::kThree ? "foo(Tensor x, Tensor y, Tensor z) -> Tensor"
                                   : "foo(Tensor x, *, Tensor y, Tensor z) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<3, false>>()));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<3, true>>()));
  } else if (schema == Foo::kOne) {
    // Unboxed C++ functions, as an extension's kernels mostly are: an
    // implementation with routers typed by C++ signature gives foo one.
    lib->def("foo(Tensor x) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU, [](const at::Tensor& x) { return x + 1; }));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta, [](const at::Tensor& x) { return at::empty_like(x); }));
  } else {
    lib->def("foo(*, Tensor x) -> Tensor");
    lib->impl("foo", torch::dispatch(c10::DispatchKey::CPU,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<1, false>>()));
    lib->impl("foo", torch::dispatch(c10::DispatchKey::Meta,
                                     torch::CppFunction::makeFromBoxedFunction<&foo_kernel<1, true>>()));
  }
  return lib;
}

// The op define_foo defines, as the dispatcher has it now (after a
// redefinition: the new one).
c10::OperatorHandle foo_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow((std::string(kRedefNs) + "::foo").c_str(), "");
}

// Whether one warning the registry logged from its `since`-th on contains
// every one of `parts`.
bool warned_naming(RegistryAdapter& registry, size_t since, const std::vector<std::string>& parts) {
  const std::vector<std::string> warnings = registry.warnings();
  for (size_t i = since; i < warnings.size(); ++i) {
    if (std::all_of(parts.begin(), parts.end(),
                    [&](const std::string& part) { return warnings[i].find(part) != std::string::npos; })) {
      return true;
    }
  }
  return false;
}

// "returned", or what the call raised as raised() tells it.
std::string outcome(const c10::OperatorHandle& op, const at::Tensor& x) {
  Stack stack{x};
  try {
    op.callBoxed(&stack);
    return "returned";
  } catch (const std::exception& e) {
    return raised(e);
  }
}

// The override every redefinition scenario routes through: a cond that
// always accepts, an impl that fills with 7 (as Conformance::add registers it).
void add_redef_override(RegistryAdapter& registry, const Key& key) {
  registry.allow_namespace(key.lib_symbol);
  registry.register_override({"redef_dsl", key.lib_symbol, key.op_symbol, key.dispatch_key,
                              constant_cond(true), fill_impl(7), {}, false});
}

// Runs in a death-test child: exits 0 if the `_native` op's eager and meta
// calls both raise naming the override, else 1 with what happened.
[[noreturn]] void call_native_after_redefinition(RegistryAdapter& registry, bool remove_first) {
  alarm(60);  // a hang fails the test within a minute
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = define_foo(Foo::kOne);
  add_redef_override(registry, key);
  registry.install(key);
  const NodeInfo node = registry.graph(key).at(0);
  std::optional<c10::OperatorHandle> native = registry.native_op(node);
  if (!native) std::_Exit(3);
  if (remove_first) registry.disable({{"redef_dsl"}, {}, {}});
  lib.reset();
  lib = define_foo(Foo::kThree);
  int bad = 0;
  for (const at::Tensor& x : {tensor({1, 1}), at::ones({2}, at::device(at::kMeta))}) {
    const std::string what = outcome(*native, x);
    // Its target removed, the call's error is a RuntimeError, as a retired op's.
    const std::string expected = remove_first ? "raised RuntimeError: " : "raised";
    if (what.rfind(expected, 0) != 0 || what.find(node.node_id) == std::string::npos ||
        what.find(std::string(kRedefNs) + "::foo") == std::string::npos) {
      std::fprintf(stderr, "the _native op's call on %s: %s\n", x.device().str().c_str(),
                   what.c_str());
      ++bad;
    }
    // foo has no overload name: written as its schema writes it, with no dot
    // after it (an overload name would follow one).
    for (size_t at = what.find("::foo."); at != std::string::npos; at = what.find("::foo.", at + 1)) {
      const size_t next = at + 6;
      if (next >= what.size() || !(std::isalpha(static_cast<unsigned char>(what[next])) || what[next] == '_')) {
        std::fprintf(stderr, "the op's name written with a dangling dot: %s\n", what.c_str());
        ++bad;
        break;
      }
    }
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Runs in a death-test child: `foo.a` and `foo.b`, two overloads of one op,
// each defined by a library of its own; an override of foo.a installed, then
// foo.b's library destroyed. Exits 0 if foo.a still routes (the impl's 7s
// while the cond accepts, its own kernel's x + 1 when it declines).
[[noreturn]] void remove_another_overload(RegistryAdapter& registry) {
  alarm(60);
  auto define = [](torch::Library::Kind kind, const char* schema, const char* name,
                   torch::CppFunction kernel) {
    auto lib = std::make_unique<torch::Library>(kind, kRedefNs, std::nullopt, __FILE__, __LINE__);
    lib->def(schema);
    lib->impl(name, torch::dispatch(c10::DispatchKey::CPU, std::move(kernel)));
    return lib;
  };
  auto lib_a = define(torch::Library::DEF, "foo.a(Tensor x) -> Tensor", "foo.a",
                      torch::CppFunction::makeFromBoxedFunction<&foo_kernel<1, false>>());
  auto lib_b = define(torch::Library::FRAGMENT, "foo.b(Tensor x, Tensor y, Tensor z) -> Tensor",
                      "foo.b", torch::CppFunction::makeFromBoxedFunction<&foo_kernel<3, false>>());
  const Key key{kRedefNs, "foo.a", "CPU"};
  auto accept = std::make_shared<std::atomic<bool>>(true);
  registry.allow_namespace(key.lib_symbol);
  registry.register_override({"overload_dsl", key.lib_symbol, key.op_symbol, key.dispatch_key,
                              [accept](const c10::OperatorHandle&, c10::DispatchKeySet,
                                       const Stack&) { return accept->load(); },
                              fill_impl(7), {}, false});
  registry.install(key);
  const c10::OperatorHandle a =
      c10::Dispatcher::singleton().findSchemaOrThrow((std::string(kRedefNs) + "::foo").c_str(), "a");
  lib_b.reset();
  int bad = 0;
  auto check = [&](const char* what, float expected) {
    Stack stack{tensor({1, 1})};
    try {
      a.callBoxed(&stack);
      if (!same(stack.at(0).toTensor(), tensor({expected, expected}))) {
        std::fprintf(stderr, "%s: foo.a returned another value than %g\n", what, expected);
        ++bad;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: foo.a raised: %s\n", what, e.what());
      ++bad;
    }
  };
  check("taken", 7);
  accept->store(false);
  check("declined", 2);
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Runs in a death-test child: scopes left out of order (the outer one first,
// which tears the override down), the target, defined with `base` at first,
// defined again with `schema` in between, then the inner one, whose snapshot
// had the `_native` op active. Exits 0 if that restore warned naming the
// override and both schemas, and left the op raising (or undefined, where
// nothing held it: `hold` false), and the new op computes its own result.
[[noreturn]] void restore_after_redefinition(RegistryAdapter& registry, Foo schema, bool hold,
                                             Foo base = Foo::kOne) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  const bool scaled = base == Foo::kScaled;
  // foo's arguments, before and after: x (and n); x, y and z for kThree.
  auto arguments_for = [&](Foo which) {
    if (which == Foo::kThree || which == Foo::kTwoKeywordOnly) return Stack(3, tensor({1, 1}));
    if (which == Foo::kScaled || which == Foo::kScaledDefault) return Stack{tensor({1, 1}), c10::IValue(int64_t{1})};
    return Stack{tensor({1, 1})};
  };
  auto lib = define_foo(base);
  std::unique_ptr<Scope> outer = registry.scope();
  add_redef_override(registry, key);
  registry.install(key);
  const NodeInfo node = registry.graph(key).at(0);
  if (hold && !registry.native_op(node)) std::_Exit(3);
  std::unique_ptr<Scope> inner = registry.scope();  // the op active in its snapshot
  outer.reset();
  lib.reset();
  lib = define_foo(schema);
  const size_t warned_before = registry.warnings().size();
  inner.reset();  // would re-activate the op on the new schema
  int bad = 0;
  // A default value is written as the schema language writes it, or elided:
  // only its `=` is checked.
  const std::string was = scaled ? "(Tensor x, int n) -> Tensor" : "(Tensor x) -> Tensor";
  const std::string now = schema == Foo::kThree          ? "(Tensor x, Tensor y, Tensor z) -> Tensor"
                          : schema == Foo::kTwoKeywordOnly ? "(Tensor x, *, Tensor y, Tensor z) -> Tensor"
                          : schema == Foo::kScaledDefault  ? "(Tensor x, int n="
                                                           : "(*, Tensor x) -> Tensor";
  if (!warned_naming(registry, warned_before, {node.node_id, was, now})) {
    std::fprintf(stderr, "the restore logged no warning naming %s and the schemas %s and %s (%zu warnings)\n",
                 node.node_id.c_str(), was.c_str(), now.c_str(), registry.warnings().size() - warned_before);
    ++bad;
  }
  if (std::optional<c10::OperatorHandle> native = registry.native_op(node)) {
    Stack call = arguments_for(base);
    std::string what;
    try {
      native->callBoxed(&call);
      what = "returned";
    } catch (const std::exception& e) {
      what = raised(e);
    }
    if (what.rfind("raised", 0) != 0 || what.find(node.node_id) == std::string::npos) {
      std::fprintf(stderr, "the _native op after the restore: %s\n", what.c_str());
      ++bad;
    }
  } else if (hold) {
    std::fputs("the _native op held past the restore is gone\n", stderr);
    ++bad;
  }
  Stack stack = arguments_for(schema);
  const float arguments = static_cast<float>(stack.size());
  foo_op().callBoxed(&stack);
  if (!same(stack.at(0).toTensor(), tensor({1.f + arguments, 1.f + arguments}))) {
    std::fputs("the redefined op did not compute its own result\n", stderr);
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Runs in a death-test child: foo defined again with another schema under an
// override whose `_native` op is active (`kept` false), or retired and kept
// by a holder (`kept` true); then a second override registered on the new
// op, put first in the graph, and the graph installed again. Exits 0 if the
// install raised and defined no `_native` op for the second override (all or
// nothing: the stale op is found before anything changes).
[[noreturn]] void install_before_a_stale_native_op(RegistryAdapter& registry, bool kept) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = define_foo(Foo::kOne);
  add_redef_override(registry, key);
  const NodeInfo stale = registry.graph(key).at(0);
  if (kept) {
    std::unique_ptr<Scope> scope = registry.scope();  // the node stays, its op is retired
    registry.install(key);
    if (!registry.native_op(stale)) std::_Exit(3);
  } else {
    registry.install(key);
  }
  lib.reset();
  lib = define_foo(Foo::kThree);
  registry.register_override({"second_dsl", key.lib_symbol, key.op_symbol, key.dispatch_key,
                              constant_cond(true), fill_impl(8), {}, false});
  const NodeInfo second = registry.graph(key).at(1);
  registry.set_graph(key, {second.node_id, stale.node_id});
  int bad = 0;
  try {
    registry.install(key);
    std::fputs("installing over the stale _native op raised nothing\n", stderr);
    ++bad;
  } catch (const std::exception&) {
  }
  if (registry.native_op(second)) {
    std::fputs("the failed install defined the second override's _native op\n", stderr);
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// The override installed on foo, then foo's library destroyed and the op
// defined again with the same schema: the new definition's library.
std::unique_ptr<torch::Library> install_then_redefine_foo(RegistryAdapter& registry,
                                                          const Key& key) {
  auto lib = define_foo(Foo::kOne);
  add_redef_override(registry, key);
  registry.install(key);
  lib.reset();
  return define_foo(Foo::kOne);
}

// A namespace that sorts before kRedefNs, so that an implementation going
// graph by graph in key order reaches its graph before foo's.
constexpr const char* kEarlyNs = "_native_registry_a_early";

// Runs in a death-test child: an override of foo disabled since its install
// (its `_native` op still defined for foo), foo defined again with another
// schema and its graph installed again for a second override (a router in
// place on the new foo); then a re-enable of the first override's dsl, which
// also names an override of a graph that sorts before foo's. Exits 0 if the
// re-enable raised and changed nothing (the stale op is found before anything
// is published): the earlier graph's override takes no call, and says so.
[[noreturn]] void reenable_beside_a_stale_native_op(RegistryAdapter& registry) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  ScopedTwiceNamespace early(kEarlyNs, 2.0);
  const Key early_key{kEarlyNs, "twice", "CPU"};
  registry.allow_namespace(kEarlyNs);
  registry.register_override({"redef_dsl", kEarlyNs, "twice", "CPU", constant_cond(true), fill_impl(9), {},
                              false});
  auto lib = define_foo(Foo::kOne);
  add_redef_override(registry, key);
  registry.install(early_key);
  registry.install(key);
  registry.disable({{"redef_dsl"}, {}, {}});
  lib.reset();
  lib = define_foo(Foo::kThree);
  registry.register_override({"second_dsl", key.lib_symbol, key.op_symbol, key.dispatch_key,
                              constant_cond(true), fill_impl(8), {}, false});
  registry.install(key);
  int bad = 0;
  try {
    registry.enable({{"redef_dsl"}, {}, {}});
    std::fputs("re-enabling the override whose _native op is stale raised nothing\n", stderr);
    ++bad;
  } catch (const std::exception&) {
  }
  if (!same(early.twice(tensor({1, 2})), tensor({2, 4}))) {
    std::fputs("the failed re-enable gave the earlier graph its route back\n", stderr);
    ++bad;
  }
  if (registry.graph(early_key).at(0).active) {
    std::fputs("the failed re-enable changed the filters\n", stderr);
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Runs in a death-test child: the target defined again with the same schema
// and the graph installed again. Exits 0 if a call of the new op routes to the
// override (7s) and its `_native` op runs the impl eagerly and infers the
// shape on meta tensors, else 1 with what happened.
// `all`: installed again by install_all, else by installing its graph.
[[noreturn]] void install_again_after_redefinition(RegistryAdapter& registry, bool all) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = install_then_redefine_foo(registry, key);
  if (all) {
    registry.install_all();
  } else {
    registry.install(key);
  }
  int bad = 0;
  auto foo = foo_op();
  Stack routed{tensor({1, 1})};
  foo.callBoxed(&routed);
  if (!same(routed.at(0).toTensor(), tensor({7, 7}))) {
    std::fputs("the new op's call did not reach the override\n", stderr);
    ++bad;
  }
  std::optional<c10::OperatorHandle> native = registry.native_op(registry.graph(key).at(0));
  if (!native) std::_Exit(3);
  try {
    Stack eager{tensor({1, 1})};
    native->callBoxed(&eager);
    if (!same(eager.at(0).toTensor(), tensor({7, 7}))) {
      std::fputs("the _native op's eager call did not run the impl\n", stderr);
      ++bad;
    }
    Stack meta{at::ones({3}, at::device(at::kMeta))};
    native->callBoxed(&meta);
    if (meta.at(0).toTensor().sizes() != at::IntArrayRef{3}) {
      std::fputs("the _native op's meta call gave another shape\n", stderr);
      ++bad;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "the _native op raised: %s\n", e.what());
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Whether foo, defined anew, computes its own result (x + 1): no router
// built on it routes the call; says what happened otherwise.
bool foo_computes_its_own_result(const char* when) {
  Stack stack{tensor({1, 1})};
  try {
    foo_op().callBoxed(&stack);
    if (same(stack.at(0).toTensor(), tensor({2, 2}))) return true;
    std::fprintf(stderr, "the new op %s did not compute its own result\n", when);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "the new op %s raised: %s\n", when, e.what());
  }
  return false;
}

// Runs in a death-test child: the target defined again with the same schema
// and not installed again, then a scope entered and left. Exits 0 if the new
// op computes its own result before and after the scope (no router was built
// on it from the old chain) and the scope logged no warning.
[[noreturn]] void scope_after_redefinition(RegistryAdapter& registry) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = install_then_redefine_foo(registry, key);
  int bad = 0;
  auto own_result = [&bad](const char* when) {
    if (!foo_computes_its_own_result((std::string(when) + " the scope").c_str())) ++bad;
  };
  own_result("before");
  const size_t warned_before = registry.warnings().size();
  {
    std::unique_ptr<Scope> scope = registry.scope();
  }
  own_result("after");
  // The scope changed nothing, so it has nothing to warn about: the router
  // it kept routes nothing, and the op is there.
  const std::vector<std::string> warnings = registry.warnings();
  for (size_t i = warned_before; i < warnings.size(); ++i) {
    std::fprintf(stderr, "the scope warned: %s\n", warnings[i].c_str());
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Runs in a death-test child: a scope entered with foo's router in place, foo's
// library destroyed, a second scope entered (its snapshot holds foo's router,
// its op gone); the first scope left (foo's router cannot be put back: its op
// is gone), foo defined again with the same schema, the second scope left.
// Exits 0 if the new foo computes its own result (no router was built on it
// from the old chain) and leaving each scope warned naming foo.
[[noreturn]] void scopes_around_a_gone_router(RegistryAdapter& registry) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = define_foo(Foo::kOne);
  add_redef_override(registry, key);
  registry.install(key);
  int bad = 0;
  const std::string foo_name = std::string(kRedefNs) + "::foo";
  auto leave_warning_of_foo = [&](std::unique_ptr<Scope>& scope, const char* which) {
    const size_t since = registry.warnings().size();
    scope.reset();
    if (warned_naming(registry, since, {foo_name})) return;
    std::fprintf(stderr, "leaving the %s scope did not warn about foo's router\n", which);
    ++bad;
  };
  std::unique_ptr<Scope> first = registry.scope();
  lib.reset();
  std::unique_ptr<Scope> second = registry.scope();
  leave_warning_of_foo(first, "first");
  lib = define_foo(Foo::kOne);
  leave_warning_of_foo(second, "second");
  if (!foo_computes_its_own_result("after both scopes (a router was built on it?)")) ++bad;
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// What a call of foo (defined with three arguments) returns, in words: its
// first element, or what it raised.
std::string foo_of_three_answers() {
  Stack stack(3, tensor({1, 1}));
  try {
    foo_op().callBoxed(&stack);
    return "returned " + std::to_string(stack.at(0).toTensor()[0].item<float>());
  } catch (const std::exception& e) {
    return raised(e);
  }
}

// Runs in a death-test child: foo, its kernels unboxed C++ functions, routed
// to the override; its library destroyed and foo defined again with three
// arguments while the router stands (its graph not installed again). Exits 0
// if the definition succeeded, the new op computes its own result (x + 3) and
// its shape on meta tensors, and, once the override is disabled and a second
// one installed on the new op, the second takes its call (8s), its cond
// seeing the call's three arguments; else 1 with what happened.
[[noreturn]] void redefine_an_unboxed_target_under_its_router(RegistryAdapter& registry) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  auto lib = define_foo(Foo::kOne);
  add_redef_override(registry, key);
  registry.install(key);
  Stack routed{tensor({1, 1})};
  foo_op().callBoxed(&routed);
  if (!same(routed.at(0).toTensor(), tensor({7, 7}))) std::_Exit(3);  // not routed: the scenario did not come about
  lib.reset();
  try {
    lib = define_foo(Foo::kThree);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "foo defined again under its router was refused: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
  int bad = 0;
  if (const std::string what = foo_of_three_answers(); what != "returned 4.000000") {
    std::fprintf(stderr, "the new foo did not compute its own result: %s\n", what.c_str());
    ++bad;
  }
  Stack meta(3, at::ones({2}, at::device(at::kMeta)));
  try {
    foo_op().callBoxed(&meta);
    if (meta.size() != 1 || meta.at(0).toTensor().sizes() != at::IntArrayRef{2}) {
      std::fputs("the new foo's meta call gave another shape\n", stderr);
      ++bad;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "the new foo's meta call raised: %s\n", e.what());
    ++bad;
  }
  // The op's name may keep the first definition's C++ signature (LibTorch
  // keeps one while any registration stands there): a router built on the
  // new op must take the new op's arguments all the same.
  const std::vector<at::Tensor> call{tensor({1, 1}), tensor({2, 2}), tensor({3, 3})};
  auto saw_all = std::make_shared<bool>(false);
  registry.disable({{"redef_dsl"}, {}, {}});
  registry.register_override(
      {"second_dsl", key.lib_symbol, key.op_symbol, key.dispatch_key,
       [call, saw_all](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack& stack) {
         *saw_all = stack.size() >= 3 && same(torch::jit::peek(stack, 0, 3).toTensor(), call[0]) &&
                    same(torch::jit::peek(stack, 1, 3).toTensor(), call[1]) &&
                    same(torch::jit::peek(stack, 2, 3).toTensor(), call[2]);
         return *saw_all;
       },
       fill_impl(8), {}, false});
  registry.install(key);
  Stack routed_anew(call.begin(), call.end());
  foo_op().callBoxed(&routed_anew);
  if (!*saw_all) {
    std::fputs("the second override's cond did not see the new foo's three arguments\n", stderr);
    ++bad;
  } else if (!same(routed_anew.at(0).toTensor(), tensor({8, 8}))) {
    std::fputs("the second override did not take the new foo's call\n", stderr);
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// Runs in a death-test child: an unconditional override of foo, disabled and
// masked, while foo's library is destroyed and the op defined again with
// three arguments; a second override installed on the new op (the router
// routes it alone: the first is masked) and a scope entered; the mask left
// (it cannot let the first override in: its `_native` op was made for the
// old schema), then the scope. That restore cannot route the graph as the
// mask of now says (the unconditional override first) either. Exits 0 if it
// left no router on foo, so the new op computes its own result (x + 3) and
// not the second override's (8s), and warned naming foo.
[[noreturn]] void restore_that_cannot_unmask_a_stale_override(RegistryAdapter& registry) {
  alarm(60);
  const Key key{kRedefNs, "foo", "CPU"};
  registry.allow_namespace(kRedefNs);
  auto lib = define_foo(Foo::kOne);
  registry.register_override({"masked_dsl", kRedefNs, "foo", "CPU", CondFn{}, fill_impl(6), {}, true});
  registry.install(key);  // its `_native` op: made for foo(Tensor x)
  registry.disable({{"masked_dsl"}, {}, {}});
  std::unique_ptr<Scope> mask = registry.unconditional_masked();
  lib.reset();
  lib = define_foo(Foo::kThree);
  registry.register_override({"second_dsl", kRedefNs, "foo", "CPU", constant_cond(true), fill_impl(8), {},
                              false});
  registry.install(key);
  int bad = 0;
  if (const std::string what = foo_of_three_answers(); what != "returned 8.000000") {
    std::fprintf(stderr, "under the mask, the second override did not take foo's call: %s\n", what.c_str());
    std::_Exit(3);  // the scenario did not come about
  }
  std::unique_ptr<Scope> scope = registry.scope();  // its snapshot: the mask up, the second override routed
  mask.reset();
  const size_t warned_before = registry.warnings().size();
  scope.reset();
  if (registry.router_installed(key)) {
    std::fputs("the restore left a router on foo that it could not route as the mask of now says\n", stderr);
    ++bad;
  }
  if (const std::string what = foo_of_three_answers(); what != "returned 4.000000") {
    std::fprintf(stderr, "after the restore, foo did not compute its own result: %s\n", what.c_str());
    ++bad;
  }
  if (!warned_naming(registry, warned_before, {std::string(kRedefNs) + "::foo"})) {
    std::fprintf(stderr, "the restore logged no warning naming foo (%zu warnings)\n",
                 registry.warnings().size() - warned_before);
    ++bad;
  }
  std::fflush(stderr);
  std::_Exit(bad == 0 ? 0 : 1);
}

// The background work of the fork test: each kind of control-plane change in
// turn, until stopped.
void control_plane_load(RegistryAdapter& registry, const std::function<void()>& add_background,
                        const Key& key, const std::atomic<bool>& stop) {
  for (int round = 0; !stop.load(); ++round) {
    switch (round % 5) {
      case 0: {
        std::unique_ptr<Scope> scope = registry.scope();
        for (int i = 0; i < 5; ++i) add_background();
        break;
      }
      case 1:
        registry.install(key);
        break;
      case 2:
        registry.disable({{"bg_dsl"}, {}, {}});
        registry.enable({{"bg_dsl"}, {}, {}});
        break;
      case 3:
        registry.reorder([](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
          std::vector<std::string> ids;
          for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
          return ids;
        });
        break;
      default: {
        std::unique_ptr<Scope> scope = registry.scope();
        add_background();
        registry.install(key);
      }
    }
  }
}

// A forked child's work: a scope with a registration and an install, and a
// routed call. Exit code 0 if the call took the child's override.
[[noreturn]] void use_registry_in_child(RegistryAdapter& registry,
                                        const std::function<void()>& add_child, const Key& key) {
  alarm(10);  // a child that hangs dies, and counts
  int code = 1;
  try {
    std::unique_ptr<Scope> scope = registry.scope();
    add_child();
    registry.install(key);
    code = same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({9, 9})) ? 0 : 3;
  } catch (...) {
    code = 2;
  }
  std::_Exit(code);
}

// Waits for `pid` up to `limit`, then kills it. Whether it exited 0 in time.
bool finished_cleanly(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (done < 0) return false;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

constexpr const char* kLateNs = "_native_registry_late_cpp";

// An op defined only now, whose one kernel is CompositeImplicitAutograd.
std::unique_ptr<torch::Library> define_late_composite() {
  auto lib = std::make_unique<torch::Library>(torch::Library::DEF, kLateNs, std::nullopt,
                                              __FILE__, __LINE__);
  lib->def("late(Tensor x) -> Tensor");
  lib->impl("late", torch::dispatch(c10::DispatchKey::CompositeImplicitAutograd,
                                    [](const at::Tensor& x) { return x * 2; }));
  return lib;
}

TEST_P(Conformance, ANativeOpWhoseTargetWasRedefinedRaisesNamingTheOverride) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_native_after_redefinition(adapter(), false),
              ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, ANativeOpWhoseTargetLeftTheDispatcherRaises) {
  BEHAVIOUR("robustness.native-op-target-removed");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_native_after_redefinition(adapter(), true),
              ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, ARestoreAfterTheTargetWasRedefinedWarnsAndLeavesTheOpRaising) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(restore_after_redefinition(adapter(), Foo::kThree, true), ::testing::ExitedWithCode(0), "");
}

// Nothing held the op, so its teardown undefined it: the restore has only the
// schema its snapshot recorded to refuse the new op by.
TEST_P(Conformance, ARestoreAfterTheTargetWasRedefinedDoesNotDefineAnOpNothingHeldOnTheNewOne) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(restore_after_redefinition(adapter(), Foo::kThree, false), ::testing::ExitedWithCode(0), "");
}

// The same argument, keyword-only now: another schema too. The warning
// writes a schema as the schema language does: one `*` before the first
// keyword-only argument, however many follow.
TEST_P(Conformance, ARestoreAfterTheTargetsArgumentBecameKeywordOnlyWarns) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(restore_after_redefinition(adapter(), Foo::kKeywordOnly, true), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(restore_after_redefinition(adapter(), Foo::kTwoKeywordOnly, true), ::testing::ExitedWithCode(0), "");
}

// The same arguments, one given a default value now: another schema too (a
// call may leave that argument out of the new op, not of the `_native` one).
TEST_P(Conformance, ARestoreAfterTheTargetsArgumentGotADefaultWarns) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(restore_after_redefinition(adapter(), Foo::kScaledDefault, true, Foo::kScaled),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(restore_after_redefinition(adapter(), Foo::kScaledDefault, false, Foo::kScaled),
              ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, AnInstallThatMeetsAStaleNativeOpDefinesNoneOfItsChain) {
  BEHAVIOUR("robustness.native-op-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(install_before_a_stale_native_op(adapter(), false), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(install_before_a_stale_native_op(adapter(), true), ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, AReenableThatMeetsAStaleNativeOpChangesNothing) {
  BEHAVIOUR("validation.change-refused-by-a-stale-native-op-changes-nothing");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(reenable_beside_a_stale_native_op(adapter()), ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, AGraphInstalledAgainAfterItsTargetWasRedefinedRoutesTheNewOp) {
  BEHAVIOUR("robustness.reinstall-after-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(install_again_after_redefinition(adapter(), false),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(install_again_after_redefinition(adapter(), true),
              ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, AScopeLeftWhileTheRoutedOpIsGoneBuildsNoRouterOnItsSuccessor) {
  BEHAVIOUR("robustness.scope-after-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(scope_after_redefinition(adapter()), ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, ScopesLeftAroundARouterWhoseOpWentBuildNoneOnItsSuccessorAndWarn) {
  BEHAVIOUR("robustness.scope-after-target-redefined");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(scopes_around_a_gone_router(adapter()), ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, ARestoreThatCannotUnmaskAStaleOverrideLeavesNoRouter) {
  BEHAVIOUR("robustness.restore-removes-a-router-it-cannot-route");
  REQUIRE_FEATURE("native-op-meta");
  REQUIRE_FEATURE("namespaces");
  REQUIRE_FEATURE("unconditional-hatch");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(restore_that_cannot_unmask_a_stale_override(adapter()), ::testing::ExitedWithCode(0), "");
}

// An extension loaded again, or a test fixture defining its op per test.
TEST_P(Conformance, ATargetWithUnboxedKernelsCanBeDefinedAgainWithAnotherSchemaUnderItsRouter) {
  BEHAVIOUR("robustness.unboxed-target-redefined-under-its-router");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(redefine_an_unboxed_target_under_its_router(adapter()), ::testing::ExitedWithCode(0), "");
}

TEST_P(Conformance, AnotherOverloadLeavingTheDispatcherLeavesThisOneRouted) {
  BEHAVIOUR("robustness.other-overload-removed");
  REQUIRE_FEATURE("namespaces");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(remove_another_overload(adapter()), ::testing::ExitedWithCode(0), "");
}

// Forty children forked while another thread registers, installs, toggles,
// reorders and restores: each completes a scope, a registration, an install
// and a routed call within 20 s (a lock held across the fork hung them).
TEST_P(Conformance, AChildForkedDuringControlPlaneWorkCanUseTheRegistry) {
  BEHAVIOUR("robustness.fork-during-control-plane");
  if (!adapter().supports("concurrent-control-plane")) {
    GTEST_SKIP() << "unsupported: " << adapter().name() << " lacks feature concurrent-control-plane";
  }
  const Key key = mul_key();
  add(key, constant_cond(false), fill_impl(1), "bg_dsl");
  adapter().install(key);
  std::atomic<bool> stop{false};
  std::thread busy(control_plane_load, std::ref(adapter()),
                   [&] { add(key, constant_cond(false), fill_impl(1), "bg_dsl"); }, key,
                   std::cref(stop));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  constexpr int kForks = 40;
  int forked = 0;
  bool failed = false;
  // The first child that hangs or fails ends the test: a lock held across
  // fork hangs most of them, and forty 10-second waits would outlast meson.
  while (forked < kForks && !failed) {
    const pid_t pid = fork();
    if (pid == 0) {
      use_registry_in_child(adapter(), [&] { add(key, constant_cond(true), fill_impl(9), "child_dsl"); },
                            key);
    }
    ++forked;
    failed = pid < 0 || !finished_cleanly(pid, std::chrono::seconds(15));
  }
  stop = true;
  busy.join();
  EXPECT_FALSE(failed) << "child " << forked << " of " << kForks
                       << ", forked during control-plane work, hung or failed";
}

// An override registered at CPU for an op not yet defined; the op is then
// defined with only a CompositeImplicitAutograd kernel (a library loaded
// late). Installing it is refused as registering it would have been: a
// router at CPU would take the op out of autograd.
TEST_P(Conformance, AnOpDefinedCompositeAfterRegistrationIsRefusedAtInstall) {
  BEHAVIOUR("validation.composite-implicit-refused-at-install");
  REQUIRE_FEATURE("namespaces");
  const Key key{kLateNs, "late", "CPU"};
  add(key, constant_cond(false), forbidden_impl(), "late_dsl");
  auto lib = define_late_composite();
  for (const bool all : {false, true}) {
    try {
      if (all) {
        adapter().install_all();
      } else {
        adapter().install(key);
      }
      ADD_FAILURE() << "a router at CPU for the CompositeImplicitAutograd op " << kLateNs
                    << "::late was installed (" << (all ? "install_all" : "install") << ")";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string(kLateNs) + "::late"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("CompositeImplicitAutograd"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("AutogradCPU"));
    }
    EXPECT_FALSE(adapter().router_installed(key));
  }
  const at::Tensor x = at::ones({2}).requires_grad_(true);
  auto late = c10::Dispatcher::singleton().findSchemaOrThrow((std::string(kLateNs) + "::late").c_str(), "");
  late.typed<at::Tensor(const at::Tensor&)>().call(x).sum().backward();
  EXPECT_TRUE(same(x.grad(), tensor({2, 2})));
}

}  // namespace
}  // namespace conformance
