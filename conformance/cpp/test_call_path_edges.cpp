// Edges of the call path and of what teardown frees: callables released once
// their overrides are gone, and how refused names read in error messages.

#include "suite.h"

#include <cctype>
#include <memory>
#include <optional>

namespace conformance {
namespace call_path_edges {

using namespace native_registry::fixtures;

// ---- teardown frees the callables ------------------------------------------

// A cond and an impl of mul (the impl fills with 7) that each hold a copy of
// one token; `alive` expires once every copy of both is destroyed.
struct TokenCallables {
  CondFn cond;
  ImplFn impl;
  std::weak_ptr<int> alive;
};

TokenCallables token_callables() {
  auto token = std::make_shared<int>(0);
  ImplFn fill = fill_impl(7);
  return {[token](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return true; },
          [token, fill](const c10::OperatorHandle& op, c10::DispatchKeySet keys, Stack* stack) {
            fill(op, keys, stack);
          },
          token};
}

TEST_P(Conformance, LeavingAScopeReleasesTheCallablesOfTheOverridesItRemoved) {
  BEHAVIOUR("lifetime.teardown-releases-callables");
  const Key key{"aten", "mul.Tensor", "CPU"};
  std::weak_ptr<int> alive;
  {
    std::unique_ptr<Scope> inner = adapter().scope();
    TokenCallables callables = token_callables();
    alive = callables.alive;
    add(key, std::move(callables.cond), std::move(callables.impl));
    adapter().install(key);
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({7, 7})));
    }
    ASSERT_FALSE(alive.expired()) << "the registry must hold its override's callables";
  }
  EXPECT_TRUE(same(call_mul(tensor({2, 3}), tensor({4, 5})), tensor({8, 15})));
  EXPECT_TRUE(alive.expired()) << "teardown kept the cond or impl of an override it removed";
}

// ---- how refused input reads -------------------------------------------------

// The string a Python-style literal (quote, body, quote) denotes, reading the
// escapes \\ \' \" \n \t \r \xHH; nullopt when it is no such literal.
std::optional<std::string> literal_value(const std::string& literal) {
  std::string value;
  for (size_t i = 1; i + 1 < literal.size(); ++i) {
    const char c = literal[i];
    if (c == literal[0]) return std::nullopt;  // an unescaped quote inside
    if (c != '\\') {
      value += c;
      continue;
    }
    if (++i + 1 >= literal.size()) return std::nullopt;
    switch (literal[i]) {
      case '\\': case '\'': case '"': value += literal[i]; break;
      case 'n': value += '\n'; break;
      case 't': value += '\t'; break;
      case 'r': value += '\r'; break;
      case 'x': {
        if (i + 3 >= literal.size() || !std::isxdigit(static_cast<unsigned char>(literal[i + 1])) ||
            !std::isxdigit(static_cast<unsigned char>(literal[i + 2]))) {
          return std::nullopt;
        }
        value += static_cast<char>(std::stoi(literal.substr(i + 1, 2), nullptr, 16));
        i += 2;
        break;
      }
      default: return std::nullopt;
    }
  }
  return value;
}

// Whether some quoted literal in `message` denotes exactly `value`.
bool shows_legibly(const std::string& message, const std::string& value) {
  for (size_t start = 0; start < message.size(); ++start) {
    if (message[start] != '\'' && message[start] != '"') continue;
    for (size_t end = start + 1; end < message.size(); ++end) {
      if (message[end] != message[start]) continue;
      if (literal_value(message.substr(start, end - start + 1)) == value) return true;
    }
  }
  return false;
}

TEST_P(Conformance, ARefusedNameIsShownEscapedInTheError) {
  BEHAVIOUR("validation.refused-names-shown-escaped");
  // Namespaces no registry allows, each with a character that printed raw
  // would hide or garble the value: quotes, a backslash, controls, DEL.
  const std::vector<std::string> hostile{"bad'ns", "bad\"ns", "bad\\ns", "bad\\x41ns", "bad\nns",
                                         "bad\tns", "bad\x01ns", "bad\x1b" "ns", "bad\x7fns"};
  for (const std::string& lib_symbol : hostile) {
    SCOPED_TRACE(testing::PrintToString(lib_symbol));
    try {
      add({lib_symbol, "mul.Tensor", "CPU"}, constant_cond(true), forbidden_impl());
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      for (unsigned char c : message) {
        EXPECT_FALSE(c != '\n' && (c < 0x20 || c == 0x7f))
            << "raw control character " << int(c) << " in " << testing::PrintToString(message);
      }
      EXPECT_EQ(message.find("bad\nns"), std::string::npos) << message;
      EXPECT_TRUE(shows_legibly(message, lib_symbol)) << testing::PrintToString(message);
    }
  }
}

}  // namespace call_path_edges
}  // namespace conformance
