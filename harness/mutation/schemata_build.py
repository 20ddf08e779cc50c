"""--switch of the C++ layers (--mutants auto --mutate cpp|binding --switch):
the chosen mutants compiled into ONE build, each chosen at run time by
NR_MUTANT_ID (mutant schemata), instead of one rebuild per mutant.

In each workspace, schemata/ holds the switched copy of every mutated file
that has a mutant switched (cpp_schemata.py writes it; the forms the
compiler rejects are left out) at its path in the tree, and the switch's
header; schemata-build/ is the build of the workspace's copy of the tree
with -Dmutant_schemata=<schemata/> (meson_options.txt), which compiles
those files from their copies. With NR_MUTANT_ID unset it is the pristine
implementation: the baseline runs there. A mutant that is not switched (no
form fits its line, or its form does not compile) in a source of a shared
library (every core source: libnative_registry.so) is built on its own by
whichever worker takes it (OwnLink): its file rewritten with it is compiled
into the worker's folder, the library linked again there from the shared
build's other objects, and the suites run with that folder first on
$LD_LIBRARY_PATH, which the build's RUNPATHs yield to; one that does not
compile is stillborn. Any other (a header's, whose includers would all
compile again) is written into the file the build compiles, as without
--switch, rebuilt, and run with no mutant chosen, by one worker once the
others are done; its file's copy is written back afterwards (and rebuilt by
the next mutant's build, ninja deciding).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import pathlib
import shlex
import subprocess
import time
from dataclasses import dataclass, field

from . import cpp_schemata, mutants
from .mutagen_core import Mutant
from .mutants import Workspace

SWITCH = "NR_MUTANT_ID"
COPIES, BUILD = "schemata", "schemata-build"


def space(ws: Workspace) -> Workspace:
    """The workspace's schemata build: its copies and build beside its build/."""
    return dataclasses.replace(ws, schemata=ws.root / COPIES, build_dir=ws.root / BUILD)


@dataclass
class CppSwitched:
    """A file's schemata copy and the ids of the mutants it switches."""
    text: str                                   # the copy
    original: str                               # the file as it is
    ids: dict[str, int] = field(default_factory=dict)        # key -> NR_MUTANT_ID
    left_out: dict[str, str] = field(default_factory=dict)   # key -> why it is rebuilt instead
    probes: dict[str, int] = field(default_factory=dict)     # a key left out -> the id its statement's probe marks

    @property
    def keys(self) -> set[str]:
        return set(self.ids)

    def rewrite(self, m: Mutant, text: str) -> str:
        """What the build compiles for a mutant that is not switched: the
        file rewritten with it (none of the copy's switches)."""
        return m.apply(self.original)

    def choosing(self, target, m: Mutant):
        """`target` as the suites see it running the switched mutant `m`."""
        return dataclasses.replace(target, mutant_env={SWITCH: str(self.ids[m.key])})


@dataclass(frozen=True)
class OwnLink:
    """How a mutant of one source of a shared library is built without
    touching the shared build: the source's compile command and the
    library's link command as the build runs them (in its folder), where
    the mutated text's object and a library of the worker's own take the
    places of the build's."""
    build: pathlib.Path
    compile: tuple[str, ...]  # cpp_schemata.mutant_compile_words
    source: str      # the source as the compile command names it
    here: str        # its folder, whose headers the copy finds through -iquote
    obj: str         # its object, as both commands name it
    library: str     # the library's path in the build
    link: tuple[str, ...]

    def built(self, text: str, into: pathlib.Path, timeout: float | None) -> tuple[bool, str]:
        """`text` (the source with a mutant) compiled, and the library
        linked with it, into `into`/lib: (whether both succeeded, the
        compiler's or the linker's output)."""
        source = into / "src" / pathlib.PurePosixPath(self.source).name
        obj, library = into / "mutant.o", into / "lib" / pathlib.PurePosixPath(self.library).name
        source.parent.mkdir(parents=True, exist_ok=True)
        library.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(text)
        obj.unlink(missing_ok=True)
        library.unlink(missing_ok=True)
        compile_words = [str(source) if w == self.source else str(obj) if w == self.obj else w for w in self.compile]
        status, output = mutants.run_killable([compile_words[0], "-iquote", self.here, *compile_words[1:]],
                                              timeout, cwd=self.build)
        if status != 0:
            return False, output
        link_words = [str(obj) if w == self.obj else str(library) if w == self.library else w for w in self.link]
        status, linked = mutants.run_killable(link_words, timeout, cwd=self.build)
        return status == 0, output + linked

    def environment(self, into: pathlib.Path) -> dict[str, str]:
        """What the suites' processes are given so that they load the library
        built into `into` in place of the build's."""
        before = os.environ.get("LD_LIBRARY_PATH", "")
        return {LIBRARY_PATH: str(into / "lib") + (":" + before if before else "")}


