// LibTorch warns "Overriding a previously registered kernel" once per process,
// at the first kernel registered over another. The registry drops that notice
// and nothing else. Each check runs in a forked child, so each sees a process
// in which nothing has been overridden yet; hence its own executable, whose
// parent process never overrides anything.

#include <native_registry/native_registry.h>

#include "../src/quiet_override_warning.h"
#include "warning_recorder.h"

#include <ATen/ops/full_like.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace native_registry::testing {
namespace {

using Recorder = fixtures::WarningRecorder;

constexpr const char* kNotice = "Overriding a previously registered kernel";

void identity(const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {}

// Control: a plain registration over aten::mul.Tensor's CPU kernel warns.
TEST(OverrideWarning, LibTorchWarnsOnAPlainOverride) {
  EXPECT_EXIT(
      {
        Recorder recorder;
        c10::WarningUtils::WarningHandlerGuard guard(&recorder);
        torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__,
                           __LINE__);
        lib.impl("mul.Tensor", torch::CppFunction::makeFromBoxedFunction<&identity>());
        std::exit(recorder.saw(kNotice) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(OverrideWarning, RegistryInstallDoesNotWarn) {
  EXPECT_EXIT(
      {
        Recorder recorder;
        c10::WarningUtils::WarningHandlerGuard guard(&recorder);
        Registry registry;
        registry.register_op_override(
            "d", "aten", "mul.Tensor", "CPU",
            [](const c10::OperatorHandle&, c10::DispatchKeySet, const Stack&) { return false; },
            [](const c10::OperatorHandle&, c10::DispatchKeySet, Stack*) {});
        registry.install_all();
        std::exit(recorder.saw(kNotice) ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(OverrideWarning, OtherWarningsPassThroughTheFilter) {
  Recorder recorder;
  c10::WarningUtils::WarningHandlerGuard guard(&recorder);
  {
    detail::QuietOverrideWarning quiet;
    TORCH_WARN("Overriding a previously registered kernel for the same operator");
    TORCH_WARN("Warning only once for all operators,  other operators may also be overridden.");
    TORCH_WARN("an unrelated warning");
  }
  ASSERT_EQ(recorder.messages.size(), 1u);
  EXPECT_NE(recorder.messages[0].find("an unrelated warning"), std::string::npos);
  EXPECT_EQ(c10::WarningUtils::get_warning_handler(), &recorder)
      << "the filter did not put the previous handler back";
}

}  // namespace
}  // namespace native_registry::testing
