"""The in-process runner's progress (issue 54, item 4): per stage, a line every
``progress_every`` seconds and one when it ends off a terminal, a tqdm bar (records,
records/s, ETA) on one, nothing when off."""

from __future__ import annotations

import io
import json
import time

import pytest

from privatize.errors import SpecError
from privatize.options import RunOptions
from privatize.runner import StageProgress


def test_lines_come_periodically_while_a_stage_runs_and_once_at_its_end():
    out = io.StringIO()
    with StageProgress("stage 1 redact", 1000, "lines", every=0.05, stream=out) as p:
        time.sleep(0.2)  # a long first batch: lines say it is still running
        p.update(400)
        time.sleep(0.12)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4, lines
    assert lines[0].startswith("privatize: stage 1 redact: 0/1000 records (0%), ") and "ETA" not in lines[0]
    mid = [x for x in lines if "400/1000 records (40%)" in x]
    assert mid and " records/s, ETA " in mid[0]
    assert lines[-1].startswith("privatize: stage 1 redact: 400/1000 records (40%)")  # (not all done)


def test_the_end_line_and_nothing_without_a_mode():
    out = io.StringIO()
    with StageProgress("stage 0 split", 30, "lines", every=60, stream=out) as p:
        p.update(30)
    (line,) = out.getvalue().splitlines()
    assert line.startswith("privatize: stage 0 split: 30/30 records done, ") and line.endswith(" s elapsed")
    out = io.StringIO()
    with StageProgress("stage 0 split", 30, None, stream=out) as p:
        p.update(30)
    assert out.getvalue() == ""


def test_a_bar_on_a_terminal_counts_records():
    out = io.StringIO()
    with StageProgress("stage 0 split", 64, "bar", stream=out) as p:
        p.update(32)
        p.bar.refresh()
        p.update(32)
        assert p.bar.n == 64 and p.bar.total == 64
    text = out.getvalue()
    assert "stage 0 split:  50%" in text and "32/64 [" in text and " records/s]" in text


def test_options_check_the_progress_mode():
    assert RunOptions(progress="lines", progress_every=1).progress == "lines"
    with pytest.raises(SpecError, match="options.progress"):
        RunOptions(progress="loud")
    with pytest.raises(SpecError, match="options.progress_every"):
        RunOptions(progress_every=0)


# ---- the figures both runners report (RunOptions.on_progress) -----------------------------

def test_figures_by_hand(monkeypatch):
    from privatize import progress as mod

    now = [100.0]
    monkeypatch.setattr(mod.time, "monotonic", lambda: now[0])
    got = []
    p = mod.RunProgress(["split", "redact"], got.append, total=200, every=5.0)
    now[0] = 110.0
    p.add_block(50, {0: 50, 1: 180}, {0: 180, 1: 170})
    # 50 of 200 records through every stage in 10 s: 25%, 5 records/s, 30 s to go
    assert got == [{"elapsed_s": 10.0, "records_read": 50, "records_total": 200, "percent": 25.0,
                    "records_per_s": 5.0, "eta_s": 30.0,
                    "stages": [{"index": 0, "kind": "split", "records_in": 50, "records_out": 180},
                               {"index": 1, "kind": "redact", "records_in": 180, "records_out": 170}]}]
    now[0] = 112.0
    p.add_block(50, {0: 50}, {0: 150})  # within `every` of the last report: not reported
    assert len(got) == 1
    p.close()  # always at the end
    assert got[-1]["records_read"] == 100 and got[-1]["stages"][0]["records_out"] == 330
    # the Ray runner without a total: no share, no ETA
    q = mod.RunProgress(["split"], got.append)
    q.add_block(7, {0: 7}, {0: 9})
    assert (got[-1]["records_total"], got[-1]["percent"], got[-1]["eta_s"]) == (None, None, None)


def test_the_in_process_runner_reports_stage_by_stage_to_the_manifest_counts(tmp_path):
    from privatize.api import run
    from privatize.spec import parse_spec

    docs = [{"doc_id": f"d{i}", "text": f"Sentence {i} here. The same second sentence." * (1 + i % 3)}
            for i in range(40)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    spec = parse_spec({"stages": [{"kind": "split"}, {"kind": "dedup", "min_length": 10}]})
    got = []
    m = run(spec, tmp_path / "in.jsonl", tmp_path / "out", batch_size=8, on_progress=got.append)
    last = got[-1]
    assert [(s["kind"], s["records_in"], s["records_out"]) for s in last["stages"]] == \
        [(s["kind"], s["records_in"], s["records_out"]) for s in m["stages"]]
    assert (last["records_read"], last["records_total"], last["percent"]) == (40, 40, 100.0)
    shares = [f["percent"] for f in got]
    assert shares == sorted(shares)


def test_a_progress_file_is_replaced_whole_and_never_fails_the_run(tmp_path, caplog):
    from privatize.progress import progress_writer

    write = progress_writer(str(tmp_path / "out.progress.json"))
    write({"records_read": 1})
    write({"records_read": 2})
    assert json.loads((tmp_path / "out.progress.json").read_text()) == {"records_read": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.progress.json"]  # no temporary left
    progress_writer(str(tmp_path / "missing" / "x.json"))({"records_read": 3})  # logged, not raised
    assert "could not write" in caplog.text


def test_a_stage_after_split_moves_batch_by_batch_and_writes_the_same(tmp_path, monkeypatch):
    """One document of 40 sentences: ``split`` makes one 40-record batch of it; the next stage
    (``mask``) runs it as five batches of ``batch_size`` 8 (its progress moves five times, not once at its
    end), and the output is the one batch's, record for record."""
    from privatize import runner
    from privatize.api import run
    from privatize.spec import parse_spec
    import pyarrow.parquet as pq

    text = " ".join(f"Sentence number {i} is here." for i in range(40))
    (tmp_path / "in.jsonl").write_text(json.dumps({"doc_id": "d0", "text": text}) + "\n")
    spec = parse_spec({"stages": [{"kind": "split"}, {"kind": "mask", "technique": "allow_list"}]})
    seen = []
    orig = runner.StageProgress.update
    monkeypatch.setattr(runner.StageProgress, "update",
                        lambda self, n: (seen.append((self.label, n)), orig(self, n))[1])
    run(spec, tmp_path / "in.jsonl", tmp_path / "small", batch_size=8)
    assert [n for label, n in seen if label == "stage 1 mask"] == [8] * 5
    assert [n for label, n in seen if label == "stage 0 split"] == [1]
    run(spec, tmp_path / "in.jsonl", tmp_path / "large", batch_size=64)
    read = lambda d: sorted(t for f in (tmp_path / d / "shards").glob("*.parquet")
                            for t in pq.read_table(f).column("text").to_pylist())
    assert read("small") == read("large") and len(read("small")) == 40
