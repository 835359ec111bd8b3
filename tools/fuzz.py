"""Fuzz the front ends and the server: random GBNF, schemas, regexes and HTTP requests.

Run: ``nice -n 10 python tools/fuzz.py --minutes 10 [--seed N] [--targets gbnf,regex,schema,http]
[--case-timeout S] [--report report.json]``.

Hypothesis draws the cases (:mod:`fuzzing.strategies`): well-formed input, near misses and
noise, deep nesting, huge enums, schemas from the draft-07 metaschema. GBNF text is linted,
compiled, printed back and followed byte by byte and token by token; schemas are converted,
compiled and their grammar's own texts validated; regexes are compared with Python's ``re``;
HTTP requests go to a ``structspec serve`` process with the bundled demo models. Each target
gets a share of the time (``SHARES``: the slower cases get more), in batches of cases with
seeds derived from ``--seed``, so a run is reproducible up to timing.

Findings: a traceback (any exception but the documented ``GrammarError``, ``SchemaError`` and
``RegexError``), a leaked warning, an inconsistency between two parts of structspec, a case that
outlives ``--case-timeout`` (a hang), a dead worker or server, and for HTTP a 500, an error
without the OpenAI-style body, a reset connection or a traceback in the server log. The report
lists each kind of finding once, with its count and the smallest case that showed it; the exit
status is 1 when there is any.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzing import strategies
from fuzzing.worker import Outcome, Worker

TARGETS = ("gbnf", "regex", "schema", "http")
SHARES = {"gbnf": 2, "regex": 1, "schema": 3, "http": 4}  # of the run time: the slow cases get more
BATCH = 20
CASES = {
    "gbnf": st.tuples(strategies.GBNF, strategies.PROBES),
    "regex": st.tuples(strategies.REGEX, st.lists(strategies.PROBES.filter(lambda p: isinstance(p, str)), max_size=8)),
    "schema": st.tuples(
        st.one_of(strategies.SCHEMAS, strategies.SCHEMAS, strategies.SCHEMA_TEXTS),
        st.booleans(),
        st.sampled_from(["compact", "flexible"]),
        st.sampled_from(["schema", "any"]),
        st.just(4),
    ),
    "http": strategies.REQUESTS,
}


@dataclass
class Finding:
    """One kind of failure: how often it was seen and the smallest case that showed it."""

    target: str
    kind: str
    signature: str
    detail: str
    case: Any
    count: int = 0


@dataclass
class Tally:
    """Cases and outcomes per target, and the findings."""

    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, target: str, case: Any, outcome: Outcome) -> None:
        self.outcomes.setdefault(target, Counter())[outcome.detail if outcome.kind == "ok" else outcome.kind] += 1
        problems = [] if outcome.kind == "ok" else [(outcome.kind, outcome.detail)]
        problems += [("warning", text) for text in outcome.warnings]
        for kind, detail in problems:
            key = (target, kind, signature(kind, detail))
            finding = self.findings.setdefault(key, Finding(target, kind, key[2], detail, case))
            finding.count += 1
            if len(_shown(case)) < len(_shown(finding.case)):
                finding.case, finding.detail = case, detail

    def problems(self) -> int:
        return sum(f.count for f in self.findings.values())


def signature(kind: str, detail: str) -> str:
    """What makes two findings the same: the exception and where it was raised, or the first line."""
    if kind == "traceback":
        lines = [line for line in detail.strip().splitlines() if line.strip()]
        where = next((line.strip() for line in reversed(lines) if line.strip().startswith("File ")), "")
        return f"{lines[-1].split(':')[0]} at {where}"
    if kind in ("http 500", "bad error body"):
        return detail.split(":")[0] + " " + detail[detail.find("{") : detail.find("{") + 80]
    return detail.splitlines()[0][:120] if detail else kind


def _shown(case: Any) -> str:
    if isinstance(case, tuple) and len(case) == 3 and isinstance(case[1], bytes):  # an HTTP request
        from fuzzing.http import describe

        return json.dumps(describe(*case), default=repr, ensure_ascii=False)
    return json.dumps(case, default=repr, ensure_ascii=False)


def fuzz(
    targets: list[str],
    *,
    seconds: float | None = None,
    batches: int | None = None,
    batch_size: int = BATCH,
    base_seed: int = 0,
    case_timeout: float = 60.0,
    log: Callable[[str], None] = lambda line: None,
) -> Tally:
    """Run every target for its share of ``seconds``, or for ``batches`` batches each."""
    tally = Tally()
    worker = Worker() if set(targets) - {"http"} else None
    server = None
    try:
        for index, target in enumerate(targets):
            if target == "http":
                from fuzzing.http import Server

                server = Server(Path(tempfile.mkdtemp(prefix="structspec-fuzz-")) / "server.log",
                                compile_timeout=case_timeout / 3)
                run: Callable[[Any], Outcome] = functools.partial(_http_case, server, case_timeout)
            else:
                run = functools.partial(_worker_case, worker, target, case_timeout)
            started = time.monotonic()
            end = math.inf if seconds is None else started + seconds * SHARES[target] / sum(SHARES[t] for t in targets)
            batch = 0
            while time.monotonic() < end and (batches is None or batch < batches):
                _batch(target, run, tally, base_seed * 1_000_003 + index * 10_007 + batch, end, batch_size)
                batch += 1
            tally.seconds[target] = time.monotonic() - started
            log(f"{target}: {sum(tally.outcomes.get(target, Counter()).values())} cases in "
                f"{tally.seconds[target]:.0f} s, {sum(f.count for f in tally.findings.values() if f.target == target)} "
                "findings")
    finally:
        if worker is not None:
            worker.close()
        if server is not None:
            server.close()
    return tally


def _http_case(server: Any, timeout: float, case: Any) -> Outcome:
    return server.run(*case, timeout=timeout)


def _worker_case(worker: Worker, target: str, timeout: float, case: Any) -> Outcome:
    return worker.run(target, case, timeout)


def _batch(target: str, run: Callable[[Any], Outcome], tally: Tally, batch_seed: int, end: float, size: int) -> None:
    @seed(batch_seed)
    @settings(max_examples=size, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(CASES[target])
    def one(case: Any) -> None:
        if time.monotonic() < end:
            tally.add(target, case, run(case))

    one()


def report(tally: Tally, minutes: float, base_seed: int) -> dict[str, Any]:
    """The run as JSON: per target cases, outcomes and time; the findings with reproducers."""
    kinds = Counter()
    for finding in tally.findings.values():
        kinds[finding.kind] += finding.count
    return {
        "minutes": minutes,
        "seed": base_seed,
        "targets": {
            target: {"cases": sum(counts.values()), "seconds": round(tally.seconds.get(target, 0.0)),
                     "outcomes": dict(counts.most_common())}
            for target, counts in tally.outcomes.items()
        },
        "totals": {kind: kinds.get(kind, 0) for kind in
                   ("traceback", "http 500", "hang", "crash", "inconsistent", "warning", "bad error body", "reset")},
        "findings": [
            {"target": f.target, "kind": f.kind, "count": f.count, "signature": f.signature,
             "detail": f.detail[-3000:], "case": _shown(f.case)[:1_000_000]}
            for f in sorted(tally.findings.values(), key=lambda f: (f.target, f.kind, -f.count))
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="total run time (default: 10)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the case batches (default: 0)")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {TARGETS}")
    parser.add_argument("--case-timeout", type=float, default=60.0,
                        help="seconds before a case is a hang (default: 60)")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    tally = fuzz(targets, seconds=args.minutes * 60, base_seed=args.seed, case_timeout=args.case_timeout,
                 log=lambda line: print(line, file=sys.stderr))
    result = report(tally, args.minutes, args.seed)
    if args.report:
        args.report.write_text(json.dumps(result, indent=2))  # ASCII: cases hold lone surrogates
    print(json.dumps({key: result[key] for key in ("targets", "totals")}, indent=2))
    for finding in result["findings"]:
        text = (f"\n[{finding['target']}] {finding['kind']} x{finding['count']}: {finding['signature']}\n"
                f"  case: {finding['case'][:600]}\n  {finding['detail'][-1500:]}")
        print(text.encode("utf-8", "backslashreplace").decode("utf-8"))
    return 1 if tally.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
