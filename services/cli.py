"""The service's ``privatize`` subcommands, registered through the ``privatize.commands``
entry point (``services = "services.cli:register"``):

* ``privatize serve`` runs the API under uvicorn;
* ``privatize submit KIND CONFIG [--corpus-id ID | --job JOB_ID] [--wait]`` submits a job
  of any kind the service lists at ``GET /v1/kinds`` (its ``/v1/<resource>``), with the
  same exit codes as below and a one-line JSON summary;
* ``privatize submit SPEC --corpus FILE [--wait]`` uploads a corpus, submits a job and
  (with ``--wait``) waits for it: exit 0 when it succeeded, 1 when it failed or was
  cancelled, 2 for bad input (an invalid spec or corpus, a refused request). The
  service URL and token come from ``--url``/``--token`` or ``PRIVATIZE_URL`` /
  ``PRIVATIZE_TOKEN``. The last line of output is a one-line JSON summary;
* ``privatize submit train CONFIG --job JOB_ID [--wait] [--download DIR --extract]``
  trains a language model on a privatization job's output (a training config as in
  ``train/configs/``, without paths; the summary carries the run's figures, ``--extract``
  unpacks the model into ``DIR/model``); ``privatize submit evaluate CONFIG`` attacks
  trainings (models by ``training_id``, data by ``{"corpus_id": ...}``/``{"job_id": ...}``,
  keys as ``keystore:<id>``; ``--download`` saves ``report.html`` and ``evaluation.json``);
* ``privatize models list|upload NAME PATH|delete NAME``: the base models the tenant
  may fine-tune (``model.checkpoint: base:NAME``), the service's catalog and its own uploads
  (a Hugging Face folder, packed and streamed, or a ``.tar.gz`` of one); one JSON object a
  line;
* ``privatize admin ...`` (see ``services.admin``).

``python -m services.cli ...`` runs the same commands without the entry point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from privatize.errors import PrivatizeError


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.app import create_app
    from services.errors import ConfigError
    from services.settings import Settings, get_settings

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("workers", args.workers))
                 if v is not None}
    if args.dev:
        overrides["env"] = "development"
    settings = Settings(**overrides) if overrides else get_settings()
    from services.observability import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    try:
        from services.settings import check_secrets

        check_secrets(settings)  # refuse to start before binding the port
    except ConfigError as exc:
        raise PrivatizeError(exc.message) from None
    if settings.dev:
        logging.getLogger("services").warning("development mode: the master key is generated under %s; never use "
                                              "it for real data", settings.data_path)
    common = {"host": settings.host, "port": settings.port, "log_level": settings.log_level.lower(),
              "log_config": None, "access_log": False, "timeout_graceful_shutdown": 10}
    if settings.workers == 1:
        uvicorn.run(create_app(settings), **common)
        return 0
    # worker processes build their settings from the environment: pass the overrides on
    os.environ.update({f"PRIVATIZE_{k.upper()}": str(v) for k, v in overrides.items()})
    uvicorn.run("services.app:worker_app", factory=True, workers=settings.workers, **common)
    return 0


def _say(args: argparse.Namespace):
    return (lambda m: print(f"privatize: {m}", file=sys.stderr)) if not args.quiet else (lambda m: None)


def _corpus_id(c, args: argparse.Namespace, say) -> str:
    """``--corpus FILE`` uploaded first, or ``--corpus-id``."""
    if not args.corpus and not args.corpus_id:
        raise PrivatizeError("give --corpus FILE (uploaded first) or --corpus-id ID (already uploaded)")
    if not args.corpus:
        return args.corpus_id
    corpus = c.upload_corpus(args.corpus, name=args.name, fmt=args.format)
    say(f"uploaded corpus {corpus['id']} ({corpus['bytes']} bytes, {corpus['records']} records)")
    return corpus["id"]


def _submit(args: argparse.Namespace) -> int:
    """``privatize submit SPEC`` (a pipeline) or ``privatize submit KIND CONFIG`` (any kind
    the service lists at ``GET /v1/kinds``)."""
    if len(args.args) > 2:
        raise PrivatizeError("submit takes [KIND] FILE: a pipeline spec, or a job kind and its config")
    if args.extract and not (args.download and args.wait and len(args.args) == 2):
        raise PrivatizeError("--extract unpacks the archive a KIND serves: give it with KIND CONFIG --wait --download "
                             "DIR")
    if len(args.args) == 2:
        return _submit_kind(args, *args.args)
    return _submit_pipeline(args, args.args[0])


def _submit_pipeline(args: argparse.Namespace, path: str) -> int:
    """A pipeline spec on a corpus (``POST /v1/jobs``); the spec is read first: a bad one
    fails before the service is asked anything."""
    from privatize.spec import read_spec_file
    from services.client import ApiError

    spec = read_spec_file(path)
    say = _say(args)
    downloaded = None
    with _client(args) as c:
        try:
            corpus_id = _corpus_id(c, args, say)
            with _unless_refused(c, args, corpus_id, say):
                job = c.create_job(corpus_id, spec)
            say(f"submitted job {job['id']}")
            if args.wait:
                job = c.wait(job["id"], timeout=args.timeout, poll=args.poll,
                             on_change=lambda j: say(f"job {j['id']}: {j['status']}"))
            if args.download and job["status"] == "succeeded":
                downloaded = c.download_all(job["id"], args.download)
                say(f"downloaded {len(downloaded)} file(s) to {args.download}")
        except ApiError as exc:
            return _refused(exc, "spec")
    summary = {"job_id": job["id"], "corpus_id": corpus_id, "status": job["status"],
               "message": job.get("message"), "progress": job.get("progress")}
    if downloaded is not None:
        summary["downloaded"] = str(Path(args.download).resolve())
    print(json.dumps(summary))
    if not args.wait:
        return 0
    return 0 if job["status"] == "succeeded" else 1


@contextlib.contextmanager
def _unless_refused(c, args: argparse.Namespace, corpus_id: str | None, say):
    """Around a job's creation: when the service refuses it (4xx) and the corpus was
    uploaded for it here (``--corpus FILE``), the upload is deleted again, so a refused
    submission leaves no stray corpus counting against the tenant's storage."""
    from services.client import ApiError

    try:
        yield
    except ApiError as exc:
        if args.corpus and corpus_id and 400 <= exc.status < 500:
            try:
                c.delete_corpus(corpus_id)
                say(f"deleted corpus {corpus_id}, uploaded for this refused job")
            except ApiError as gone:
                say(f"could not delete corpus {corpus_id}, uploaded for this refused job: {gone}")
        raise


