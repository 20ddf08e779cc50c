"""Tests of ci/check_forced_unwind.py: which `catch (...)` it refuses and which
it accepts, and that the reference's sources pass it."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

from ci import check_forced_unwind as checker

ROOT = pathlib.Path(__file__).resolve().parent.parent


def bad_lines(source: str) -> list[int]:
    return checker.offending_handlers(textwrap.dedent(source))


def test_a_swallowing_catch_all_is_refused_with_its_line():
    assert bad_lines("""
        void f() {
          try {
            g();
          } catch (...) {
            // ignored
          }
        }
    """) == [5]


def test_a_catch_all_after_other_handlers_but_no_forced_unwind_one_is_refused():
    assert bad_lines("""
        void f() {
          try { g(); }
          catch (const std::exception& e) { log(e.what()); }
          catch (...) { log("unknown"); }
        }
    """) == [5]


def test_a_forced_unwind_handler_that_does_not_rethrow_proves_nothing():
    assert bad_lines("""
        void f() {
          try { g(); }
          catch (abi::__forced_unwind&) { cleanup(); }
          catch (...) {}
        }
    """) == [5]


def test_a_catch_all_preceded_by_a_rethrowing_forced_unwind_handler_is_accepted():
    assert bad_lines("""
        void f() {
          try {
            g();
        #if defined(__GLIBCXX__)
          } catch (abi::__forced_unwind&) {
            throw;  // the thread is ending
        #endif
          } catch (const std::exception& e) {
            log(e.what());
          } catch (...) {
          }
        }
    """) == []


def test_a_catch_all_that_rethrows_is_accepted():
    assert bad_lines("""
        void f() {
          try { g(); } catch (...) { undo(); throw; }
        }
    """) == []


def test_a_throw_of_something_else_is_not_a_rethrow():
    assert bad_lines("""
        void f() {
          try { g(); } catch (...) { throw std::runtime_error("x"); }
        }
    """) == [3]


def test_a_forced_unwind_handler_of_another_try_does_not_count():
    assert bad_lines("""
        void f() {
          try { g(); } catch (abi::__forced_unwind&) { throw; }
          try { h(); } catch (...) {}
        }
    """) == [4]


def test_catch_all_in_comments_and_strings_is_ignored():
    assert bad_lines("""
        // try { g(); } catch (...) {}
        /* catch (...) { } */
        const char* s = "catch (...) {}";
    """) == []


def test_the_command_fails_on_a_bad_file_and_names_it(tmp_path):
    (tmp_path / "bad.cpp").write_text("void f() { try { g(); } catch (...) {} }\n")
    (tmp_path / "good.cpp").write_text("void f() { try { g(); } catch (...) { throw; } }\n")
    out = subprocess.run([sys.executable, str(ROOT / "ci" / "check_forced_unwind.py"), str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert "bad.cpp:1" in out.stdout and "good.cpp" not in out.stdout


@pytest.mark.parametrize("folder", ["reference"])
def test_the_reference_sources_pass(folder):
    assert checker.scan([ROOT / folder]) == []
