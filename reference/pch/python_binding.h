// Precompiled header (Meson cpp_pch) for the extension _C when it is built
// file by file (-Dbinding_unity=false, as the seeded-fault workspaces build
// it): pybind11's and PyTorch's Python headers, most of a binding file's
// compile time, parsed once per build. Build speed only: each source still
// includes what it uses.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>

#include <ATen/core/dispatch/Dispatcher.h>