def _submit_kind(args: argparse.Namespace, kind: str, path: str) -> int:
    """A job of a kind with its own resource: its config, and what it reads (a corpus:
    ``--corpus``/``--corpus-id``; another job's output: ``--job``). ``privatize submit
    privatize SPEC`` is a pipeline spec sent as it is (the service validates it)."""
    from services.client import ApiError

    say = _say(args)
    downloaded = None
    with _client(args) as c:
        try:
            info = c.kinds().get(kind)
            if info is None:
                raise PrivatizeError(f"unknown job kind {kind!r} (this service runs: {', '.join(sorted(c.kinds()))})")
            if info["resource"] is None:
                raise PrivatizeError(f"{kind} jobs are not submitted through the API (GET /v1/kinds: no resource)")
            config = read_config_file(path, f"a {kind} config is a mapping")
            body: dict = {"config": config}
            if info["reads"] == "corpus":
                body["corpus_id"] = _corpus_id(c, args, say)
            elif info["reads"] == "job":
                if not args.job:
                    raise PrivatizeError(f"a {kind} job reads a {info['input_kind']} job's output: give --job JOB_ID")
                body["job_id"] = args.job
            with _unless_refused(c, args, body.get("corpus_id"), say):
                j = c.submit(kind, **body)
            say(f"submitted {info['noun']} {j['id']}")
            if (line := privacy_line(c, j)) is not None:
                say(line)
            if args.wait:
                j = c.wait(j["id"], timeout=args.timeout, poll=args.poll, get=lambda i: c.get(kind, i),
                           on_change=lambda x: say(f"{info['noun']} {x['id']}: {x['status']}{_at_step(x)}"))
                if j["status"] == "succeeded" and (line := privacy_line(c, j)) is not None:
                    say(line)
            if args.download and j["status"] == "succeeded":
                downloaded = c.download_outputs(kind, j["id"], args.download, extract=args.extract)
                say(f"downloaded {len(downloaded)} file(s) to {args.download}"
                    + (f": {', '.join(p.name for p in downloaded)}" if args.extract else ""))
        except ApiError as exc:
            return _refused(exc, "config")
    # what it read and how far it got, where the kind's resource answers them
    summary = {"id": j["id"], "kind": kind, "status": j["status"], "message": j.get("message"),
               **{k: j[k] for k in ("corpus_id", "input_job_id", "progress") if k in j}, "summary": j.get("summary")}
    if downloaded is not None:
        summary["downloaded"] = [str(p.resolve()) for p in downloaded]
    print(json.dumps(summary))
    if not args.wait:
        return 0
    return 0 if j["status"] == "succeeded" else 1


