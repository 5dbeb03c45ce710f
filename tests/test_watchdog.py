"""The test run's watchdog (tests/conftest.py): a test blocked where pytest-timeout's signal
cannot reach it ends the run soon after its timeout, its name the last line printed, instead
of holding CI until CI's own limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_test_the_timeout_signal_cannot_reach_ends_the_run_naming_it(tmp_path):
    (tmp_path / "test_blocked.py").write_text(textwrap.dedent("""
        import signal, time
        import pytest

        @pytest.mark.timeout(1)
        def test_blocked():
            # SIGALRM (pytest-timeout's signal) blocked: as in a C call that never returns
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(60)

        def test_never_reached():
            pass
    """))
    env = {**os.environ, "PRIVATIZE_TEST_WATCHDOG_GRACE_S": "2", "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
                        "-o", "timeout=600", str(tmp_path / "test_blocked.py")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=50)
    took = time.monotonic() - t0
    assert r.returncode == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert took < 40  # 1 s timeout + 2 s grace + the interpreter's start, not the test's 60 s
    last = r.stderr.strip().splitlines()[-1]
    assert "HUNG TEST" in last and "test_blocked.py::test_blocked" in last, last
    assert "test_blocked.py\", line" in r.stderr  # the blocked thread's stack, where it waits
