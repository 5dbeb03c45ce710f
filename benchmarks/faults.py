"""Fault injection against a real service (issue 53, item 5): the scenarios of
``tests/services/test_faults.py`` run as a script, and their figures recorded.

A service of its own (uvicorn, SQLite, local storage, its embedded Ray head) and one
tenant (two concurrent jobs): a privatization job, then, one at a time, the API process
SIGKILLed while a job runs; a training's Ray Train worker SIGKILLed and the database made
unavailable (SQLite locked past its 30 s busy timeout) while a job finishes; the Ray head's
process group SIGKILLed while a training runs (``/readyz`` 503 naming Ray while it is down,
the training failed, "the Ray cluster was lost", no driver of it left, a new head started
by the service); then a last job. After each: every accepted job listed exactly once,
statuses as Ray has them, slots and privacy-ledger reservations released, ``/readyz`` 200.

Figures: faults injected, jobs accepted, jobs lost (0), duplicated (0), time to recover per
fault (from the fault to every check passing; for the head kill also the seconds to
``/readyz`` 503 and to the new head ready) and the whole run's seconds.

    python benchmarks/faults.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.services.conftest import running_service
    from tests.services.test_faults import run_faults

    with tempfile.TemporaryDirectory(prefix="bench-faults-") as work, \
            running_service("sqlite-local", None, "pvb-", timeout=180) as svc:
        out = run_faults(svc, Path(work), say=lambda s: print(s, file=sys.stderr, flush=True))
    head = {k: out[k] for k in ("faults_injected", "jobs_accepted", "jobs_lost", "jobs_duplicated")}
    res = {"machine": machine(), **head, "recover_s": {x["fault"]: x["recover_s"] for x in out["faults"]}, **out,
           "target": "0 jobs lost or duplicated; /readyz 200 and a new job admitted after each fault",
           "met": out["jobs_lost"] == 0 and out["jobs_duplicated"] == 0}
    print(json.dumps(res))
    save_result("faults", res)
    return 0 if res["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
