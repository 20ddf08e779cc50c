// The control scope and what runs around the lock: every control-plane
// operation holds mutex_ through a ControlScope, which queues log records
// and objects to free while it is held and emits and frees them once it is
// released, so no user code (log handlers, callables' destructors) ever runs
// under the lock. The settings the scope reads (the log and release sinks)
// live here too.
// Owns: the scope, its deferred records and releases, the two sinks. May not
// touch: graphs, filters, routers or `_native` ops (the operations the scope
// guards).

#include "registry_impl.h"

#include <iostream>
#include <utility>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

namespace native_registry {

// noexcept(false): a log handler may end its thread (pthread_exit, as
// CPython does to a daemon thread that takes the GIL during shutdown), and
// that forced unwind must leave through here; a noexcept destructor would
// abort the process.
Registry::Impl::ControlScope::~ControlScope() noexcept(false) {
  registry_.pending_ = nullptr;
  LogSink sink = registry_.log_sink_;
  ReleaseSink release = registry_.release_sink_;
  lock_.unlock();
  for (const auto& [level, message] : pending_.logs) {
    try {
      emit(sink, level, message);
#if defined(__GLIBCXX__)
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is ending (see above), not the handler failing
#endif
    } catch (...) {
      // A log handler's failure must not turn a done operation into an error.
    }
  }
  if (release && !pending_.released.empty()) release(std::move(pending_.released));
  pending_.released.clear();
}

void Registry::Impl::ControlScope::emit(const LogSink& sink, LogLevel level, const std::string& message) {
  if (sink) {
    sink(level, message);
  } else if (level == LogLevel::kWarning) {
    std::cerr << "[native_registry] warning: " << message << "\n";
  }
}

void Registry::Impl::defer_release(std::shared_ptr<const void> object) const {
  released().push_back(std::move(object));
}

detail::Released& Registry::Impl::released() const {
  TORCH_INTERNAL_ASSERT(pending_ != nullptr, "a release outside a ControlScope");
  return pending_->released;
}

void Registry::Impl::log(LogLevel level, const std::string& message) const {
  TORCH_INTERNAL_ASSERT(pending_ != nullptr, "log outside a ControlScope");
  pending_->logs.emplace_back(level, message);
}

void Registry::Impl::log_unlocked(LogLevel level, const std::string& message) const {
  LogSink sink;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sink = log_sink_;
  }
  ControlScope::emit(sink, level, message);
}

// ---- settings ---------------------------------------------------------------

void Registry::set_release_sink(ReleaseSink sink) {
  Impl::ControlScope scope(*impl_);
  impl_->defer_release(
      std::make_shared<ReleaseSink>(std::exchange(impl_->release_sink_, std::move(sink))));
}

void Registry::set_log_sink(LogSink sink) {
  Impl::ControlScope scope(*impl_);
  // The sink it replaces may own host objects: freed after the lock.
  impl_->defer_release(
      std::make_shared<LogSink>(std::exchange(impl_->log_sink_, std::move(sink))));
}

}  // namespace native_registry
