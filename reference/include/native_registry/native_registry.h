#pragma once

// The whole public C++ API of the reference registry.

#include <native_registry/call_hooks.h>
#include <native_registry/errors.h>
#include <native_registry/registry.h>
#include <native_registry/types.h>
