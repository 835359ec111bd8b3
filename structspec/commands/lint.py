"""``structspec lint FILE...``: report every error and warning in GBNF grammars.

Findings print one per line as ``file:line:col: CODE message`` (or a JSON array with
``--format json``), followed by a one-line summary on stderr. Exit status: 0 when clean,
1 when there are errors (or warnings, with ``--strict``), 2 on a usage error or a file that
cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys

from structspec.grammar.gbnf.diagnostics import ERROR, WARNING, Diagnostic
from structspec.grammar.lint import lint_source

STDIN = "-"
STDIN_NAME = "<stdin>"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``lint`` sub-command."""
    parser = subparsers.add_parser(
        "lint",
        help="check GBNF grammars for errors and likely mistakes",
        description="Check GBNF grammars and report every error (E...) and warning (W...) found. "
        "Exit status: 0 clean, 1 findings, 2 usage error or unreadable file.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="GBNF files to check ('-' reads standard input)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 on warnings too")
    parser.add_argument("--root", default="root", metavar="NAME", help="start rule (default: root)")


def run(args: argparse.Namespace) -> int:
    """Lint every file named in ``args``; returns the exit status."""
    findings: list[tuple[str, Diagnostic]] = []
    unreadable = 0
    for path in args.files:
        text = _read(path)
        if text is None:
            unreadable += 1
            continue
        shown = STDIN_NAME if path == STDIN else path
        findings += [(shown, finding) for finding in lint_source(text, root=args.root)]
    _print_findings(findings, args.format)
    errors = sum(finding.severity == ERROR for _, finding in findings)
    warnings = sum(finding.severity == WARNING for _, finding in findings)
    print(_summary(errors, warnings, len(args.files), unreadable), file=sys.stderr)
    if unreadable:
        return 2
    return 1 if errors or (args.strict and warnings) else 0


def _read(path: str) -> str | None:
    """The file's text, or None after printing why it cannot be read."""
    try:
        if path == STDIN:
            return sys.stdin.buffer.read().decode("utf-8")
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        reason = exc.strerror or str(exc)
    except UnicodeDecodeError as exc:
        reason = f"not valid UTF-8 (byte {exc.start})"
    print(f"structspec lint: cannot read {STDIN_NAME if path == STDIN else path}: {reason}", file=sys.stderr)
    return None


def _print_findings(findings: list[tuple[str, Diagnostic]], output_format: str) -> None:
    if output_format == "json":
        records = [
            {"file": file, "line": d.line, "column": d.column, "code": d.code, "severity": d.severity,
             "message": d.message}
            for file, d in findings
        ]
        print(json.dumps(records, indent=2, ensure_ascii=False))
        return
    for file, d in findings:
        print(f"{file}:{d.line}:{d.column}: {d.code} {d.message}")


def _summary(errors: int, warnings: int, files: int, unreadable: int) -> str:
    checked = _plural(files - unreadable, "file")
    if errors or warnings:
        text = f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')} in {checked}"
    else:
        text = f"no problems in {checked}"
    if unreadable:
        text += f"; {_plural(unreadable, 'file')} could not be read"
    return text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
