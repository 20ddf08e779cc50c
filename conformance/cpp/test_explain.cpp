// registry.explain through the adapter (feature explain): for the graph a
// call would reach, each node with what decided it and the kernel that would
// run, without running an impl or a runtime check, and changing nothing.
// Beyond upstream: `recommended`, feature `explain`.

#include "suite.h"

#include <algorithm>
#include <atomic>
#include <sstream>
#include <stdexcept>

namespace conformance {
namespace {

using namespace native_registry::fixtures;
using ::testing::HasSubstr;
using ::testing::Not;

const c10::OperatorHandle& explain_mul_op() {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  return op;
}

Stack explain_args() { return {tensor({2}), tensor({4})}; }

std::vector<std::string> explained_verdicts(const ExplainInfo& e) {
  std::vector<std::string> out;
  for (const auto& node : e.nodes) out.push_back(node.verdict);
  return out;
}

callables::Impl explain_counting_impl(std::shared_ptr<std::atomic<int>> runs) {
  return impl_doing([runs] { ++*runs; }, 7);
}

CondFn explain_throwing_cond(const std::string& message) {
  return [message](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
    throw std::runtime_error(message);
  };
}

TEST_P(Conformance, ExplainGivesEachNodesVerdictAndTheKernelAndRunsNoImpl) {
  BEHAVIOUR("explain.node-verdicts-and-kernel", "explain.changes-nothing");
  REQUIRE_FEATURE("explain");
  auto conds = std::make_shared<std::atomic<int>>(0);
  auto runs = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), counting_cond(conds, false), explain_counting_impl(runs), "first");
  add(mul_key(), counting_cond(conds, true), explain_counting_impl(runs), "second");
  auto third = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), counting_cond(third, true), explain_counting_impl(runs), "third");
  adapter().install(mul_key());
  const auto graph = adapter().graph(mul_key());
  const auto before = fingerprint();
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(e.dispatch_key, "CPU");
  ASSERT_EQ(e.nodes.size(), 3u) << e.table;
  EXPECT_EQ(e.nodes[0].node_id, graph[0].node_id);
  EXPECT_EQ(e.nodes[1].dsl_name, "second");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "accepted", "not reached"})) << e.table;
  EXPECT_EQ(e.kernel, "impl");
  EXPECT_EQ(e.kernel_node_id, graph[1].node_id);
  EXPECT_EQ(conds->load(), 2) << "each cond up to the accepting one is asked once";
  EXPECT_EQ(third->load(), 0) << "a node after the one that takes the call is not asked";
  EXPECT_EQ(runs->load(), 0) << "explain runs no impl";
  EXPECT_EQ(fingerprint().difference(before), "") << "explain changes the dispatcher";
  EXPECT_EQ(adapter().graph(mul_key()).size(), 3u);
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
  EXPECT_EQ(runs->load(), 1);
}

std::vector<std::string> table_lines(const std::string& table) {
  std::vector<std::string> lines;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Where each of `cells` starts in `line`, found left to right (npos: missing).
std::vector<size_t> cell_offsets(const std::string& line, const std::vector<std::string>& cells) {
  std::vector<size_t> offsets;
  size_t at = 0;
  for (const std::string& cell : cells) {
    at = line.find(cell, at);
    offsets.push_back(at);
    if (at == std::string::npos) break;
    at += cell.size();
  }
  return offsets;
}

// Where the columns of `line` start: its first non-blank, and each non-blank after two blanks.
std::vector<size_t> column_starts(const std::string& line) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == ' ') continue;
    if (starts.empty() || (i >= 2 && line[i - 1] == ' ' && line[i - 2] == ' ')) starts.push_back(i);
  }
  return starts;
}

