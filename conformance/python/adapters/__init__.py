"""Adapters shipped with the suite: the reference binding and upstream's
torch._native.registry of the installed PyTorch."""
