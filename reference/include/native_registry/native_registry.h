#pragma once

// The whole public C++ API of the reference registry.
// Owns: nothing but the includes (predicates.h is included on its own). May
// not touch: a src/ header; nothing under reference/src is public.

#include <native_registry/call_hooks.h>
#include <native_registry/errors.h>
#include <native_registry/explain.h>
#include <native_registry/registry.h>
#include <native_registry/types.h>
