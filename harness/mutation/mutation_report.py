"""The records of a generated-mutant run as a mutation-testing report: the
JSON format of Stryker's mutation-testing-report-schema (schema/), which
Stryker, PIT's plugin and cosmic-ray write and their viewers read.

    python -m harness.mutation.mutation_report validate REPORT.json ...
    python -m harness.mutation.mutation_report convert OLD.jsonl|OLD.json -o REPORT.json [--html DIR]
    python -m harness.mutation.mutation_report merge SHARD.json ... -o REPORT.json [--html DIR]
    python -m harness.mutation.mutation_report html REPORT.json -o DIR

One file entry per mutated source file (its text as the run saw it), one
mutant result per mutant: id (mutagen_core's stable key), mutatorName (the
operator), description (what it changes), replacement and location (the
smallest span of the line that differs), status, killedBy, coveredBy,
testsCompleted, duration. The schema lets a mutant result hold more: what
the figures need beyond it (which suite killed, the reference's own tests'
verdict, the tree it ran at, the digests the incremental mode compares) is
under `nativeRegistry`. Outcomes and reports convert both ways
(outcomes_of), and load() reads the older records too (one Outcome per JSON
line, or a report's {"figures", "mutants"}), so every figure comes from
records alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import html
import gzip
import json
import os
import pathlib
import platform
import sys

from .mutant_records import Outcome

SCHEMA = pathlib.Path(__file__).parent / "schema" / "mutation-testing-report-schema.json"
SCHEMA_VERSION = "2"
EXTRA = "nativeRegistry"  # our fields beside the schema's, on each mutant and the report
# Stryker's defaults: the viewer colours a file's score by them.
THRESHOLDS = {"high": 90, "low": 70}
# Outcome fields the schema's own fields carry; the rest go under EXTRA.
_IN_SCHEMA = ("key", "kind", "change", "failing", "covered_by", "tests_completed")

LANGUAGES = {".py": "python", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp"}


# ---- one mutant ------------------------------------------------------------------------

def span(original: str, mutated: str) -> tuple[int, int, str]:
    """The part of `original` a mutant replaces, as 0-based [start, end)
    offsets, and its replacement: the line less the longest common prefix
    and suffix."""
    prefix = 0
    while prefix < min(len(original), len(mutated)) and original[prefix] == mutated[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(original), len(mutated)) - prefix
           and original[-1 - suffix] == mutated[-1 - suffix]):
        suffix += 1
    # Widened to whole tokens: `==` -> `!=` replaces `==`, not `=` by `!`.
    def joined(a: str, b: str) -> bool:
        return any(a in chars and b in chars for chars in (_WORD, _OPERATOR))
    while prefix > 0 and (joined(original[prefix - 1], original[prefix:prefix + 1] or " ")
                          or joined(mutated[prefix - 1], mutated[prefix:prefix + 1] or " ")):
        prefix -= 1
    while suffix > 0 and (joined(original[-suffix], original[-suffix - 1:len(original) - suffix] or " ")
                          or joined(mutated[-suffix], mutated[-suffix - 1:len(mutated) - suffix] or " ")):
        suffix -= 1
    return prefix, len(original) - suffix, mutated[prefix:len(mutated) - suffix]


_WORD = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_OPERATOR = set("=!<>&|+-*/%^~")


def line_of(o: Outcome) -> int:
    return int(o.where.rsplit(":", 1)[1])


def file_of(o: Outcome) -> str:
    return o.where.rsplit(":", 1)[0]


def status_of(o: Outcome, equivalents: dict[str, str]) -> tuple[str, str]:
    """The schema's status of an outcome, and its reason ('' for none)."""
    if o.verdict == "killed":
        if o.failing == ["<timeout>"]:
            return "Timeout", f"{o.killed_by}: past its time limit"
        crashed = [t for t in o.failing if t.startswith("<")]
        return "Killed", f"{o.killed_by}: " + (", ".join(crashed) if crashed else ", ".join(o.failing[:5]))
    if o.verdict == "survived":
        if o.key in equivalents:
            return "Ignored", f"reviewed equivalent: {equivalents[o.key]}"
        return "Survived", ("the reference's own tests kill it: " + ", ".join(o.own_failing[:5])
                            if o.own_tests == "killed" else "")
    if o.verdict == "stillborn":
        return "CompileError", o.output_tail
    if o.verdict == "nocoverage":
        return "NoCoverage", ("no conformance test executes its line; the reference's own tests kill it: "
                              + ", ".join(o.own_failing[:5]) if o.own_tests == "killed" else
                              "no test of the pristine run executes its line")
    if o.verdict == "error":
        return "RuntimeError", o.output_tail
    return "Pending", ""


