#pragma once

// Registering a kernel where one already is makes LibTorch warn "Overriding a
// previously registered kernel" (once per process). Overriding is the point
// of this registry, so that one warning is dropped while the registry edits
// the dispatcher; every other warning reaches the handler that was in place.
//
// Owns: the filter's scope (c10's warning handler is replaced for the
// object's lifetime). May not touch: the warnings it does not drop.

#include <c10/util/Exception.h>

namespace native_registry::detail {

class QuietOverrideWarning final : public c10::WarningHandler {
 public:
  QuietOverrideWarning();
  ~QuietOverrideWarning() override;
  QuietOverrideWarning(const QuietOverrideWarning&) = delete;
  QuietOverrideWarning& operator=(const QuietOverrideWarning&) = delete;

  void process(const c10::Warning& warning) override;

  // Whether `message` is the kernel-override notice this filter drops.
  static bool is_override_notice(const std::string& message);

 private:
  c10::WarningHandler* previous_;
};

}  // namespace native_registry::detail
