"""``structspec batch``: every input record exactly once in the output, with its data or its
error; a rerun skips what is done; on Ray, a worker killed mid-job loses nothing.

The local job runs the CLI with the bundled demo target (no draft, short answers). The Ray job
runs a local Ray with 2 actors and kills one actor's process while the job runs (Ray is in the
dev extra; the test is skipped where it is not installed).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from structspec.batch.records import Output, read_records
from structspec.cli import main

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "email": {"type": "string", "maxLength": 32}},
          "required": ["name", "email"], "additionalProperties": False}


def _docs(tmp_path: Path, count: int) -> Path:
    lines = [json.dumps({"id": f"d{i}", "text": f"Reach Ada{i} Stone at ada{i}@example.com in Leeds."})
             for i in range(count)]
    lines.insert(2, json.dumps({"id": "no-text", "body": "x"}))
    lines.insert(4, "{not json")
    lines.insert(5, json.dumps({"text": "Write to Bo at bo@example.com."}))  # numbered by position
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")[:-1]]


def _job(tmp_path: Path, *extra: str) -> int:
    return main(["batch", "--schema", str(tmp_path / "schema.json"), "--input", str(tmp_path / "docs.jsonl"),
                 "--output", str(tmp_path / "out.jsonl"), "--no-draft", "--max-tokens", "48", "--max-batch", "4",
                 "--device", "cpu", *extra])


def test_every_record_once_with_data_or_error_and_a_rerun_skips_them(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _docs(tmp_path, 6)
    assert _job(tmp_path) == 1  # two bad documents
    rows = _lines(tmp_path / "out.jsonl")
    ids = [row["id"] for row in rows]
    assert sorted(map(str, ids)) == sorted(["d0", "d1", "d2", "d3", "d4", "d5", "no-text", "4", "5"])
    by_id = {row["id"]: row for row in rows}
    assert by_id["no-text"]["error"] == "bad document: line 3: field 'text' is missing"
    assert by_id[4]["error"].startswith("bad document: line 5: not valid JSON")
    for key in ("d0", "d5", 5):
        assert set(by_id[key]["data"]) == {"name", "email"}
    assert "9 records: 7 extracted, 2 errors, 0 done before" in capsys.readouterr().err
    assert _job(tmp_path) == 0
    assert _lines(tmp_path / "out.jsonl") == rows
    assert "9 records: 0 extracted, 0 errors, 9 done before" in capsys.readouterr().err


def test_a_run_cut_short_resumes_where_it_stopped(tmp_path: Path) -> None:
    _docs(tmp_path, 4)
    done = [{"id": "d0", "data": {"name": "x", "email": "y"}}, {"id": 4, "error": "bad document: earlier"}]
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(row) + "\n" for row in done) + '{"id": "d1", "da',
                                        encoding="utf-8")
    _job(tmp_path)
    rows = _lines(tmp_path / "out.jsonl")
    assert rows[:2] == done  # kept as they were; the line cut short is done again
    assert sorted(str(row["id"]) for row in rows) == sorted(["d0", "d1", "d2", "d3", "no-text", "4", "5"])


def test_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _docs(tmp_path, 2)
    with (tmp_path / "docs.jsonl").open("a") as docs:
        docs.write(json.dumps({"id": "d1", "text": "again"}) + "\n")
    assert _job(tmp_path) == 2
    assert "id 'd1' is used already by line 2" in capsys.readouterr().err
    (tmp_path / "docs.jsonl").rename(tmp_path / "gone.jsonl")
    assert _job(tmp_path) == 2
    assert f"error: cannot read input {tmp_path / 'docs.jsonl'}: No such file or directory\n" in capsys.readouterr().err
    (tmp_path / "gone.jsonl").rename(tmp_path / "docs.jsonl")
    (tmp_path / "schema.json").write_text('{"type": "object", "properties": {"a": {"type": "strin"}}}')
    assert _job(tmp_path) == 2
    assert "schema.json#/properties/a/type (type): S002 not a valid schema: " in capsys.readouterr().err  # as extract
    assert not (tmp_path / "out.jsonl").exists() or not _lines(tmp_path / "out.jsonl")


def test_grounded_values_copy_each_records_own_text(tmp_path: Path) -> None:
    _docs(tmp_path, 3)
    with (tmp_path / "docs.jsonl").open("a") as docs:
        docs.write(json.dumps({"id": "tiny", "text": "Al"}) + "\n")  # no span of 3 characters
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "name": {"type": "string", "minLength": 3}}}
    (tmp_path / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
    assert _job(tmp_path, "--grounded") == 1
    texts = {record.id: record.text for record in read_records(tmp_path / "docs.jsonl")}
    by_id = {row["id"]: row for row in _lines(tmp_path / "out.jsonl")}
    for key in ("d0", "d1", "d2", 5):
        data = by_id[key]["data"]
        assert data["name"] in texts[key] and data["email"] in texts[key]
        assert len(data["name"]) >= 3
    assert by_id["tiny"]["error"].startswith("cannot ground the schema in this text: #: the schema accepts no")


def test_ray_missing_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    _docs(tmp_path, 2)
    assert _job(tmp_path, "--ray") == 2
    assert "structspec: error: --ray needs Ray Data: pip install 'structspec[ray]'" in capsys.readouterr().err


def test_a_device_this_machine_lacks_is_refused_before_the_output_file_is_made(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _docs(tmp_path, 2)
    assert _job(tmp_path, "--device", "cuda") == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_parquet_input(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="reading Parquet needs pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"key": [10, 11], "body": ["Reach Al at al@example.com.", None]}), tmp_path / "d.parquet")
    records = read_records(tmp_path / "d.parquet", text_field="body", id_field="key")
    assert [(r.id, r.text, r.problem) for r in records] == [
        (10, "Reach Al at al@example.com.", None), (11, None, "row 1: field 'body' is missing")]


def test_a_line_that_is_not_json_is_located_where_it_breaks(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_bytes(b'{"id": "cut", "text": \n{"id": 2, "text": "ok"} x\r\n{"id": 3}\r\n')
    assert [(r.id, r.problem) for r in read_records(tmp_path / "d.jsonl")] == [
        (0, "line 1: not valid JSON (Expecting value at column 23)"),
        (1, "line 2: not valid JSON (Extra data at column 25)"),
        (3, "line 3: field 'text' is missing"),
    ]


def test_output_lines_holding_unicode_line_separators_are_read_back(tmp_path: Path) -> None:
    output = Output(tmp_path / "out.jsonl")
    assert output.write({"id": 1, "data": {"name": "a\u2028b\x85c"}})
    output.close()
    assert Output(tmp_path / "out.jsonl").done == {1}


def test_output_refuses_a_file_that_is_not_its_own(tmp_path: Path) -> None:
    (tmp_path / "out.jsonl").write_text("hello\n")
    with pytest.raises(ValueError, match="line 1 is not an output line"):
        Output(tmp_path / "out.jsonl")


def _map_workers() -> list[int]:
    """Ray Data actor processes started by this test's own Ray (descendants of this process)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"ray::MapWorker") and _descends_from_us(int(name)):
                pids.append(int(name))
    return pids


