"""How exactly structspec's JSON Schema grammars match real validators.

Two suites, both read in place from the shared assets:

    python tools/conformance.py                      # JSON-Schema-Test-Suite draft2020-12
    python tools/conformance.py --optional           # ... plus its optional/ files
    python tools/conformance.py --maskbench --sample 300 --seed 0 [--peers]

Suite mode: for every test group whose schema compiles, the grammar's verdict on the compact
serialization of each test's data is compared with the suite's ``valid``; it prints compiled %
and agreement % overall and per keyword file. MaskBench mode prints, per subset, schemas
compiled %, valid instances accepted %, invalid instances rejected %, and the unsound count:
accepted instances that ``jsonschema`` (with format checking) rejects. With ``--peers`` the
peer engines of ``tools/peers`` (the ``bench`` extra) run on the same cases side by side, and
an ``ALL COMPILE`` row compares them over the schemas every engine compiles.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _assets import compact_json, load_case, maskbench_files, require_assets, stratified_sample

from structspec.errors import SchemaError
from structspec.grammar import Grammar

SUITE = Path("json-schema-test-suite") / "tests" / "draft2020-12"
TIMEOUT_S = 20


@dataclass
class Outcome:
    """What one engine did with one schema and its instances."""

    group: str
    compiled: bool
    reason: str = ""
    verdicts: list[tuple[bool, bool, bool]] = field(default_factory=list)  # (expected, got, referee)


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def referee(schema: Any) -> Any:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


Job = tuple[str, Any, list[tuple[Any, bool]], dict[str, Any]]
"""(group, schema, [(instance, valid)], keyword arguments of ``Grammar.from_json_schema``)"""


def check(job: Job) -> Outcome:
    """Compile one schema with structspec and judge its instances (runs in a worker)."""
    group, schema, tests, options = job
    signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, TIMEOUT_S)  # CPU time: the verdict does not depend on the load
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = Grammar.from_json_schema(schema, **options)
        outcome = Outcome(group, True)
        judge = referee(schema)
        for data, valid in tests:
            got = grammar.matches(compact_json(data))
            try:
                ref = judge.is_valid(data)
            except Exception:  # the referee itself fails on some schemas
                ref = valid
            outcome.verdicts.append((valid, got, ref))
        return outcome
    except SchemaError as exc:
        return Outcome(group, False, f"{exc.keyword or 'schema'}: {exc.message}"[:160])
    except _Timeout:
        return Outcome(group, False, f"timeout after {TIMEOUT_S}s of CPU time")
    except RecursionError:
        return Outcome(group, False, "recursion limit")
    except Exception as exc:  # report, never crash the sweep
        return Outcome(group, False, f"CRASH {type(exc).__name__}: {exc}"[:160])
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def run_jobs(jobs: list[Job], workers: int) -> list[Outcome]:
    if workers <= 1:
        return [check(job) for job in jobs]
    with multiprocessing.Pool(workers) as pool:
        return pool.map(check, jobs, chunksize=4)


# -- JSON-Schema-Test-Suite ---------------------------------------------------------------------


def suite_jobs(root: Path, optional: bool, options: dict[str, Any]) -> list[Job]:
    files = sorted(root.glob("*.json"))
    if optional:
        files += sorted((root / "optional").rglob("*.json"))
    jobs = []
    for path in files:
        label = str(path.relative_to(root).with_suffix(""))
        for case in json.loads(path.read_text(encoding="utf-8")):
            tests = [(t["data"], bool(t["valid"])) for t in case["tests"]]
            jobs.append((f"{label}::{case['description']}", case["schema"], tests, options))
    return jobs


def report_suite(outcomes: list[Outcome], verbose: bool) -> None:
    per_file: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        per_file[o.group.split("::")[0]].append(o)
    print(f"{'file':<40} {'schemas':>8} {'compiled':>9} {'tests':>6} {'agree':>7} {'unsound':>8}")
    totals = [0, 0, 0, 0, 0]
    for name, items in sorted(per_file.items()):
        row = _suite_row(items)
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(_format_suite(name, row))
    print(_format_suite("TOTAL", totals))
    if verbose:
        for o in outcomes:
            if not o.compiled:
                print(f"  not compiled: {o.group}: {o.reason}")
            for expected, got, _ in o.verdicts:
                if expected != got:
                    print(f"  disagree: {o.group}: expected {expected}, grammar {got}")


def _suite_row(items: list[Outcome]) -> list[int]:
    compiled = [o for o in items if o.compiled]
    tests = [v for o in compiled for v in o.verdicts]
    agree = sum(1 for e, g, _ in tests if e == g)
    unsound = sum(1 for _, g, r in tests if g and not r)
    return [len(items), len(compiled), len(tests), agree, unsound]


def _format_suite(name: str, row: list[int]) -> str:
    schemas, compiled, tests, agree, unsound = row
    return f"{name:<40} {schemas:>8} {_pct(compiled, schemas):>9} {tests:>6} {_pct(agree, tests):>7} {unsound:>8}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


# -- MaskBench ------------------------------------------------------------------------------------


def maskbench_jobs(files: list[Path], options: dict[str, Any]) -> list[Job]:
    jobs = []
    for path in files:
        case = load_case(path)
        tests = [(i.data, i.valid) for i in case.instances]
        jobs.append((f"{case.subset}::{case.name}", case.schema, tests, options))
    return jobs


def maskbench_row(outcomes: list[Outcome]) -> dict[str, Any]:
    compiled = [o for o in outcomes if o.compiled]
    verdicts = [v for o in compiled for v in o.verdicts]
    valid = [g for e, g, _ in verdicts if e]
    invalid = [g for e, g, _ in verdicts if not e]
    return {
        "schemas": len(outcomes),
        "compiled": _pct(len(compiled), len(outcomes)),
        "valid_accepted": _pct(sum(valid), len(valid)),
        "invalid_rejected": _pct(sum(not g for g in invalid), len(invalid)),
        "unsound": sum(1 for _, g, r in verdicts if g and not r),
    }


def peer_outcomes(name: str, jobs: list[Job]) -> list[Outcome]:
    from _assets import tokenizer_dir
    from peers import PeerCompileError, make_peer, pin_single_thread

    pin_single_thread()
    peer = make_peer(name, tokenizer_dir("llama3"))
    out = []
    for group, schema, tests, _ in jobs:
        try:
            grammar = peer.compile_json_schema(schema)
        except PeerCompileError as exc:
            out.append(Outcome(group, False, exc.reason[:160]))
            continue
        except Exception as exc:
            out.append(Outcome(group, False, f"{type(exc).__name__}: {exc}"[:160]))
            continue
        outcome = Outcome(group, True)
        judge = referee(schema)
        for data, valid in tests:
            try:
                got = grammar.accepts_text(compact_json(data))
            except Exception:
                got = False
            try:
                ref = judge.is_valid(data)
            except Exception:
                ref = valid
            outcome.verdicts.append((valid, got, ref))
        out.append(outcome)
    return out


def report_maskbench(results: dict[str, list[Outcome]], verbose: bool) -> None:
    engines = list(results)
    subsets = sorted({o.group.split("::")[0] for o in results[engines[0]]})
    columns = ("compiled", "valid_accepted", "invalid_rejected", "unsound")
    header = f"{'subset':<18} {'n':>5} " + " ".join(f"{e[:22]:>22}" for e in engines)
    print("cells: compiled% / valid accepted% / invalid rejected% / unsound")
    print(header)
    everywhere = set.intersection(*({o.group for o in results[e] if o.compiled} for e in engines))
    rows = [*subsets, "TOTAL", "ALL COMPILE"] if len(engines) > 1 else [*subsets, "TOTAL"]
    for subset in rows:
        cells = []
        n = 0
        for engine in engines:
            items = [
                o
                for o in results[engine]
                if subset == "TOTAL"
                or (subset == "ALL COMPILE" and o.group in everywhere)
                or o.group.startswith(subset + "::")
            ]
            row = maskbench_row(items)
            n = row["schemas"]
            cells.append("/".join(str(row[c]) for c in columns))
        print(f"{subset:<18} {n:>5} " + " ".join(f"{c:>22}" for c in cells))
    if verbose:
        reasons: dict[str, int] = defaultdict(int)
        for o in results[engines[0]]:
            if not o.compiled:
                reasons[o.reason.split(":")[0] + ": " + o.reason.split(":", 1)[-1][:60]] += 1
            for e, g, r in o.verdicts:
                if g and not r:
                    print(f"  UNSOUND {o.group}")
                elif e and not g:
                    print(f"  valid rejected {o.group}")
        for reason, count in sorted(reasons.items(), key=lambda x: -x[1]):
            print(f"  {count:5d}  {reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--maskbench", action="store_true", help="run MaskBench instead of the test suite")
    parser.add_argument("--sample", type=int, default=0, help="MaskBench: stratified sample size (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="MaskBench: sample seed")
    parser.add_argument("--peers", action="store_true", help="MaskBench: also run the peer engines")
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="NAME",
        help="MaskBench: run only this peer (repeatable; implies --peers)",
    )
    parser.add_argument("--optional", action="store_true", help="suite: include optional/ files")
    parser.add_argument("--no-strict", action="store_true", help="approximate instead of refusing")
    parser.add_argument(
        "--property-order",
        choices=["schema", "any"],
        default="schema",
        help="declared properties in schema order (as generated) or in any order (as checked)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    assets = require_assets()
    options = {"strict": not args.no_strict, "property_order": args.property_order}
    if not args.maskbench:
        root = assets / SUITE
        report_suite(run_jobs(suite_jobs(root, args.optional, options), args.workers), args.verbose)
        return 0
    files = maskbench_files(assets)
    if args.sample:
        files = stratified_sample(files, args.sample, args.seed)
    jobs = maskbench_jobs(files, options)
    results = {"structspec": run_jobs(jobs, args.workers)}
    if args.peers or args.peer:
        try:
            from peers import available_peers
        except ImportError:  # tools/peers is optional
            available_peers = list  # type: ignore[assignment]
        for name in available_peers():
            if not args.peer or name in args.peer:
                results[name] = peer_outcomes(name, jobs)
    report_maskbench(results, args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
