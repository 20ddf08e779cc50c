"""Print where the installed PyTorch keeps LibTorch, one fact a line, for meson.

Lines: include dir, library dir, version, C++11 ABI flag (0 or 1).
"""
import os

import torch

root = os.path.dirname(torch.__file__)
print(os.path.join(root, "include"))
print(os.path.join(root, "lib"))
print(torch.__version__.split("+")[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