LIBRARY_PATH = "LD_LIBRARY_PATH"


def own_links(build: pathlib.Path, files: list[str]) -> dict[str, OwnLink]:
    """Per mutated source compiled into a shared library of `build` (Meson
    names an object <library>.p/...), how a mutant of it is built on its own
    (OwnLink); a source that is not (a header), or whose commands are not
    found, has none."""
    entries = json.loads((build / "compile_commands.json").read_text())
    links: dict[str, OwnLink] = {}
    commands: dict[str, list[str]] = {}
    for rel in files:
        entry = cpp_schemata.compile_entry(entries, rel) if rel.endswith(".cpp") else None
        if entry is None or ".so.p/" not in entry.get("output", ""):
            continue
        library = entry["output"].split(".so.p/")[0] + ".so"
        if not pathlib.PurePosixPath(library).name.startswith("lib"):
            continue  # a Python extension module: imported by its path, not found by the dynamic linker
        if library not in commands:
            listed = subprocess.run(["ninja", "-C", str(build), "-t", "commands", library], capture_output=True,
                                    text=True)
            commands[library] = listed.stdout.strip().splitlines() if listed.returncode == 0 else []
        link = next((shlex.split(line) for line in reversed(commands[library])
                     if f" -o {library} " in f" {line} "), None)
        words = cpp_schemata.mutant_compile_words(entry)
        if link is None or entry["output"] not in link or entry["file"] not in words:
            continue
        links[rel] = OwnLink(build, tuple(words), entry["file"], str(cpp_schemata.source_folder(entry)),
                             entry["output"], library, tuple(link))
    return links


