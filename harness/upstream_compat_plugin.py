"""pytest plugin: before any test module is imported, make torch._native and
torch._native.registry the reference's compatibility module
(native_registry.upstream_compat), so an upstream test file written against
those modules runs against the reference. Loaded by
`./harness/run --upstream-tests` with `-p harness.upstream_compat_plugin`."""


def pytest_configure(config):
    from native_registry import upstream_compat

    upstream_compat.install_as_torch_native()