// Whether a list in `text` has an empty item: a comma first or after a blank.
bool has_an_empty_item(const std::string& text) {
  for (size_t at = text.find(','); at != std::string::npos; at = text.find(',', at + 1)) {
    if (at == 0 || text[at - 1] == ' ') return true;
  }
  return false;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The table's layout (behaviour explain.table), as the Python side checks it.
void check_table(const ExplainInfo& e) {
  const std::vector<std::string> lines = table_lines(e.table);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "explain " + e.op + " at " + e.dispatch_key) << e.table;
  for (const std::string& text : {e.why_key, e.router, e.coverage}) {
    EXPECT_FALSE(text.empty()) << e.table;
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return ends_with(l, text); }))
        << text << "\n" << e.table;
  }
  for (const std::string& line : lines) EXPECT_FALSE(!line.empty() && line.back() == ' ') << e.table;
  size_t first_row = lines.size();
  std::vector<size_t> offsets;
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const auto& n = e.nodes[i];
    const std::string position = std::to_string(i + 1);
    auto row = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find_first_not_of(' ') != std::string::npos && l.compare(l.find_first_not_of(' '), position.size() + 2,
                                                                          position + "  ") == 0 &&
             l.find(n.node_id) != std::string::npos;
    });
    ASSERT_NE(row, lines.end()) << "no row " << position << " for " << n.node_id << "\n" << e.table;
    const size_t index = static_cast<size_t>(row - lines.begin());
    if (i == 0) first_row = index;
    EXPECT_EQ(index, first_row + i) << e.table;  // one row per node, in order
    const auto found = cell_offsets(*row, {position, n.node_id, n.dsl_name, n.verdict, n.detail});
    if (i == 0) offsets = found;
    EXPECT_EQ(found, offsets) << e.table;
  }
  ASSERT_GE(first_row, 1u);
  ASSERT_LT(first_row, lines.size());
  EXPECT_EQ(column_starts(lines[first_row - 1]), offsets) << e.table;  // the header's columns
  std::string kernel;
  for (size_t k = first_row + e.nodes.size(); k < lines.size(); ++k) kernel += lines[k] + " ";
  EXPECT_THAT(kernel, HasSubstr(e.kernel)) << e.table;
  EXPECT_THAT(kernel, HasSubstr(e.kernel_detail)) << e.table;
  if (e.kernel == "impl") {
    EXPECT_THAT(kernel, HasSubstr(e.kernel_node_id)) << e.table;
    EXPECT_THAT(kernel, HasSubstr(e.kernel_dsl_name)) << e.table;
  }
}

TEST_P(Conformance, TheExplainTableGivesEveryFieldWithOneAlignedRowPerNode) {
  BEHAVIOUR("explain.table");
  REQUIRE_FEATURE("explain");
  // dsl names shorter than their column's header, node ids longer: both widths count.
  add(mul_key(), constant_cond(false), forbidden_impl(), "a");
  add(mul_key(), constant_cond(true), forbidden_impl(), "bb");
  add(mul_key(), constant_cond(true), forbidden_impl(), "c");
  adapter().disable({{"c"}, {}, {}});
  adapter().install(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "accepted", "disabled"})) << e.table;
  check_table(e);
}

TEST_P(Conformance, TheExplainTableOfAGraphWithoutARouterGivesEveryField) {
  BEHAVIOUR("explain.table");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(true), forbidden_impl(), "uninstalled_dsl");
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "CPU");
  EXPECT_EQ(e.kernel, "no router") << e.table;
  check_table(e);
}

TEST_P(Conformance, NoLineOfTheExplainTableEndsInABlankEvenWhereACondsMessageDoes) {
  BEHAVIOUR("explain.table");
  REQUIRE_FEATURE("explain");
  // The message ends both the raising node's row (its detail) and the kernel's line.
  add(mul_key(), explain_throwing_cond("cond exploded 5150  "), forbidden_impl(), "raising");
  adapter().install(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"raised"})) << e.table;
  EXPECT_THAT(e.table, HasSubstr("cond exploded 5150"));
  for (const std::string& line : table_lines(e.table)) {
    EXPECT_FALSE(!line.empty() && line.back() == ' ') << "[" << line << "]\n" << e.table;
  }
}