VERDICTS = {"Killed": "killed", "Timeout": "killed", "Survived": "survived", "Ignored": "survived",
            "CompileError": "stillborn", "NoCoverage": "nocoverage", "RuntimeError": "error", "Pending": ""}


def killed_by(failing: list[str]) -> list[str]:
    """The failing tests, once each: a suite run names a test both fully (its
    JUnit report) and by its function alone (the conformance report's rows);
    the bare name goes where the full one is there."""
    return [t for t in failing if not any(o != t and (o.endswith("." + t) or o.endswith("::" + t))
                                          for o in failing)]


def mutant_result(o: Outcome, equivalents: dict[str, str], source_line: str | None) -> dict:
    """The schema's MutantResult of an outcome. Its columns are those of
    `source_line` (the file's line as the report holds it) when that line is
    the mutant's; else of the outcome's own (stripped) line."""
    indent = 0
    if source_line is not None and source_line.strip() == o.original:
        indent = len(source_line) - len(source_line.lstrip())
    start, end, replacement = span(o.original, o.mutated)
    line = line_of(o)
    status, reason = status_of(o, equivalents)
    result = {
        "id": o.key, "mutatorName": o.kind, "description": o.change, "replacement": replacement,
        "location": {"start": {"line": line, "column": indent + start + 1},
                     "end": {"line": line, "column": indent + max(end, start) + 1}},
        "status": status,
    }
    if reason:
        result["statusReason"] = reason
    if o.verdict == "killed":
        result["killedBy"] = killed_by(o.failing)
    if o.covered_by:
        result["coveredBy"] = list(o.covered_by)
    if o.tests_completed >= 0:
        result["testsCompleted"] = o.tests_completed
    if "total" in o.seconds:
        result["duration"] = round(1000 * o.seconds["total"], 1)
    result[EXTRA] = {k: v for k, v in dataclasses.asdict(o).items() if k not in _IN_SCHEMA}
    return result


def outcome_of(result: dict) -> Outcome:
    """The Outcome a MutantResult records (the inverse of mutant_result)."""
    extra = dict(result.get(EXTRA, {}))
    known = {f.name for f in dataclasses.fields(Outcome)}
    extra = {k: v for k, v in extra.items() if k in known}
    extra.setdefault("verdict", VERDICTS[result["status"]])
    for name in ("where", "original", "mutated"):  # outcomes_of fills them for another tool's report
        extra.setdefault(name, "")
    return Outcome(key=result["id"], kind=result["mutatorName"], change=result.get("description", ""),
                   failing=list(result.get("killedBy", [])), covered_by=list(result.get("coveredBy", [])),
                   tests_completed=int(result.get("testsCompleted", -1)), **extra)


# ---- a report --------------------------------------------------------------------------

def test_file_of(test: str) -> str:
    """The test file (pytest) or test suite (GoogleTest) a test id belongs to;
    markers such as '<timeout>' belong to none."""
    if "::" in test:
        return test.split("::", 1)[0]
    return test.rsplit(".", 1)[0] if "." in test else test