def _at_step(job: dict) -> str:
    """`` (step 4, loss 5.1234)`` for a job whose resource reports training progress."""
    p = job.get("progress") or {}
    return f" (step {p['step']}, loss {p['loss']:.4f})" if p.get("step") and p.get("loss") else ""


def privacy_line(c, job: dict) -> str | None:
    """A DP training's spend and its data's ledger, in one line: "this model" (its own
    epsilon: planned until it succeeds) and "its data in total" (every training on its
    corpus's content, composed); None for a job without DP."""
    plan = (job.get("config") or {}).get("admitted_plan")
    if not plan or not job.get("corpus_id"):
        return None
    s = job.get("summary") or {}
    own = s.get("epsilon") if job.get("status") == "succeeded" else None
    mine = (f"epsilon {own:.3f}" if own is not None else
            f"epsilon {plan.get('unit_epsilon', plan['planned_epsilon']):.3f} planned")
    led = c.corpus_privacy(job["corpus_id"])
    if led.get("epsilon") is None:
        total = f"no single figure ({led.get('note')})"
    else:
        total = f"epsilon {led['epsilon']:.3f} at delta {led['delta']:.3g} over {len(led['trainings'])} training(s)"
    limit = f", limit {led['limit']:g}" if led.get("limit") is not None else ""
    return f"privacy: this model {mine}; its data in total {total}{limit}"


def _refused(exc, what: str) -> int:
    """An error answer: 1 for the service's own failures (5xx); else the field paths on
    stderr and exit 2 (raised as bad input)."""
    if exc.status >= 500:
        print(f"privatize: error: {exc}", file=sys.stderr)
        return 1
    errors = exc.body.get("errors") if exc.body else None
    if errors:
        for e in errors:
            print(f"privatize: {e.get('path') or what}: {e.get('message')}", file=sys.stderr)
    raise PrivatizeError(str(exc)) from None


def _client(args: argparse.Namespace):
    from services.client import ServiceClient
    from services.settings import get_client_settings

    cs = get_client_settings()
    token = args.token or (cs.token.get_secret_value() if cs.token else None)
    return ServiceClient(args.url or cs.url, token)