TEST_P(Conformance, ExplainNamesTheFilterEntryThatDisabledANode) {
  BEHAVIOUR("explain.disabled-by-filter");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(true), forbidden_impl(), "off_dsl");
  add(mul_key(), constant_cond(true), forbidden_impl(), "on_dsl");
  add(mul_key(), constant_cond(true), forbidden_impl(), "keyed_dsl");
  adapter().install(mul_key());
  adapter().disable({{"off_dsl"}, {}, {}});
  ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"disabled", "accepted", "not reached"})) << e.table;
  EXPECT_THAT(e.nodes[0].detail, HasSubstr("off_dsl"));
  EXPECT_FALSE(has_an_empty_item(e.nodes[0].detail)) << e.nodes[0].detail;
  adapter().disable({{}, {}, {"CPU"}});
  e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"disabled", "disabled", "disabled"})) << e.table;
  EXPECT_THAT(e.nodes[1].detail, HasSubstr("CPU"));
  EXPECT_FALSE(has_an_empty_item(e.nodes[1].detail)) << e.nodes[1].detail;
  // Two entries name the first node now: both, and no empty item between.
  EXPECT_THAT(e.nodes[0].detail, HasSubstr("off_dsl"));
  EXPECT_THAT(e.nodes[0].detail, HasSubstr("CPU"));
  EXPECT_FALSE(has_an_empty_item(e.nodes[0].detail)) << e.nodes[0].detail;
  EXPECT_EQ(e.kernel, "fallback") << e.table;
}

TEST_P(Conformance, ExplainSaysAnUnconditionalNodeIsMaskedOnlyUnderTheMask) {
  BEHAVIOUR("explain.unconditional-masked");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("unconditional-hatch");
  add(mul_key(), {}, forbidden_impl(), "always_dsl", {}, /*unconditional=*/true);
  adapter().install(mul_key());
  adapter().disable({{"always_dsl"}, {}, {}});
  ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"accepted"})) << e.table;
  EXPECT_THAT(e.nodes.at(0).detail, HasSubstr("always_dsl")) << "named, and why it stays";
  {
    auto mask = adapter().unconditional_masked();
    e = adapter().explain(explain_mul_op(), explain_args(), "");
    EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"masked"})) << e.table;
    EXPECT_THAT(e.nodes[0].detail, HasSubstr("always_dsl"));
    EXPECT_EQ(e.kernel, "fallback");
  }
}

TEST_P(Conformance, EveryNodeAfterTheDecidingOneIsNotReachedAndNamesWhatDecided) {
  BEHAVIOUR("explain.node-verdicts-and-kernel");
  REQUIRE_FEATURE("explain");
  auto later = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(true), forbidden_impl(), "taker");
  for (int k = 0; k < 3; ++k) {
    add(mul_key(), counting_cond(later, true), forbidden_impl(), "after_" + std::to_string(k));
  }
  adapter().install(mul_key());
  const std::string taker = adapter().graph(mul_key()).at(0).node_id;
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e),
            std::vector<std::string>({"accepted", "not reached", "not reached", "not reached"}))
      << e.table;
  for (size_t i = 1; i < e.nodes.size(); ++i) EXPECT_THAT(e.nodes[i].detail, HasSubstr(taker)) << e.table;
  EXPECT_EQ(later->load(), 0);
}

TEST_P(Conformance, EveryNodeAfterARaisingCondIsNotReachedAndNamesThatCond) {
  BEHAVIOUR("explain.cond-raised");
  REQUIRE_FEATURE("explain");
  add(mul_key(), explain_throwing_cond("cond exploded 6120"), forbidden_impl(), "raising");
  add(mul_key(), constant_cond(true), forbidden_impl(), "later_a");
  add(mul_key(), constant_cond(true), forbidden_impl(), "later_b");
  adapter().install(mul_key());
  const std::string raising = adapter().graph(mul_key()).at(0).node_id;
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"raised", "not reached", "not reached"}))
      << e.table;
  for (size_t i = 1; i < e.nodes.size(); ++i) EXPECT_THAT(e.nodes[i].detail, HasSubstr(raising)) << e.table;
}

