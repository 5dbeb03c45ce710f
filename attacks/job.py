"""The Ray Jobs entrypoint of an evaluation (the service's ``evaluate`` job kind)::

    python -m attacks.job CONFIG_URI ROOT_URI OUTPUT_URI [--id ID] [--overwrite]

The conventions are ``train.job``'s. Each location is a local path or a URI that
``pyarrow.fs`` opens (``s3://bucket/key``, ``file:///...``). An evaluation reads several
things (trained models, member and non-member texts, held-out text), so the config names
each of them by a location *relative to ROOT* (for the service: the tenant's storage
folder, ``jobs/<training>/output``, ``corpora/<corpus>/data.jsonl``); an absolute path, a
URI or a ``..`` is refused with the field. Under a remote ROOT each is copied to a local
temporary folder first. The config must leave ``output`` to this command.

It runs ``attacks.run.run_evaluation`` into a scratch folder, then writes ``report.html``
and ``evaluation.json`` to OUTPUT with each model and data source named by its location
in the config, never by a path on this machine. A remote OUTPUT (which must not exist,
unless ``--overwrite``) gets ``report.html`` first and ``evaluation.json`` last, so a
reader that finds the result finds its report. ``--id`` defaults to ``PRIVATIZE_JOB_ID``
(the service sets it to the evaluation's id), else a fresh id.

Canary keys are references (``keystore:<id>`` under the service, whose keystore
``services.jobrun`` installs); no key material is an argument. The last line of stdout is
a one-line JSON summary (per model: perplexity, max exposure, best MIA AUC). Exit codes:
0 success, 2 bad input (config, data, models, keys; one line on stderr, local paths shown
as the config's locations), 1 anything else.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path, PurePosixPath

from attacks.results import EVALUATION, REPORT
from privatize.entrypoint import JobParser, run_entrypoint
from privatize.errors import OutputError, PrivatizeError, SpecError
from privatize.jobio import clear_output, is_remote, local_path, localize_input, redact_paths, upload_files

log = logging.getLogger(__name__)


def locations(data: dict) -> list[tuple[str, str]]:
    """(field path, location) of everything a config (as a dict) reads: each model, every
    other model it names (``mia``'s reference, in its section or an ``attacks`` entry) and
    every data source (``attacks.config.model_references``, ``data_sources``)."""
    from attacks.config import data_sources, model_references

    out = [(f"models.{i}.path", m["path"]) for i, m in enumerate(data.get("models") or [])
           if isinstance(m, dict) and isinstance(m.get("path"), str)]
    out += [(path, value) for path, value in (*model_references(data), *data_sources(data)) if isinstance(value, str)]
    return out


def _relative(field: str, location: str) -> str:
    p = PurePosixPath(location)
    if "://" in location or location.startswith("file:") or p.is_absolute() or ".." in p.parts or not p.parts:
        raise SpecError(f"{field}: {location!r}: a location relative to ROOT (no absolute path, URI or '..')")
    return p.as_posix()


def load_config_any(location: str):
    """The evaluation config at a path or URI (YAML, or JSON by its ``.json`` name)."""
    from attacks.config import parse_config
    from privatize.io.configfile import read_mapping

    data = read_mapping(location)
    if isinstance(data, dict) and data.get("output") is not None:
        raise SpecError("output: set by this command (OUTPUT), not by the config")
    return parse_config(data, location)


def localize(cfg, root: str, tmp: Path) -> tuple[object, dict[str, str]]:
    """The config with every location made a local path under ROOT (copied first when ROOT
    is remote), and {local path: the config's location} to name them in results."""

    from privatize.refs import is_reference, model_folder

    data = cfg.to_dict()
    local: dict[str, str] = {}
    for f, loc in locations(data):  # a model the service names by reference (the operator's catalog)
        if f.startswith("models.") and is_reference(loc):
            local[loc] = str(Path(model_folder(loc, f)).resolve())
    remote = is_remote(root)
    for n, rel in enumerate(sorted({_relative(f, loc) for f, loc in locations(data) if loc not in local})):
        if remote:
            path = localize_input(f"{root.rstrip('/')}/{rel}", tmp / f"in-{n}")
        else:
            path = str(Path(local_path(root)) / rel)
        local[rel] = str(Path(path).resolve())

    def swap(loc: str) -> str:
        return local[loc] if loc in local else local[_relative("", loc)]

    for m in data["models"]:
        m["path"] = swap(m["path"])
    from attacks.config import set_at

    for path, value in locations(data):
        if not path.startswith("models."):
            set_at(data, path, swap(value))
    return type(cfg).model_validate(data), {path: rel for rel, path in local.items()}


def _named(ev, names: dict[str, str]):
    """``ev`` with the local paths of models and data replaced by the config's locations."""
    for m in ev.models:
        m.path = names.get(m.path, redact_paths(m.path, names))
        ppl = m.attacks.get("perplexity")
        if ppl is not None and ppl.data:
            ppl.data = redact_paths(ppl.data, names)
    return ev


def _upload(local: Path, location: str) -> None:
    """``report.html``, then ``evaluation.json`` (what the service reads) last."""
    upload_files(local, location, [REPORT, EVALUATION], last=EVALUATION)


def run_job(config_location: str, root_location: str, output_location: str, *, evaluation_id: str | None = None,
            overwrite: bool = False, progress: bool = False) -> dict:
    """Run the evaluation; returns the summary that ``main`` prints."""
    from attacks.cli import summary
    from attacks.report import write_report
    from attacks.run import run_evaluation

    remote_out = is_remote(output_location)
    with tempfile.TemporaryDirectory(prefix="attack-job-") as tmpname:
        tmp = Path(tmpname)
        cfg = load_config_any(config_location)
        out = tmp / "output" if remote_out else Path(local_path(output_location))
        if remote_out:
            clear_output(output_location, overwrite)
        elif (out / EVALUATION).exists() and not overwrite:
            raise OutputError(f"{output_location}: output exists (use --overwrite to replace it)")
        names: dict[str, str] = {}
        try:
            cfg, names = localize(cfg, root_location, tmp)
            base_dir = None if is_remote(config_location) else str(Path(local_path(config_location)).resolve().parent)
            ev = run_evaluation(cfg.with_output(str(tmp / "scratch")), base_dir=base_dir, progress=progress,
                                evaluation_id=evaluation_id)
        except PrivatizeError as exc:
            line = redact_paths(str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                           {**names, str(tmp): "<tmp>", tmpname: "<tmp>"})
            try:
                err = type(exc)(line)
            except TypeError:  # an error class with another signature
                err = PrivatizeError(line)
            raise err from None
        write_report(_named(ev, names), out)
        if remote_out:
            _upload(out, output_location)
        where = output_location if remote_out else str(out.resolve())
    return {**summary(ev, where), "report": f"{where.rstrip('/')}/{REPORT}",
            "evaluation_json": f"{where.rstrip('/')}/{EVALUATION}"}


def main(argv: list[str] | None = None) -> int:
    p = JobParser(prog="python -m attacks.job", description="Attack trained models and write one privacy report "
                                                          "(on the current Ray cluster).")
    p.add_argument("config", help="evaluation config (YAML or JSON) without output; locations relative to ROOT")
    p.add_argument("root", help="the folder the config's locations are relative to: a path or a URI")
    p.add_argument("output", help="the report folder: a path or a URI")
    p.add_argument("--id", default=os.environ.get("PRIVATIZE_JOB_ID") or None,
                   help="the evaluation's id in its results (default $PRIVATIZE_JOB_ID, else a fresh one)")
    p.add_argument("--overwrite", action="store_true", help="replace an output that exists")
    args = p.parse_args(argv)
    return run_entrypoint("attack", args.verbose, lambda: run_job(
        args.config, args.root, args.output, evaluation_id=args.id, overwrite=args.overwrite,
        progress=sys.stderr.isatty()))


if __name__ == "__main__":
    sys.exit(main())
