"""The Ray Jobs entrypoint of a privatization run::

    python -m privatize.job SPEC_URI INPUT_URI OUTPUT_URI [--batch-size N] [--strict] [--overwrite]

Each location is a local path or a URI that ``pyarrow.fs`` opens (``s3://bucket/key``,
``file:///...``). Remote inputs are copied to a local temporary folder first and the
output is written locally, then uploaded: shards, then the quarantine (beside the
output, ``<OUTPUT_URI>.quarantine.jsonl``), then ``manifest.json`` last, so a reader that
finds a manifest finds every shard it lists. While it runs, its progress figures
(:mod:`privatize.progress`: records through every stage, each stage's records in and out,
about once a second) are kept beside the output, ``<OUTPUT_URI>.progress.json``: the
service shows them as the job's ``progress``.

The run goes through :func:`privatize.api.run` with the Ray runner and no address: inside
a Ray job (``RAY_ADDRESS`` is set by the job supervisor) the runner joins that cluster;
otherwise it starts an embedded local one. No key material is an argument:
the spec names keys by reference and stages resolve them on the workers.

The last line of stdout is a one-line JSON summary. Exit codes: 0 success, 2 bad input
(spec, input, output location, keys; one line on stderr), 1 anything else.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

from privatize.entrypoint import JobParser, run_entrypoint
from privatize.errors import PrivatizeError, SpecError
from privatize.jobio import (check_output, is_remote, local_path, localize_input, open_location, output_dir,
                             upload_files)
from privatize.progress import progress_writer

log = logging.getLogger(__name__)


def load_spec_any(location: str):
    """The spec at a path or URI, and the folder its ``file:`` key paths resolve against
    (a local spec's folder; none for a remote one)."""
    from privatize.spec import load_spec, parse_spec

    if not is_remote(location):
        path = local_path(location)
        return load_spec(path), str(Path(path).resolve().parent)
    from privatize.io.configfile import read_mapping

    data = read_mapping(location, what="spec")
    try:
        return parse_spec(data), None
    except SpecError as exc:
        raise SpecError(f"{location}: {exc}") from None


def upload_output(local: Path, location: str, *, overwrite: bool) -> str | None:
    """Upload a finished output folder (and its quarantine) to ``location``: shards, the
    quarantine, the manifest last; returns the quarantine's URI when there is one."""
    import pyarrow.fs as pafs

    from privatize.output import MANIFEST, SHARD_DIR, quarantine_path

    fs, path = open_location(location)
    if overwrite and fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)
    upload_files(local, location, [SHARD_DIR])
    q = quarantine_path(local)
    q_uri = None
    if q.exists():
        pafs.copy_files(str(q), f"{path}.quarantine.jsonl", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        q_uri = f"{location}.quarantine.jsonl"
    upload_files(local, location, [MANIFEST])
    return q_uri


PROGRESS_SUFFIX = ".progress.json"


def progress_location(output_location: str) -> str:
    """Where a job keeps its progress figures while it runs (:mod:`privatize.progress`):
    beside its output, ``OUTPUT.progress.json`` (what the service shows as the job's
    ``progress``). Removed when the job succeeds; kept when it fails (how far it got)."""
    return output_location.rstrip("/") + PROGRESS_SUFFIX


def _remove(location: str) -> None:
    try:
        if is_remote(location):
            fs, path = open_location(location)
            fs.delete_file(path)
        else:
            Path(local_path(location)).unlink(missing_ok=True)
    except (OSError, PrivatizeError):
        pass


def run_job(spec_location: str, input_location: str, output_location: str, *, batch_size: int = 1024,
            strict: bool = False, overwrite: bool = False) -> dict:
    """Run the job; returns the summary that ``main`` prints."""
    from privatize.api import RunOptions, run
    from privatize.output import MANIFEST

    remote_out = is_remote(output_location)
    with tempfile.TemporaryDirectory(prefix="privatize-job-") as tmpname:
        tmp = Path(tmpname)
        spec, spec_dir = load_spec_any(spec_location)
        if remote_out:
            check_output(output_location, overwrite)
        input_path = localize_input(input_location, tmp)
        out = output_dir(output_location, tmp)
        options = RunOptions(batch_size=batch_size, strict=strict, overwrite=overwrite, progress=sys.stderr.isatty(),
                             on_progress=progress_writer(progress_location(output_location)))
        manifest = run(spec, input_path, out, runner="ray", spec_dir=spec_dir, options=options)
        if remote_out:
            quarantine = upload_output(out, output_location, overwrite=overwrite)
            where, manifest_at = output_location, f"{output_location.rstrip('/')}/{MANIFEST}"
        else:
            quarantine = manifest["quarantine"]["path"]
            where, manifest_at = str(out.resolve()), str((out / MANIFEST).resolve())
    _remove(progress_location(output_location))
    return {"status": "ok", "runner": "ray", "output": where, "manifest": manifest_at, **manifest["counts"],
            "quarantine": quarantine, "seconds": manifest.get("seconds")}


def main(argv: list[str] | None = None) -> int:
    p = JobParser(prog="python -m privatize.job", description="Run a pipeline spec on the current Ray cluster.")
    p.add_argument("spec", help="pipeline spec (YAML or JSON): a path or a URI")
    p.add_argument("input", help="input file or folder: a path or a URI")
    p.add_argument("output", help="output folder: a path or a URI (must not exist, unless --overwrite)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--strict", action="store_true", help="record-level problems are errors, not quarantined")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    return run_entrypoint("privatize", args.verbose, lambda: run_job(
        args.spec, args.input, args.output, batch_size=args.batch_size, strict=args.strict,
        overwrite=args.overwrite))


if __name__ == "__main__":
    sys.exit(main())