def _descends_from_us(pid: int) -> bool:
    while pid > 1:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        pid = int(status.split("PPid:")[1].split()[0])
        if pid == os.getpid():
            return True
    return False


def test_ray_job_with_a_worker_killed_mid_job_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'structspec[ray]')")
    pytest.importorskip("ray.data")
    from structspec.batch import job
    from structspec.batch.ray_job import extract_on_ray

    path = _docs(tmp_path, 12)
    records = read_records(path)
    out_path = tmp_path / "out.jsonl"
    output = Output(out_path)
    killed: list[tuple[int, int]] = []

    def kill_one_worker() -> None:
        """Once results flow, SIGKILL one actor process (its batch must run again elsewhere)."""
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            written = len(output.done)
            workers = _map_workers()
            if written >= 2 and len(workers) == 2:
                os.kill(workers[0], signal.SIGKILL)
                killed.append((workers[0], written))
                return
            time.sleep(0.05)

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        killer = threading.Thread(target=kill_one_worker, daemon=True)
        killer.start()
        settings = {"schema": SCHEMA, "no_draft": True, "device": "cpu", "max_tokens": 48, "max_batch": 1}
        tally = job.run(records, output, lambda pending: extract_on_ray(pending, settings, actors=2, batch_size=1))
        output.close()
    finally:
        ray.shutdown()
    assert killed and killed[0][1] < len(records), "the worker was not killed while the job ran"
    ids = [str(row["id"]) for row in _lines(out_path)]
    assert sorted(ids) == sorted(str(record.id) for record in records)  # each exactly once
    assert tally.extracted + tally.errors == len(records) and tally.errors == 2
