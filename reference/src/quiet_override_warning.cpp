// The scoped warning filter of quiet_override_warning.h.
//
// Owns: the test of which warning is the kernel-override notice. May not
// touch: any other warning (each reaches the handler that was in place) or
// the dispatcher.

#include "quiet_override_warning.h"

namespace native_registry::detail {

QuietOverrideWarning::QuietOverrideWarning()
    : previous_(c10::WarningUtils::get_warning_handler()) {
  c10::WarningUtils::set_warning_handler(this);
}

QuietOverrideWarning::~QuietOverrideWarning() {
  c10::WarningUtils::set_warning_handler(previous_);
}

void QuietOverrideWarning::process(const c10::Warning& warning) {
  if (!is_override_notice(warning.msg())) previous_->process(warning);
}

bool QuietOverrideWarning::is_override_notice(const std::string& message) {
  return message.find("Overriding a previously registered kernel") != std::string::npos ||
         message.find("Warning only once for all operators") != std::string::npos;
}

}  // namespace native_registry::detail