TEST_P(Conformance, ExplainReportsARaisingCondWithItsMessage) {
  BEHAVIOUR("explain.cond-raised");
  REQUIRE_FEATURE("explain");
  auto later = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), explain_throwing_cond("cond exploded 4711"), forbidden_impl(), "raising");
  add(mul_key(), counting_cond(later, true), forbidden_impl(), "later");
  adapter().install(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"raised", "not reached"})) << e.table;
  EXPECT_THAT(e.nodes[0].detail, HasSubstr("cond exploded 4711"));
  EXPECT_EQ(e.kernel, "raises");
  EXPECT_EQ(later->load(), 0);
}

TEST_P(Conformance, ExplainDoesNotAskTheRuntimeCheckAndExplainsTheNodesAfterIt) {
  BEHAVIOUR("explain.runtime-check-not-asked");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("runtime-init");
  auto checks = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(true), forbidden_impl(), "jit",
      [checks] { ++*checks; return true; });
  add(mul_key(), constant_cond(false), forbidden_impl(), "declining");
  add(mul_key(), constant_cond(true), forbidden_impl(), "backup");
  adapter().install(mul_key());
  const auto graph = adapter().graph(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"runtime check", "declined", "accepted"}))
      << e.table;
  EXPECT_EQ(checks->load(), 0) << "explain initialises no runtime";
  EXPECT_EQ(e.kernel, "impl");
  EXPECT_EQ(e.kernel_node_id, graph[0].node_id);
  EXPECT_THAT(e.kernel_detail, HasSubstr(graph[2].node_id)) << "what runs if the runtime is unavailable";
}

TEST_P(Conformance, ANodeBehindARuntimeCheckThatAloneAcceptsIsTheKernel) {
  BEHAVIOUR("explain.runtime-check-not-asked");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("runtime-init");
  auto checks = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(false), forbidden_impl(), "declining");
  add(mul_key(), constant_cond(true), forbidden_impl(), "jit_only", [checks] { ++*checks; return true; });
  add(mul_key(), constant_cond(false), forbidden_impl(), "declining_too");
  adapter().install(mul_key());
  const auto graph = adapter().graph(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "runtime check", "declined"}))
      << e.table;
  EXPECT_EQ(e.kernel, "impl") << e.table;
  EXPECT_EQ(e.kernel_node_id, graph[1].node_id) << e.table;
  EXPECT_EQ(e.kernel_dsl_name, "jit_only") << e.table;
  EXPECT_THAT(e.kernel_detail, HasSubstr("CPU")) << "else the op's own kernel at CPU";
  // No node after it accepts: the detail names the op's own kernel and no impl.
  EXPECT_THAT(e.kernel_detail, HasSubstr("own kernel")) << e.table;
  EXPECT_THAT(e.kernel_detail, Not(HasSubstr("impl"))) << e.table;
  EXPECT_EQ(checks->load(), 0);
}

TEST_P(Conformance, ExplainSaysWhetherTheRouterIsAbsentDormantOrActive) {
  BEHAVIOUR("explain.router-state");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(false), forbidden_impl(), "stateful");
  const ExplainInfo never_installed = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(never_installed.router.rfind("absent", 0), 0u) << never_installed.table;
  EXPECT_THAT(never_installed.kernel_detail, HasSubstr("own kernel")) << never_installed.table;
  adapter().install(mul_key());
  ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(e.router, "active") << e.table;
  adapter().disable({{"stateful"}, {}, {}});
  e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(e.router.rfind("dormant", 0), 0u) << e.table;
  // Installed again with its chain empty, the graph has no router: absent
  // still, in words other than those of a graph never installed.
  adapter().install(mul_key());
  ASSERT_FALSE(adapter().router_installed(mul_key()));
  e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(e.router.rfind("absent", 0), 0u) << e.table;
  EXPECT_NE(e.router, never_installed.router) << e.table;
}