def precompiled_headers(ws: Workspace) -> list[str]:
    """The build's precompiled headers (the compile check's commands include them)."""
    targets = subprocess.run(["ninja", "-C", str(ws.build), "-t", "targets", "all"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    return [line.split(":")[0] for line in targets if line.split(":")[0].endswith(".gch")]


def switch(targets: list, spaces: list[Workspace], chosen: list[Mutant], jobs_each: int) -> bool:
    """Writes each workspace's schemata copies of the chosen mutants' files,
    checked by compiling, and builds its schemata build; the targets' files
    are the copies from here on (`place`), their pristine texts kept. False
    when a build fails."""
    began = time.monotonic()
    os.environ.pop(SWITCH, None)  # the baseline and the rebuilt mutants choose none
    for ws in spaces:
        # An earlier run's copies stay until this run's are known: a copy
        # written again with the same text keeps its time, and its object.
        ws.schemata.mkdir(parents=True, exist_ok=True)
        write_if_changed(ws.schemata / cpp_schemata.HEADER_NAME, cpp_schemata.HEADER)
        mutants.configure(ws, again=True)
    first = spaces[0]
    # The compile check uses the build's own commands, which include its
    # precompiled headers: those first (the build needs them anyway).
    status, output = mutants.run_killable(["ninja", "-C", str(first.build), f"-j{jobs_each}",
                                           *precompiled_headers(first)], None)
    if status != 0:
        print(f"schemata build: the precompiled headers do not build:\n{output[-3000:]}")
        return False
    print(f"== schemata: the switched copies of {len({m.file for m in chosen})} files, checked by compiling "
          f"(precompiled headers {time.monotonic() - began:.0f} s)", flush=True)
    # Each file is checked on its own (a compiler per file side by side); its
    # ids follow the files before it, so they do not depend on the timing.
    files, next_id = [], 0
    for rel in targets[0].files:
        mine = [m for m in chosen if m.file == rel and rel.endswith((".cpp", ".h"))]
        if mine:
            files.append((rel, mine, next_id))
            next_id += cpp_schemata.ID_SPAN * len(mine)

    def check(rel: str, mine: list[Mutant], first_id: int) -> tuple[CppSwitched, str]:
        checking = time.monotonic()
        original = (first.src / rel).read_text()
        if rel.endswith(".h"):
            found = header_checked(first, rel, original, mine, first_id)
            said = found.told(rel, len(mine), time.monotonic() - checking, "rebuilt one by one", "  ")
            return CppSwitched(found.text, original, found.ids, found.left_out, found.probes), said
        command = cpp_schemata.compile_command(first.build, rel, first.schemata)
        found = compile_checked(first, rel, original, mine, command, first_id)
        said = found.told(rel, len(mine), time.monotonic() - checking, "rebuilt one by one", "  ")
        return CppSwitched(found.text, original, found.ids, found.left_out, found.probes), said

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs_each * len(spaces))) as pool:
        checked_files = list(pool.map(lambda f: check(*f), files))
    switched: dict[str, CppSwitched] = {}
    for (rel, _, _), (found, said) in zip(files, checked_files):
        switched[rel] = found
        print(said, flush=True)
    for ws, t in zip(spaces, targets):
        t.pristine = {rel: t.place[rel].read_text() for rel in t.files}
        copies = {cpp_schemata.HEADER_NAME}
        for rel, s in switched.items():
            t.switched[rel] = s
            if s.ids or s.probes:
                copy = ws.schemata / rel
                copy.parent.mkdir(parents=True, exist_ok=True)
                write_if_changed(copy, s.text)
                t.place[rel] = copy
                copies.add(rel)
        # A switched header is seen only by files compiled from copies beside
        # it: every source and header of its folder gets one (as it is, where
        # it has no switch of its own).
        for header in sorted(rel for rel, s in switched.items() if rel.endswith(".h") and s.ids):
            for rel in folder_files(header, (".cpp", ".h")):
                if rel not in copies:
                    copy = ws.schemata / rel
                    write_if_changed(copy, (ws.src / rel).read_text())
                    copies.add(rel)
                    if rel in t.place:  # a mutant rebuilt there is written into what the build compiles
                        t.place[rel] = copy
        for old in ws.schemata.rglob("*"):  # an earlier run's copy of a file this run does not switch
            if old.is_file() and old.relative_to(ws.schemata).as_posix() not in copies:
                old.unlink()
        mutants.configure(ws, again=True)  # Meson sees the copies
    checked = time.monotonic() - began
    count = sum(len(s.ids) for s in switched.values())
    print(f"  {count} of the {len(chosen)} mutants switched by {SWITCH} ({checked:.0f} s); "
          f"== schemata build in {', '.join(str(ws.build) for ws in spaces)}", flush=True)
    from .mutant_runner import build_all
    building = time.monotonic()
    built = build_all(spaces, jobs_each)
    failed = [str(ws.build) for ws in spaces if not built.get(ws)]
    if failed:
        print(f"schemata build failed in {', '.join(failed)}")
        return False
    print(f"  schemata build: {time.monotonic() - building:.0f} s", flush=True)
    return True


