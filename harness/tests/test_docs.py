"""The README and doc/ hold: every relative link resolves (the file, and the
#anchor to one of its headings), every command they quote exists (a script of
the repository, executable when run directly) and answers --help with exit
status 0 without installing or building anything, the README's Python example
runs, and the generated sections of doc/measurements.md are current."""

from __future__ import annotations

import functools
import os
import pathlib
import re
import shlex
import stat
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "doc").glob("*.md"))]
TOP = ("harness", "ci", "conformance", "fixtures", "reference", "doc")


def rel(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def prose(text: str) -> str:
    """The text less its fenced code blocks (a `#include` there is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path: pathlib.Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text()).splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", prose(doc.read_text())):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not ours to check
                found.append((rel(doc), target))
    return found


@pytest.mark.parametrize("doc, target", links())
def test_relative_link_resolves(doc, target):
    source = ROOT / doc
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    assert resolved.exists(), f"{doc}: link {target!r}: no {resolved}"
    if anchor:
        assert resolved.suffix == ".md", f"{doc}: link {target!r}: an anchor into a non-Markdown file"
        assert anchor in anchors(resolved), (
            f"{doc}: link {target!r}: no heading with anchor #{anchor} in {rel(resolved)} "
            f"(it has: {', '.join(sorted(anchors(resolved)))})")


def test_readme_is_short_and_starts_with_install():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; what is not for a newcomer goes to doc/"
    install = [i for i, line in enumerate(lines, 1) if line == "## Install"]
    assert install and install[0] <= 60, f"README.md: '## Install' at line {install} (must be in the first 60)"


# ---- the commands the docs quote ----------------------------------------------

INTERPRETERS = {"bash", "sh", "python", "python3", "$PYTHON", '"$PYTHON"'}
PREFIXES = {"env", "exec", "time", "sudo"}


def command_lines(text: str) -> list[str]:
    """Shell lines of sh code blocks, and inline code spans that read as commands."""
    out = []
    for block in re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", text, flags=re.M | re.S):
        out += [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", prose(text)):
        if " " in span or span.startswith("./"):
            out.append(span)
    return out


def scripts_in(line: str) -> list[tuple[str, bool]]:
    """(repository path, run directly) for each command of a shell line that
    is one of the repository's scripts; ("-m package.module", False) for each
    `python -m` of one of the repository's modules."""
    found = []
    for part in re.split(r"&&|\|\||[;|]|\$\(", line.split(" #")[0]):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        while words and (re.match(r"[A-Z_]+=", words[0]) or words[0] in PREFIXES
                         or re.fullmatch(r"-k|\d+", words[0])):
            words.pop(0)
        direct = True
        if words and words[0] in INTERPRETERS:
            words.pop(0)
            direct = False
            if words[:1] == ["-m"] and len(words) > 1 and words[1].split(".")[0] in TOP:
                found.append((f"-m {words[1]}", False))  # python -m harness.docgen, say
            if words and words[0].startswith("-"):  # a flag, or -m of no module of ours
                words = []
        if words:
            word = words[0].removeprefix("./")
            if word.split("/")[0] in TOP and "/" in word:
                found.append((word, direct))
    return found


def quoted_scripts() -> dict[str, tuple[bool, set[str]]]:
    scripts: dict[str, tuple[bool, set[str]]] = {}
    for doc in DOCS:
        for line in command_lines(doc.read_text()):
            for path, direct in scripts_in(line):
                was_direct, where = scripts.get(path, (False, set()))
                scripts[path] = (was_direct or direct, where | {rel(doc)})
    return scripts


def test_commands_are_found():
    # The commands below must be among those recognised, or the check tests nothing.
    assert {"harness/run", "ci/test", "reference/bench/run", "harness/gpu/run-on-device",
            "-m harness.docgen"} <= set(quoted_scripts())


@pytest.mark.parametrize("script", sorted(quoted_scripts()))
def test_quoted_command_exists_and_answers_help(script, tmp_path):
    direct, where = quoted_scripts()[script]
    module = script.removeprefix("-m ") if script.startswith("-m ") else None
    if module:  # a package runs its __main__
        path = ROOT / module.replace(".", "/")
        path = path / "__main__.py" if path.is_dir() else path.with_suffix(".py")
    else:
        path = ROOT / script
    assert path.is_file(), f"{', '.join(sorted(where))} quote {script}, which does not exist"
    if direct:
        assert path.stat().st_mode & stat.S_IXUSR, f"{script} is run directly in {sorted(where)} but is not executable"
    # Whatever would install or build records itself here and fails: pip and
    # Meson through the interpreter, and the tools on PATH.
    log = tmp_path / "calls.log"
    shims = tmp_path / "bin"
    shims.mkdir()
    for tool in ("meson", "ninja", "cmake", "pip", "pip3", "apt-get", "c++", "g++", "gcc", "cc"):
        (shims / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\" >> {log}\nexit 97\n")
        (shims / tool).chmod(0o755)
    python = shims / "python-guard"
    python.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1 $2" in
          "-m pip"*|"-m mesonbuild"*|"-m ninja"*|"-m build"*) echo python "$@" >> {log}; exit 97 ;;
        esac
        exec {sys.executable} "$@"
        """))
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "PYTHON": str(python)}
    if module:  # from anywhere, with the root on the path as ./harness/run puts it
        env["PYTHONPATH"] = str(ROOT)
        cmd = [str(python), "-m", module]
    else:
        cmd = [str(path)] if direct else ([str(python)] if script.endswith(".py") else ["bash"]) + [str(path)]
    proc = subprocess.run(cmd + ["--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    calls = log.read_text() if log.exists() else ""
    assert not calls, f"{script} --help started installing or building:\n{calls}"
    assert proc.returncode == 0, f"{script} --help: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{script} --help printed nothing"


# ---- examples and generated sections ------------------------------------------


def test_readme_python_example_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    section = text.split("## The Python API", 1)[1]
    code = re.search(r"^```python\n(.*?)^```", section, flags=re.M | re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"the README's Python example fails:\n{proc.stderr[-3000:]}"


def test_generated_sections_are_current():
    proc = subprocess.run([sys.executable, "-m", "harness.docgen", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = subprocess.run([sys.executable, "-m", "harness.docgen", "--list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60).stdout
    assert "markers missing" not in listed, listed


@pytest.mark.parametrize("doc", [rel(d) for d in DOCS])
def test_each_generated_section_has_its_markers_once_and_no_section_heading_repeats(doc):
    """A section written twice (one copy orphaned by a move, say) is stale in
    one place at least; a writer refuses to run on such a doc, and so does this."""
    from harness import doc_sections
    text = prose((ROOT / doc).read_text())
    for name in sorted(doc_sections.names(text)):
        doc_sections.span(text, name, doc)  # raises MarkerError naming the section
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    repeated = sorted({h for h in headings if headings.count(h) > 1})
    assert not repeated, f"{doc}: the heading(s) {repeated} appear more than once"