TEST_P(Conformance, ExplainWithoutARouterSaysWhatRunsOnceInstalledIfTheRuntimeIsUnavailable) {
  BEHAVIOUR("explain.no-router", "explain.runtime-check-not-asked");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("runtime-init");
  auto checks = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(false), forbidden_impl(), "declining");
  add(mul_key(), constant_cond(true), forbidden_impl(), "jit_only", [checks] { ++*checks; return true; });
  const auto graph = adapter().graph(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "runtime check"})) << e.table;
  EXPECT_EQ(e.kernel, "no router") << e.table;
  const auto at = e.kernel_detail.find(graph[1].node_id);
  ASSERT_NE(at, std::string::npos) << "once installed, its impl if its runtime is ready: " << e.table;
  EXPECT_THAT(e.kernel_detail.substr(at), HasSubstr("own kernel")) << "else the op's own: " << e.table;
  EXPECT_EQ(checks->load(), 0);
}

TEST_P(Conformance, TheKernelsDetailNamesEachLaterNodeInTheOrderTheyWouldBeTried) {
  BEHAVIOUR("explain.runtime-check-not-asked");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("runtime-init");
  add(mul_key(), constant_cond(true), forbidden_impl(), "jit_a", [] { return true; });
  add(mul_key(), constant_cond(true), forbidden_impl(), "jit_b", [] { return true; });
  add(mul_key(), constant_cond(true), forbidden_impl(), "backup");
  adapter().install(mul_key());
  const auto graph = adapter().graph(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"runtime check", "runtime check", "accepted"}))
      << e.table;
  EXPECT_EQ(e.kernel_node_id, graph[0].node_id);
  const auto b = e.kernel_detail.find(graph[1].node_id), backup = e.kernel_detail.find(graph[2].node_id);
  EXPECT_NE(b, std::string::npos) << e.table;
  EXPECT_NE(backup, std::string::npos) << e.table;
  EXPECT_LT(b, backup) << e.table;
}

TEST_P(Conformance, ExplainNamesTheOpsOwnKernelWhenNoNodeTakesTheCall) {
  BEHAVIOUR("explain.fallback-when-none-accepts");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(false), forbidden_impl(), "declining");
  adapter().install(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined"}));
  EXPECT_EQ(e.kernel, "fallback") << e.table;
  EXPECT_TRUE(e.kernel_node_id.empty());
  EXPECT_THAT(e.kernel_detail, HasSubstr("CPU")) << "the key whose kernel was captured";
  // At a key that was a fallthrough before the router, the next key's kernel runs.
  const Key autocast{"aten", "mul.Tensor", "AutocastCPU"};
  add(autocast, constant_cond(false), forbidden_impl(), "declining");
  adapter().install(autocast);
  const ExplainInfo at_autocast = adapter().explain(explain_mul_op(), explain_args(), "AutocastCPU");
  EXPECT_EQ(at_autocast.kernel, "fallthrough") << at_autocast.table;
  EXPECT_TRUE(at_autocast.kernel_node_id.empty());
  EXPECT_THAT(at_autocast.kernel_detail, HasSubstr("AutocastCPU"));
  // At a key where the op had no kernel before the router (aten has none at XLA
  // without torch_xla), a call no node takes raises: the kind says so.
  const Key xla{"aten", "mul.Tensor", "XLA"};
  add(xla, constant_cond(false), forbidden_impl(), "declining");
  adapter().install(xla);
  const ExplainInfo at_xla = adapter().explain(explain_mul_op(), explain_args(), "XLA");
  EXPECT_EQ(at_xla.kernel, "no kernel") << at_xla.table;
  EXPECT_TRUE(at_xla.kernel_node_id.empty());
  EXPECT_THAT(at_xla.kernel_detail, HasSubstr("XLA"));
}

TEST_P(Conformance, ExplainSaysAGraphWithoutARouterLeavesTheCallToTheOp) {
  BEHAVIOUR("explain.no-router");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(true), forbidden_impl(), "not_installed");
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(e.kernel, "no router") << e.table;
  EXPECT_FALSE(adapter().router_installed(mul_key())) << "explain installs nothing";
  EXPECT_THAT(e.kernel_detail, HasSubstr(adapter().graph(mul_key()).at(0).node_id))
      << "what it would run once installed";
  EXPECT_TRUE(e.kernel_node_id.empty() && e.kernel_dsl_name.empty()) << e.table;
}

