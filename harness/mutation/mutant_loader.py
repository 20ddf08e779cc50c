"""pytest plugin for `--mutants auto --impl X`: imports the mutated copy of a
Python implementation's registry module (NR_MUTANT_FILE) under the module's
own name (NR_MUTANT_MODULE) before the suite loads the adapter, so the
adapter drives the mutant and the installed file stays untouched."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

name, path = os.environ["NR_MUTANT_MODULE"], os.environ["NR_MUTANT_FILE"]
parent, _, leaf = name.rpartition(".")
if parent:
    importlib.import_module(parent)
spec = importlib.util.spec_from_file_location(name, path)
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
spec.loader.exec_module(module)
if parent:
    setattr(sys.modules[parent], leaf, module)
