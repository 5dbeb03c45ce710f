"""The Ray Jobs entrypoint of a service job::

    python -m services.jobrun SPEC_URI INPUT_URI OUTPUT_URI

It installs the ``keystore:`` backend in the driver process (the job's workers get it
from the ``worker_process_setup_hook``; see ``services.keystore``), then runs the
privatization entrypoint ``python -m privatize.job`` with the same arguments and exit
code. No key material is an argument: only locations the service chose.
"""

from __future__ import annotations

import runpy
import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    from services.keystore import install_worker_keystore

    install_worker_keystore()
    sys.argv = ["privatize.job", *args]
    runpy.run_module("privatize.job", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
