"""The Ray Jobs entrypoint of every service job::

    python -m services.jobrun KIND SPEC_URI INPUT_URI OUTPUT_URI

It looks the job kind up in ``services.jobkinds``, installs the ``keystore:`` backend in
the driver process (the job's workers get it from the ``worker_process_setup_hook``; see
``services.keystore``), then runs the kind's module (``privatize.job`` for ``privatize``)
as ``python -m MODULE SPEC_URI INPUT_URI OUTPUT_URI``, with its exit code (the process
leaves through :func:`exit_now`, without Python's seconds of teardown). No key material
is an argument: only locations the service chose.

Before the kind's module runs, the driver joins the cluster the service named
(``PRIVATIZE_RAY_CLUSTER``, its head's GCS address, set in the job's ``runtime_env``):
``ray.init(address=...)`` with that address, never ``auto`` or whatever Ray would
discover on the host (another user's head, say). The job supervisor's own
``RAY_ADDRESS`` must agree with it, else the job stops before it runs (exit 1). The
line ``services.jobrun: on the Ray cluster at HOST:PORT`` in the job's log says where
it ran (the GCS address this driver is connected to, as Ray reports it).
"""

from __future__ import annotations

import os
import runpy
import sys

CLUSTER_ENV = "PRIVATIZE_RAY_CLUSTER"
"""The GCS address of the service's cluster, in a job's environment (set by
``services.context.cluster_env``): the driver connects there."""
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
    try:
        join_cluster()
    except RuntimeError as exc:
        print(f"services.jobrun: error: {exc}", file=sys.stderr)
        sys.exit(1)
    sys.argv = [kind.module, *args[1:]]
    runpy.run_module(kind.module, run_name="__main__", alter_sys=True)


def join_cluster(env: dict | None = None) -> str | None:
    """Connect this driver to the cluster the service named (``PRIVATIZE_RAY_CLUSTER``)
    and return its GCS address as Ray reports it; None when the service named none (an
    external cluster: its job supervisor's ``RAY_ADDRESS`` stands). RuntimeError when the
    supervisor named another cluster, or Ray connected elsewhere."""
    env = os.environ if env is None else env
    want = env.get(CLUSTER_ENV)
    if not want:
        return None
    given = env.get("RAY_ADDRESS")
    if given and given != want:
        raise RuntimeError(f"Ray's job supervisor named the cluster {given}, the service {want}: not run")
    env["RAY_ADDRESS"] = want  # what privatize.ray.cluster.connect and Ray Train read
    import ray

    if not ray.is_initialized():
        ray.init(address=want)
    got = ray.get_runtime_context().gcs_address
    if got != want:
        raise RuntimeError(f"connected to the Ray cluster at {got}, not the service's {want}: not run")
    print(f"services.jobrun: on the Ray cluster at {got}", file=sys.stderr, flush=True)
    return got


def exit_now(code: int) -> None:
    """Leave the driver at once with ``code``: flush what it wrote, disconnect from Ray,
    and skip the interpreter's teardown, which spends 2-4 s collecting the objects of the
    torch, transformers, Ray Data and Opacus modules (measured) after the job is done; the
    job's status waits on this process's exit."""
    import logging

    logging.shutdown()
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _code(exc: SystemExit) -> int:
    """The exit status Python gives a ``SystemExit`` (a message: printed, status 1)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    try:
        main()
        status = 0
    except SystemExit as exc:
        status = _code(exc)
    except KeyboardInterrupt:
        status = 130
    except BaseException:  # noqa: BLE001 - reported as Python reports it, with its traceback
        import traceback

        traceback.print_exc()
        status = 1
    exit_now(status)
