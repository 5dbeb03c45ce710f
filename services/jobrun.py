"""The Ray Jobs entrypoint of every service job::

    python -m services.jobrun KIND SPEC_URI INPUT_URI OUTPUT_URI

It looks the job kind up in ``services.jobkinds``, installs the ``keystore:`` backend in
the driver process (the job's workers get it from the ``worker_process_setup_hook``; see
``services.keystore``), then runs the kind's module (``privatize.job`` for ``privatize``)
as ``python -m MODULE SPEC_URI INPUT_URI OUTPUT_URI``, with its exit code. No key
material is an argument: only locations the service chose.
"""

from __future__ import annotations

import runpy
import sys

USAGE = "usage: python -m services.jobrun KIND SPEC_URI INPUT_URI OUTPUT_URI"


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    from services.jobkinds import job_kind

    try:
        if not args:
            raise LookupError(f"no job kind ({USAGE})")
        kind = job_kind(args[0])
    except LookupError as exc:
        print(f"services.jobrun: error: {exc}", file=sys.stderr)
        sys.exit(2)
    from services.keystore import install_worker_keystore

    install_worker_keystore()
    sys.argv = [kind.module, *args[1:]]
    runpy.run_module(kind.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
