"""The repository root's conftest: it holds no fixture. Its being here makes
pytest put the root on sys.path for every suite under it (pytest's "rootdir
conftest"), so tests import the harness (`harness.…`), the conformance
suite's modules (`conformance.python.…`) and the shared fixtures
(`fixtures.python.…`) by their package names, with no sys.path edits."""
