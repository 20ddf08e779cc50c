#!/usr/bin/env python3
"""Fails on a `catch (...)` in the C++ sources that could swallow a forced unwind.

CPython ends a daemon thread that takes the GIL during interpreter shutdown
with pthread_exit, which unwinds the thread's stack with the exception
abi::__forced_unwind. A handler that catches it and does not rethrow aborts
the process ("FATAL: exception not rethrown"). So every `catch (...)` under
the scanned folders must be proven safe, one of:

  * an earlier handler of the same `try` is
    `catch (abi::__forced_unwind&) { throw; }` (preprocessor lines, such as an
    `#if defined(__GLIBCXX__)` around it, may stand between);
  * its own body ends with a plain rethrow, `throw;`.

Usage: ci/check_forced_unwind.py [FOLDER ...]   (default: reference)
Prints each offending handler as path:line and exits 1 if there is any.
"""

from __future__ import annotations

import pathlib
import re
import sys

SUFFIXES = {".cpp", ".cc", ".cxx", ".h", ".hpp", ".hh"}
CATCH_ALL = re.compile(r"\bcatch\s*\(\s*\.\.\.\s*\)")
FORCED_UNWIND = re.compile(r"^catch\s*\(\s*(?:const\s+)?abi::__forced_unwind\s*&\s*\w*\s*\)$")
TRY = re.compile(r"\btry$")


def strip_code(text: str) -> str:
    """The text with comments, string and character literals and preprocessor
    lines blanked (newlines kept, so offsets give the same line numbers)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        raw = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if raw:
            end = text.find(")" + raw.group(1) + '"', i)
            end = n if end < 0 else end + len(raw.group(1)) + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
            continue
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def matching_brace(code: str, open_at: int) -> int:
    """The offset of the `}` that closes the `{` at open_at (-1 if none)."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return -1


def opening_brace(code: str, close_at: int) -> int:
    """The offset of the `{` that the `}` at close_at closes (-1 if none)."""
    depth = 0
    for j in range(close_at, -1, -1):
        if code[j] == "}":
            depth += 1
        elif code[j] == "{":
            depth -= 1
            if depth == 0:
                return j
    return -1


def body_rethrows(body: str) -> bool:
    """Whether a handler's body (without its braces) ends with `throw;`."""
    return re.search(r"(^|[;{}])\s*throw\s*;\s*$", body) is not None


def earlier_handlers(code: str, catch_at: int) -> list[tuple[str, str]]:
    """The handlers of the same try before the one at catch_at, nearest
    first, as (header, body)."""
    handlers = []
    end = catch_at
    while True:
        before = code[:end].rstrip()
        if not before.endswith("}"):
            return handlers
        close = len(before) - 1
        open_ = opening_brace(code, close)
        if open_ < 0:
            return handlers
        head_text = code[:open_].rstrip()
        if TRY.search(head_text):
            return handlers
        # the header: `catch (...)` ending right before the body's brace
        if not head_text.endswith(")"):
            return handlers
        depth, j = 0, len(head_text) - 1
        while j >= 0:
            if head_text[j] == ")":
                depth += 1
            elif head_text[j] == "(":
                depth -= 1
                if depth == 0:
                    break
            j -= 1
        keyword = head_text[:j].rstrip()
        if not keyword.endswith("catch"):
            return handlers
        start = len(keyword) - len("catch")
        header = " ".join(head_text[start:].split())
        handlers.append((header, code[open_ + 1:close]))
        end = start


def offending_handlers(text: str) -> list[int]:
    """The line numbers of the unsafe `catch (...)` handlers in `text`."""
    code = strip_code(text)
    bad = []
    for match in CATCH_ALL.finditer(code):
        open_ = code.find("{", match.end())
        close = matching_brace(code, open_) if open_ >= 0 else -1
        if close >= 0 and body_rethrows(code[open_ + 1:close]):
            continue
        if any(FORCED_UNWIND.match(header) and body_rethrows(body)
               for header, body in earlier_handlers(code, match.start())):
            continue
        bad.append(code.count("\n", 0, match.start()) + 1)
    return bad


def scan(folders: list[pathlib.Path]) -> list[str]:
    found = []
    for folder in folders:
        files = [folder] if folder.is_file() else sorted(folder.rglob("*"))
        for path in files:
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            for line in offending_handlers(path.read_text(errors="replace")):
                found.append(f"{path}:{line}")
    return found


def main(argv: list[str]) -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    folders = [pathlib.Path(a) for a in argv] or [root / "reference"]
    found = scan(folders)
    for where in found:
        print(f"{where}: catch (...) may swallow a forced unwind (pthread_exit): add "
              "`catch (abi::__forced_unwind&) { throw; }` before it, or rethrow with `throw;`")
    if not found:
        print(f"check_forced_unwind: no unsafe catch (...) in {', '.join(map(str, folders))}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
