"""The in-process runner's progress (issue 54, item 4): per stage, a line every
``progress_every`` seconds and one when it ends off a terminal, a tqdm bar (records,
records/s, ETA) on one, nothing when off."""

from __future__ import annotations

import io
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
