// Precompiled header (Meson cpp_pch) for the core library: the LibTorch
// headers every file of reference/src includes, parsed once per build instead
// of once per file (they are most of a file's compile time). Build speed only:
// each source still includes what it uses, and a build with -Db_pch=false
// compiles the same code.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