def report(outcomes: list[Outcome], equivalents: dict[str, str], sources: dict[str, str],
           config: dict | None = None, tests: list[str] = ()) -> dict:
    """The report of `outcomes`: one entry per file of `sources` (path ->
    its text at the run; a file with outcomes but no text gets the
    outcomes' lines), the test files of `tests` and of every killing or
    covering test."""
    by_file: dict[str, list[Outcome]] = {rel: [] for rel in sources}
    for o in outcomes:
        by_file.setdefault(file_of(o), []).append(o)
    files = {}
    for rel, found in sorted(by_file.items()):
        text = sources.get(rel)
        lines = text.split("\n") if text is not None else []
        if text is None:  # a file the report has no text of: its mutants' lines stand for it
            width = max([line_of(o) for o in found], default=0)
            lines = [""] * width
            for o in found:
                lines[line_of(o) - 1] = o.original
            text = "\n".join(lines)
        files[rel] = {"language": LANGUAGES.get(pathlib.Path(rel).suffix, "text"), "source": text,
                      "mutants": [mutant_result(o, equivalents, lines[line_of(o) - 1]
                                                if line_of(o) <= len(lines) else None)
                                  for o in sorted(found, key=lambda o: (line_of(o), o.key))]}
    every_test = set(tests)
    for entry in files.values():
        for m in entry["mutants"]:
            every_test.update(t for t in m.get("killedBy", []) + m.get("coveredBy", []) if not t.startswith("<"))
    test_files: dict[str, dict] = {}
    for test in sorted(every_test):
        test_files.setdefault(test_file_of(test), {"tests": []})["tests"].append({"id": test, "name": test})
    return {
        "schemaVersion": SCHEMA_VERSION, "thresholds": dict(THRESHOLDS), "files": files,
        "testFiles": test_files, "projectRoot": "",
        "framework": {"name": "native_registry harness/mutation"},
        "system": {"ci": bool(os.environ.get("CI")), "os": {"platform": sys.platform,
                                                             "version": platform.release()},
                   "cpu": {"logicalCores": os.cpu_count() or 1}},
        "config": {"written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   **(config or {})},
    }


def validate(document: dict) -> None:
    """Raises ValueError naming the first place `document` breaks the schema,
    or where two mutants share an id (the schema cannot say it)."""
    import jsonschema  # only where reports are written or read: ci/setup installs it

    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(document), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(the report)"
        raise ValueError(f"not a mutation-testing report: at {where}: {errors[0].message}"
                         + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    seen: dict[str, str] = {}
    for rel, entry in document["files"].items():
        for m in entry["mutants"]:
            if m["id"] in seen:
                raise ValueError(f"mutant id {m['id']!r} twice (in {seen[m['id']]} and {rel})")
            seen[m["id"]] = rel


def outcomes_of(document: dict) -> list[Outcome]:
    found = []
    for rel, entry in document["files"].items():
        for m in entry["mutants"]:
            o = outcome_of(m)
            if not o.where:  # a report of another tool: its place and lines from the schema's fields
                line = m["location"]["start"]["line"]
                text = entry["source"].split("\n")[line - 1] if line <= len(entry["source"].split("\n")) else ""
                start, end = m["location"]["start"]["column"] - 1, m["location"]["end"]["column"] - 1
                o.where, o.original = f"{rel}:{line}", text.strip()
                o.mutated = (text[:start] + m.get("replacement", "") + text[end:]).strip()
            found.append(o)
    return found


def equivalents_of(document: dict) -> dict[str, str]:
    """The reviewed equivalents a report records (status Ignored): id -> reason."""
    return {m["id"]: m.get("statusReason", "").removeprefix("reviewed equivalent: ")
            for entry in document["files"].values() for m in entry["mutants"] if m["status"] == "Ignored"}


def load_document(path: pathlib.Path) -> dict | None:
    """The report at `path`, validated; None when it holds the older records."""
    if path.suffix != ".json":
        return None
    document = json.loads(path.read_text())
    if "schemaVersion" not in document:
        return None
    try:
        validate(document)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return document


def load(path: pathlib.Path) -> list[Outcome]:
    """The outcomes recorded at `path`: a report, or the older records (one
    Outcome per JSON line, or a report.json's {"figures", "mutants"})."""
    document = load_document(path)
    if document is not None:
        return outcomes_of(document)
    if path.suffix == ".json":
        return [Outcome(**o) for o in json.loads(path.read_text())["mutants"]]
    # A journal committed compressed (doc/mutant-records/*.jsonl.gz).
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [Outcome(**json.loads(line)) for line in text.splitlines() if line.strip()]


def merge(documents: list[dict]) -> dict:
    """One report of several (shards of one run, or runs of other files): a
    mutant in two must have the same status there, else the merge stops
    naming it; a file's text must be the same in each."""
    merged: dict = {**documents[0], "files": {}, "testFiles": {}}
    merged["config"] = {**documents[0].get("config", {}),
                        "merged": [d.get("config", {}) for d in documents]}
    where: dict[str, dict] = {}
    for d in documents:
        for rel, entry in d["files"].items():
            into = merged["files"].setdefault(rel, {**entry, "mutants": []})
            if into["source"] != entry["source"]:
                raise ValueError(f"cannot merge: {rel} has another text in one of the reports "
                                 f"(reports of different trees)")
            for m in entry["mutants"]:
                if m["id"] in where:
                    if where[m["id"]]["status"] != m["status"]:
                        raise ValueError(f"cannot merge: mutant {m['id']!r} is {where[m['id']]['status']} "
                                         f"in one report and {m['status']} in another")
                    continue
                where[m["id"]] = m
                into["mutants"].append(m)
        for name, entry in d.get("testFiles", {}).items():
            into = merged["testFiles"].setdefault(name, {"tests": []})
            known = {t["id"] for t in into["tests"]}
            into["tests"] += [t for t in entry["tests"] if t["id"] not in known]
    for entry in merged["files"].values():
        entry["mutants"].sort(key=lambda m: (m["location"]["start"]["line"], m["id"]))
    validate(merged)
    return merged


# Set where jsonschema cannot be installed (the lent GPU machine: no network,
# no pip): a report is then written unvalidated, saying so, rather than lost
# at the end of a run. Every read still validates.
UNVALIDATED = "NR_REPORTS_UNVALIDATED"


def write(document: dict, path: pathlib.Path) -> None:
    try:
        validate(document)
    except ModuleNotFoundError as missing:
        if os.environ.get(UNVALIDATED) != "1":
            raise
        print(f"  {path.name}: written without validation ({missing.name} is not installed here; "
              f"{UNVALIDATED}=1)", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")


# ---- the incremental mode's digests ----------------------------------------------------

def digest(*texts: str) -> str:
    h = hashlib.sha1()
    for t in texts:
        h.update(t.encode() + b"\0")
    return h.hexdigest()[:16]


def tests_digest(files: list[pathlib.Path]) -> str:
    """A digest of the sources of the test files a mutant's verdict depends on."""
    return digest(*(f"{f.name}\0{f.read_text() if f.is_file() else ''}" for f in sorted(files)))


# ---- HTML ------------------------------------------------------------------------------

STYLE = """body{font-family:sans-serif;margin:1.5em}pre{margin:0}table{border-collapse:collapse}
td{vertical-align:top;padding:0 .5em}td.n{color:#888;text-align:right}
.Killed,.Timeout{background:#dfd}.Survived{background:#fcc}.NoCoverage{background:#fec}
.CompileError,.RuntimeError{background:#ddd}.Ignored{background:#eef}.Pending{background:#fff}
ul.m{margin:0 0 .3em 0;padding-left:1.2em;font-size:90%}code{background:#f4f4f4}"""

ORDER = ("Survived", "NoCoverage", "Killed", "Timeout", "Ignored", "CompileError", "RuntimeError", "Pending")


def counts_of(mutants: list[dict]) -> dict[str, int]:
    return {s: n for s in ORDER if (n := sum(m["status"] == s for m in mutants))}


def file_page(rel: str, entry: dict) -> str:
    """One file's text, each mutant under its line, coloured by status."""
    at: dict[int, list[dict]] = {}
    for m in entry["mutants"]:
        at.setdefault(m["location"]["start"]["line"], []).append(m)
    rows = []
    for number, text in enumerate(entry["source"].split("\n"), 1):
        here = at.get(number, [])
        worst = next((s for s in ORDER if any(m["status"] == s for m in here)), "")
        listed = "".join(
            f"<li class='{m['status']}' id='{html.escape(m['id'])}'><b>{m['status']}</b> "
            f"{html.escape(m['mutatorName'])}: <code>{html.escape(m.get('description', ''))}</code> "
            f"(cols {m['location']['start']['column']}-{m['location']['end']['column']} "
            f"&rarr; <code>{html.escape(m.get('replacement', ''))}</code>)"
            + (f" by {html.escape(', '.join(m['killedBy'][:3]))}" if m.get("killedBy") else "")
            + (f"<br>{html.escape(m['statusReason'][:300])}" if m.get("statusReason") else "") + "</li>"
            for m in here)
        rows.append(f"<tr class='{worst}'><td class='n' id='L{number}'>{number}</td>"
                    f"<td><pre>{html.escape(text)}</pre>" + (f"<ul class='m'>{listed}</ul>" if listed else "")
                    + "</td></tr>")
    summary = ", ".join(f"{n} {s}" for s, n in counts_of(entry["mutants"]).items()) or "no mutants"
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(rel)}</title><style>{STYLE}</style>"
            f"<p><a href='index.html'>all files</a></p><h1>{html.escape(rel)}</h1><p>{summary}</p>"
            f"<table>{''.join(rows)}</table>")


def page_name(rel: str) -> str:
    return rel.replace("/", "__") + ".html"


def write_html(document: dict, out: pathlib.Path) -> list[pathlib.Path]:
    """index.html (per file its counts) and a page per file; the pages written."""
    out.mkdir(parents=True, exist_ok=True)
    written, rows = [], []
    for rel, entry in sorted(document["files"].items()):
        page = out / page_name(rel)
        page.write_text(file_page(rel, entry))
        written.append(page)
        counts = counts_of(entry["mutants"])
        rows.append(f"<tr><td><a href='{page.name}'>{html.escape(rel)}</a></td><td>{len(entry['mutants'])}</td>"
                    + "".join(f"<td class='{s}'>{counts.get(s, 0)}</td>" for s in ORDER) + "</tr>")
    head = "".join(f"<th>{s}</th>" for s in ORDER)
    index = out / "index.html"
    index.write_text(f"<!doctype html><meta charset='utf-8'><title>Mutants</title><style>{STYLE}</style>"
                     f"<h1>Mutants</h1><table><tr><th>file</th><th>mutants</th>{head}</tr>{''.join(rows)}</table>")
    return [index, *written]


# ---- the command line ------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.mutation.mutation_report",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check reports against the schema")
    v.add_argument("reports", nargs="+", type=pathlib.Path)
    c = sub.add_parser("convert", help="the older records (.jsonl, or a report's .json) as a report")
    c.add_argument("records", type=pathlib.Path)
    m = sub.add_parser("merge", help="one report of several (shards of a run)")
    m.add_argument("reports", nargs="+", type=pathlib.Path)
    h = sub.add_parser("html", help="a page per file, each mutant at its line")
    h.add_argument("report", type=pathlib.Path)
    for q in (c, m, h):
        q.add_argument("-o", "--output", type=pathlib.Path, required=True)
    for q in (c, m):
        q.add_argument("--html", type=pathlib.Path, default=None, metavar="DIR")
    args = p.parse_args(argv)
    try:
        if args.command == "validate":
            for path in args.reports:
                if load_document(path) is None:
                    raise ValueError(f"{path}: not a mutation-testing report (no schemaVersion)")
                print(f"{path}: valid")
            return 0
        if args.command == "html":
            document = load_document(args.report)
            if document is None:
                raise ValueError(f"{args.report}: not a mutation-testing report (convert it first)")
            print(f"{len(write_html(document, args.output))} pages in {args.output}")
            return 0
        if args.command == "convert":
            from .. import ROOT
            from .mutant_records import load_equivalents
            outcomes = load(args.records)
            files = sorted({file_of(o) for o in outcomes})
            sources = {rel: (ROOT / rel).read_text() for rel in files if (ROOT / rel).is_file()}
            document = report(outcomes, load_equivalents(), sources,
                              {"converted_from": str(args.records)})
        else:
            documents = []
            for path in args.reports:
                d = load_document(path)
                if d is None:
                    raise ValueError(f"{path}: not a mutation-testing report (convert it first)")
                documents.append(d)
            document = merge(documents)
        write(document, args.output)
        count = sum(len(e["mutants"]) for e in document["files"].values())
        print(f"{args.output}: {count} mutants in {len(document['files'])} files")
        if args.html is not None:
            print(f"{len(write_html(document, args.html))} pages in {args.html}")
        return 0
    except (ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"mutation_report: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