def read_config_file(path: str, what: str) -> dict:
    """A config file (YAML, or JSON by its name), unvalidated: the service checks it."""
    from privatize.io.configfile import read_mapping
    from privatize.errors import SpecError

    data = read_mapping(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: {what}")
    return data


def _models(args: argparse.Namespace) -> int:
    """``privatize models list|upload|delete``: the base models a tenant may fine-tune. One
    JSON object a line (list: one per model; upload and delete: what was done)."""
    from services.client import ApiError

    with _client(args) as c:
        try:
            if args.models_command == "list":
                for m in c.models():
                    print(json.dumps(m))
            elif args.models_command == "upload":
                m = c.upload_model(args.path, args.name)
                if not args.quiet:
                    print(f"privatize: uploaded {args.path} as {m['ref']}", file=sys.stderr)
                print(json.dumps(m))
            else:
                c.delete_model(args.name)
                print(json.dumps({"name": args.name, "deleted": True}))
        except ApiError as exc:
            return _refused(exc, "model")
    return 0


def register(sub) -> None:
    s = sub.add_parser("serve", help="run the control-plane API (uvicorn)")
    s.add_argument("--host", default=None, help="default PRIVATIZE_HOST or 127.0.0.1")
    s.add_argument("--port", type=int, default=None, help="default PRIVATIZE_PORT or 8000")
    s.add_argument("--workers", type=int, default=None, help="API processes (default PRIVATIZE_WORKERS or 1)")
    s.add_argument("--dev", action="store_true", help="development mode (generated master key; not for real data)")
    s.set_defaults(func=_serve)

    j = sub.add_parser("submit", help="run a pipeline spec on the service (or a job of another KIND)",
                       description="privatize submit SPEC --corpus FILE: a pipeline spec on a corpus; "
                                   "privatize submit KIND CONFIG [--corpus-id ID | --job JOB_ID]: a job of any "
                                   "kind the service lists at GET /v1/kinds (train, evaluate...)")
    j.add_argument("args", nargs="+", metavar="[KIND] FILE",
                   help="a pipeline spec (YAML or JSON; keys as keystore:<id>), or a job kind and its config")
    j.add_argument("--job", metavar="JOB_ID", help="KIND reading another job's output (train): that job")
    j.add_argument("--corpus", help="corpus file to upload (JSONL, text or Parquet)")
    j.add_argument("--corpus-id", help="an uploaded corpus instead of --corpus")
    j.add_argument("--name", help="corpus name (default: the file name)")
    j.add_argument("--format", choices=["jsonl", "text", "parquet"], help="default: from the file name")
    j.add_argument("--url", help="service URL (default PRIVATIZE_URL)")
    j.add_argument("--token", help="API token (default PRIVATIZE_TOKEN; prefer the variable)")
    j.add_argument("--wait", action="store_true", help="wait for the job; exit 1 if it fails")
    j.add_argument("--timeout", type=float, default=7 * 24 * 3600, help="seconds to wait (default a week: "
                                                                       "trainings run for days)")
    j.add_argument("--poll", type=float, default=2.0, help="seconds between status checks")
    j.add_argument("--download", metavar="DIR", help="with --wait: download the results to DIR (a pipeline's "
                                                    "manifest and shards; what KIND serves)")
    j.add_argument("--extract", action="store_true", help="with --download: unpack what KIND serves as an "
                                                          "archive (a training's model: DIR/model)")
    j.add_argument("-q", "--quiet", action="store_true")
    j.set_defaults(func=_submit)

    m = sub.add_parser("models", help="the base models you may fine-tune on the service (model.checkpoint: "
                                      "base:NAME): list, upload one of yours, delete it")
    msub = m.add_subparsers(dest="models_command", required=True)
    ml = msub.add_parser("list", help="the service's catalog and your uploads, one JSON object a line")
    mu = msub.add_parser("upload", help="upload a Hugging Face causal-LM folder (config.json, *.safetensors, "
                                        "tokenizer) or a .tar.gz of one, visible to you alone")
    mu.add_argument("name", help="what trainings name it by: model.checkpoint: base:NAME")
    mu.add_argument("path", help="the model folder, or a .tar.gz of it")
    mu.add_argument("-q", "--quiet", action="store_true")
    md = msub.add_parser("delete", help="delete one of your uploads (not while a training reads it)")
    md.add_argument("name")
    for p in (ml, mu, md):
        p.add_argument("--url", help="service URL (default PRIVATIZE_URL)")
        p.add_argument("--token", help="API token (default PRIVATIZE_TOKEN; prefer the variable)")
        p.set_defaults(func=_models)

    from services.admin import register_admin

    register_admin(sub)


def main(argv: list[str] | None = None) -> int:
    from privatize.cli import run_standalone

    return run_standalone(register, argv)


if __name__ == "__main__":
    sys.exit(main())
