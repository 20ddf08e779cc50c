// Which kernel the routers installed from now on use: the typed (unboxed)
// one, for the signatures that have one (the default), or the generic boxed
// one for every signature. For benchmarks and tests that compare the two;
// routers already installed keep their kernel. NATIVE_REGISTRY_BOXED_ROUTERS=1
// in the environment turns the default off.
//
// Owns: these two declarations (defined in src/router.cpp). May not name
// any type of the core's private headers.
#pragma once

namespace native_registry {

void set_typed_routers_enabled(bool enabled);
bool typed_routers_enabled();

}  // namespace native_registry