TEST_P(Conformance, ExplainOfAGraphWithoutARouterSaysThatOnceInstalledTheCallWouldRaise) {
  BEHAVIOUR("explain.no-router");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(false), forbidden_impl(), "declines");
  add(mul_key(), explain_throwing_cond("cond exploded 5812"), forbidden_impl(), "raises");
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(e.kernel, "no router") << e.table;
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "raised"})) << e.table;
  EXPECT_THAT(e.kernel_detail, HasSubstr("cond exploded 5812")) << e.table;
}

TEST_P(Conformance, ExplainReportsTheCoverageCheck) {
  BEHAVIOUR("explain.coverage-check");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("aot-coverage");
  auto conds = std::make_shared<std::atomic<int>>(0);
  {
    auto covering = adapter().coverage_check(
        [](const Key&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return true; });
    add(mul_key(), counting_cond(conds, true), forbidden_impl(), "covered_dsl");
    adapter().install(mul_key());
    const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
    EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"not reached"})) << e.table;
    EXPECT_THAT(e.nodes.at(0).detail, HasSubstr("coverage")) << e.table;
    EXPECT_EQ(e.kernel, "fallback");
    EXPECT_THAT(e.kernel_detail, HasSubstr("CPU")) << "the op's own kernel at CPU";
    EXPECT_THAT(e.coverage, HasSubstr("covered"));
    EXPECT_THAT(e.coverage, Not(HasSubstr("not covered")));
    EXPECT_EQ(conds->load(), 0) << "a covered call asks no cond";
  }
  {
    auto declining = adapter().coverage_check(
        [](const Key&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return false; });
    adapter().install(mul_key());
    const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
    EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"accepted"})) << e.table;
    EXPECT_THAT(e.coverage, HasSubstr("not covered"));
    EXPECT_THAT(e.coverage, Not(HasSubstr("raise"))) << "it answered: nothing raised";
  }
  auto raising = adapter().coverage_check(
      [](const Key&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) -> bool {
        throw std::runtime_error("manifest unreadable 99");
      });
  adapter().install(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"accepted"})) << e.table;
  EXPECT_THAT(e.coverage, HasSubstr("manifest unreadable 99"));
  EXPECT_THAT(e.coverage, HasSubstr("not covered"));
  EXPECT_EQ(e.kernel, "impl");
  {
    // Coverage checks switched off: the check is not asked, the conds decide.
    auto covering = adapter().coverage_check(
        [](const Key&, const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return true; });
    auto off = adapter().aot_enabled(false);
    adapter().install(mul_key());
    const ExplainInfo switched_off = adapter().explain(explain_mul_op(), explain_args(), "");
    EXPECT_EQ(explained_verdicts(switched_off), std::vector<std::string>({"accepted"})) << switched_off.table;
    EXPECT_EQ(switched_off.kernel, "impl");
    EXPECT_THAT(switched_off.coverage, HasSubstr("not asked"));
  }
}

TEST_P(Conformance, ExplainPicksTheHighestKeyOfTheCallWithAGraph) {
  BEHAVIOUR("explain.chooses-the-call-key");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(true), forbidden_impl(), "backend");
  const ExplainInfo at_backend = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(at_backend.dispatch_key, "CPU");
  // Why that key: the call's keys passed over on the way to it are named.
  EXPECT_THAT(at_backend.why_key,
              ::testing::AllOf(::testing::ContainsRegex("(^|[^A-Za-z])AutogradCPU($|[^A-Za-z])"),
                               ::testing::ContainsRegex("(^|[^A-Za-z])CPU($|[^A-Za-z])")))
      << at_backend.table;
  add({"aten", "mul.Tensor", "AutogradCPU"}, constant_cond(true), forbidden_impl(), "autograd");
  EXPECT_EQ(adapter().explain(explain_mul_op(), explain_args(), "").dispatch_key, "AutogradCPU")
      << "AutogradCPU is reached before CPU";
  const ExplainInfo at_cpu = adapter().explain(explain_mul_op(), explain_args(), "CPU");
  EXPECT_EQ(at_cpu.dispatch_key, "CPU");
  ASSERT_EQ(at_cpu.nodes.size(), 1u);
  EXPECT_EQ(at_cpu.nodes[0].dsl_name, "backend");
}