def write_if_changed(path: pathlib.Path, text: str) -> None:
    """`text` into `path` unless it holds it already (its time then kept, so
    ninja does not compile it again)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


CHECKS = "schemata-checks"  # beside the workspace's build: compile checks done, by what they checked


def header_checked(ws: Workspace, rel: str, original: str, mine: list[Mutant], first_id: int
                   ) -> cpp_schemata.Schemata:
    """The schemata copy of a header's mutants whose switched forms compile,
    checked by compiling a source of its folder that includes it with the
    copy found first; a mutant whose switch the compiler rejects (an error
    at or soon after its line in the copy) is left out, and the rest checked
    again. Kept as compile_checked's (kept_check)."""
    name = pathlib.PurePosixPath(rel).name
    includer = next((f for f in folder_files(rel, (".cpp",))
                     if f'#include "{name}"' in (ws.src / f).read_text()), None)

    def check() -> cpp_schemata.Schemata:
        left = {m.key: "no source of its folder includes it: rebuilt" for m in mine} if includer is None else {}
        kept_mutants = [] if includer is None else list(mine)
        place = ws.root / "header-check" / rel.replace("/", "_") / name  # a folder each: checks run side by side
        place.parent.mkdir(parents=True, exist_ok=True)
        # Its folder's other headers beside it, as the schemata build has
        # them: one that includes it then finds the copy, not the tree's header.
        for other in folder_files(rel, (".h",)):
            if other != rel:
                write_if_changed(place.parent / pathlib.PurePosixPath(other).name, (ws.src / other).read_text())
        command = cpp_schemata.compile_command(ws.build, includer, ws.schemata) if includer else []
        command = command[:1] + ["-iquote", str(place.parent)] + command[1:]
        found = cpp_schemata.Schemata(original, {}, {})
        while kept_mutants:
            found = cpp_schemata.schemata(rel, original, kept_mutants, first_id)
            place.write_text(found.text)
            done = subprocess.run(command, input=(ws.src / includer).read_text(), capture_output=True, text=True,
                                  cwd=ws.build)
            if done.returncode == 0:
                break
            bad = cpp_schemata.error_lines(done.stderr, str(place))
            culprits = {m.key for m in kept_mutants
                        if any(m.line - cpp_schemata.NEAR <= line <= m.line + m.lines_replaced + cpp_schemata.NEAR
                               for line in bad)} or {m.key for m in kept_mutants}
            for key in culprits:
                left[key] = "its schemata form does not compile (CompileError in the schemata build)"
            kept_mutants = [m for m in kept_mutants if m.key not in culprits]
        if not kept_mutants:
            found = cpp_schemata.Schemata(original, {}, {})
        found.left_out = {**found.left_out, **left}
        for key in found.left_out:
            found.ids.pop(key, None)
        return found

    return kept_check(ws, [rel, original, sorted(m.key for m in mine), first_id], check)


def folder_files(rel: str, suffixes: tuple[str, ...]) -> list[str]:
    """The tree's files of `rel`'s folder (not below it) ending in `suffixes`."""
    folder = pathlib.PurePosixPath(rel).parent
    return [f for f in mutants.tree_files() if pathlib.PurePosixPath(f).parent == folder and f.endswith(suffixes)]


def headers_digest() -> str:
    """A digest of the reference's headers as the working tree has them: what
    a compile check reads besides its file (and the compile command, and
    LibTorch's headers, which the command's paths name). A change of
    another source file keeps every other file's check."""
    digest = hashlib.sha1()
    for rel in sorted(mutants.tree_files()):
        if rel.startswith("reference/") and rel.endswith(".h") and (mutants.ROOT / rel).is_file():
            digest.update(rel.encode() + b"\0" + (mutants.ROOT / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def compile_checked(ws: Workspace, rel: str, original: str, mine: list[Mutant], command: list[str],
            first_id: int) -> cpp_schemata.Schemata:
    """cpp_schemata.compile_check of a file's mutants, kept (kept_check)."""
    return kept_check(ws, [rel, original, sorted(m.key for m in mine), first_id, command],
                      lambda: cpp_schemata.compile_check(rel, original, mine, command, "<stdin>", first_id,
                                                         cwd=ws.build))


def kept_check(ws: Workspace, depends_on: list, check) -> cpp_schemata.Schemata:
    """`check()`'s schemata of a file, kept in the workspace's CHECKS by a
    digest of everything it depends on (`depends_on`: the file, the mutants
    and their ids, the compile command; and the checker's own code and the
    reference's headers, headers_digest) so that a resumed run, or one after
    a change of another file, does not check it again."""
    checker = pathlib.Path(cpp_schemata.__file__).read_text() + pathlib.Path(__file__).read_text()
    digest = hashlib.sha256(json.dumps([*depends_on, checker, headers_digest()]).encode()).hexdigest()
    kept = ws.root / CHECKS / f"{digest[:32]}.json"
    if kept.exists():
        found = json.loads(kept.read_text())
        return cpp_schemata.Schemata(found["text"], found["ids"], found["left_out"], found["probes"])
    found = check()
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({"text": found.text, "ids": found.ids, "left_out": found.left_out,
                                "probes": found.probes}))
    return found
