"""The upload spool with several API processes (``serve --workers``): a process that
starts clears what dead processes left, never a running sibling's uploads in flight."""

from __future__ import annotations

import os
import subprocess
import sys

from services.storage import Storage


def test_a_starting_process_clears_dead_spools_and_keeps_live_ones(tmp_path):
    storage = Storage(str(tmp_path / "storage"))
    own = storage.spool_dir(tmp_path / "unused")
    assert own.name == str(os.getpid()) and own.parent == tmp_path / "storage" / ".spool"
    (own / ".upload-a.jsonl").write_text("left by an earlier run with our pid\n")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_dir = own.parent / dead.stdout.strip()
    dead_dir.mkdir()
    (dead_dir / ".upload-b.jsonl").write_text("a crashed worker's upload\n")
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_dir = own.parent / str(sibling.pid)
        live_dir.mkdir()
        (live_dir / ".upload-c.jsonl").write_text("a running worker's upload in flight\n")
        (own.parent / ".upload-d.jsonl").write_text("from a version without per-process spools\n")

        assert storage.clear_spool(tmp_path / "unused", own) == 3
        assert own.is_dir() and not any(own.iterdir())
        assert not dead_dir.exists() and not (own.parent / ".upload-d.jsonl").exists()
        assert (live_dir / ".upload-c.jsonl").read_text() == "a running worker's upload in flight\n"
    finally:
        sibling.kill()
        sibling.wait()