TEST_P(Conformance, ExplainRefusesAKeyWithoutAGraphNamingItAndChangesNothing) {
  BEHAVIOUR("explain.bad-input");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(true), fill_impl(7), "only_cpu");
  add({"aten", "mul.Tensor", "AutogradCPU"}, constant_cond(false), fill_impl(9), "autograd");
  adapter().install(mul_key());
  const auto before = fingerprint();
  // The keys with a graph, each as a word of its own.
  const auto names_graph_keys = ::testing::AllOf(::testing::ContainsRegex("(^|[^A-Za-z])CPU($|[^A-Za-z])"),
                                                 ::testing::ContainsRegex("(^|[^A-Za-z])AutogradCPU($|[^A-Za-z])"));
  try {
    adapter().explain(explain_mul_op(), explain_args(), "AutocastCPU");
    ADD_FAILURE() << "explain at a key with no graph must raise";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("AutocastCPU"));
    EXPECT_THAT(e.what(), names_graph_keys);
  }
  const auto& bmm = c10::Dispatcher::singleton().findSchemaOrThrow("aten::bmm", "");
  try {
    adapter().explain(bmm, {at::ones({1, 2, 2}), at::ones({1, 2, 2})}, "");
    ADD_FAILURE() << "explain of an op with no graph must raise";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("bmm"));
    EXPECT_THAT(e.what(), HasSubstr("none")) << "the op has a graph nowhere";
    EXPECT_THAT(e.what(), ::testing::ContainsRegex("(^|[^A-Za-z])CPU($|[^A-Za-z])")) << "the key the call visits";
  }
  try {
    adapter().explain(explain_mul_op(), {tensor({2})}, "");
    ADD_FAILURE() << "explain with a stack short of the schema's arguments must raise";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::ContainsRegex("(^|[^0-9])2([^0-9]|$)")) << "the arguments the schema takes";
    EXPECT_THAT(e.what(), ::testing::ContainsRegex("(^|[^0-9])1([^0-9]|$)")) << "the arguments the stack holds";
  }
  EXPECT_EQ(fingerprint().difference(before), "");
  EXPECT_TRUE(same(call_mul(tensor({2}), tensor({4})), tensor({7})));
}

TEST_P(Conformance, ExplainOfAGraphChangedSinceItsInstallTellsWhatTheRouterDoesNow) {
  BEHAVIOUR("explain.unpublished-changes");
  REQUIRE_FEATURE("explain");
  auto later = std::make_shared<std::atomic<int>>(0);
  add(mul_key(), constant_cond(false), forbidden_impl(), "installed_dsl");
  adapter().install(mul_key());
  add(mul_key(), counting_cond(later, true), forbidden_impl(), "later_dsl");  // not installed since
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "not published"})) << e.table;
  EXPECT_EQ(e.kernel, "fallback") << e.table;
  EXPECT_EQ(later->load(), 0);
}

TEST_P(Conformance, ExplainOfAGraphUnchangedSinceItsInstallAsksForNoInstall) {
  BEHAVIOUR("explain.unpublished-changes");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(false), forbidden_impl(), "declining");
  add(mul_key(), constant_cond(true), forbidden_impl(), "accepting");
  adapter().install(mul_key());
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "accepted"})) << e.table;
  for (const auto& node : e.nodes) EXPECT_THAT(node.detail, Not(HasSubstr("install"))) << e.table;
}

TEST_P(Conformance, ExplainOfAGraphReorderedSinceItsInstallListsTheRoutersOrder) {
  BEHAVIOUR("explain.unpublished-changes");
  REQUIRE_FEATURE("explain");
  add(mul_key(), constant_cond(false), forbidden_impl(), "first_dsl");
  add(mul_key(), constant_cond(true), forbidden_impl(), "second_dsl");
  adapter().install(mul_key());
  std::vector<std::string> routed;
  for (const NodeInfo& n : adapter().graph(mul_key())) routed.push_back(n.node_id);
  adapter().reorder([](const std::string&, const std::string&, const std::vector<NodeInfo>& graph) {
    std::vector<std::string> ids;
    for (auto it = graph.rbegin(); it != graph.rend(); ++it) ids.push_back(it->node_id);
    return ids;
  });  // not reinstalled
  const ExplainInfo e = adapter().explain(explain_mul_op(), explain_args(), "");
  std::vector<std::string> listed;
  for (const auto& n : e.nodes) listed.push_back(n.node_id);
  EXPECT_EQ(listed, routed) << e.table;  // once each, as routed
  EXPECT_EQ(explained_verdicts(e), std::vector<std::string>({"declined", "accepted"})) << e.table;
  EXPECT_EQ(e.kernel_node_id, routed.at(1)) << e.table;
  // A node registered since, after the reordered ones: listed too, once.
  add(mul_key(), constant_cond(true), forbidden_impl(), "third_dsl");
  const ExplainInfo with_third = adapter().explain(explain_mul_op(), explain_args(), "");
  EXPECT_EQ(explained_verdicts(with_third), std::vector<std::string>({"declined", "accepted", "not published"}))
      << with_third.table;
}

TEST_P(Conformance, ExplainOfANativeOpNamesItsNode) {
  BEHAVIOUR("explain.native-op");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("native-op-meta");
  add(mul_key(), constant_cond(false), forbidden_impl(), "native_dsl");
  add(mul_key(), constant_cond(false), forbidden_impl(), "other_dsl");
  adapter().install(mul_key());
  const NodeInfo node = adapter().graph(mul_key()).at(0);
  const auto native = adapter().native_op(node);
  ASSERT_TRUE(native.has_value());
  const ExplainInfo e = adapter().explain(*native, {}, "");
  ASSERT_EQ(e.nodes.size(), 1u) << e.table;
  EXPECT_EQ(e.nodes[0].node_id, node.node_id);
  EXPECT_EQ(e.nodes[0].dsl_name, "native_dsl");
  EXPECT_EQ(e.nodes[0].verdict, "native op");
  EXPECT_TRUE(ends_with(e.nodes[0].detail, "enabled")) << e.table;
  EXPECT_EQ(e.dispatch_key, "CPU");
  EXPECT_EQ(e.kernel, "impl");
  EXPECT_EQ(e.kernel_node_id, node.node_id);
  EXPECT_EQ(e.kernel_dsl_name, "native_dsl");
  EXPECT_FALSE(e.kernel_detail.empty() || e.router.empty() || e.coverage.empty()) << e.table;
  adapter().disable({{"native_dsl"}, {}, {}});
  const ExplainInfo disabled = adapter().explain(*native, {}, "");
  ASSERT_EQ(disabled.nodes.size(), 1u) << disabled.table;
  EXPECT_TRUE(ends_with(disabled.nodes[0].detail, "disabled")) << disabled.table;
  EXPECT_EQ(disabled.kernel, "impl");
}

TEST_P(Conformance, ExplainOfANativeOpWhoseOverrideIsGoneRefusesItNamingIt) {
  BEHAVIOUR("explain.native-op", "explain.bad-input");
  REQUIRE_FEATURE("explain");
  REQUIRE_FEATURE("native-op-meta");
  std::optional<c10::OperatorHandle> native;
  std::string node_id;
  {
    auto inner = adapter().scope();
    add(mul_key(), constant_cond(false), forbidden_impl(), "gone_dsl");
    adapter().install(mul_key());
    const NodeInfo node = adapter().graph(mul_key()).at(0);
    node_id = node.node_id;
    native = adapter().native_op(node);
    ASSERT_TRUE(native.has_value());
  }
  const auto before = fingerprint();
  try {
    adapter().explain(*native, {}, "");
    ADD_FAILURE() << "explain of a native op whose override is gone must raise";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(node_id));
  }
  EXPECT_EQ(fingerprint().difference(before), "");
}

}  // namespace
}  // namespace conformance
