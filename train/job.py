"""The Ray Jobs entrypoint of a training run (the service's ``train`` job kind)::

    python -m train.job CONFIG_URI INPUT_URI OUTPUT_URI [--checkpoint MODEL_URI] [--keep-checkpoints] [--overwrite]

The conventions are ``privatize.job``'s. Each location is a local path or a URI that
``pyarrow.fs`` opens (``s3://bucket/key``, ``file:///...``). INPUT is the output folder of a
succeeded privatization job (``manifest.json`` and ``shards/*.parquet``); a remote one is
copied to a local temporary folder first. The config (YAML or JSON) must leave ``data.path``
and ``output`` to this command: it runs ``train.run.run_training`` on
``config.with_paths(data=<local input>, output=<local run folder>)``.

A local OUTPUT is the run folder itself: the service reads its ``metrics.jsonl`` while the
run goes on. A remote OUTPUT (which must not exist, unless ``--overwrite``) is written
locally, ``metrics.jsonl`` copied to it every ``--mirror-every`` seconds while the run goes
on, then everything uploaded at the end with ``summary.json`` last, so a reader that finds
a summary finds the model it names.

Ray Train's checkpoints go to ``OUTPUT/checkpoints`` when the config names no ``storage``
(for a remote OUTPUT, straight there: every node of a cluster reaches it). They are
removed once the run has succeeded (``--keep-checkpoints`` keeps them); a failed run keeps
them, and the same command on the same local OUTPUT resumes from the last one.

The last line of stdout is a one-line JSON summary. Exit codes: 0 success, 2 bad input
(config, input, output location; one line on stderr, local paths shown as ``<input>`` and
``<output>``), 1 anything else (a training that failed on the cluster).
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from privatize.entrypoint import JobParser, run_entrypoint
from privatize.errors import InputError, PrivatizeError, SpecError
from privatize.output import MANIFEST
from privatize.policy import ServerPath, marked_values
from privatize.jobio import (clear_output, delete_dir, is_remote, local_path, localize_input, open_location, redact_paths,
                             upload_files)

from train.progress import METRICS, SUMMARY

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"


def load_config_any(location: str):
    """The training config at a path or URI (YAML, or JSON by its ``.json`` name)."""
    from train.config import load_config

    return load_config(location)


def check_input(path: str) -> None:
    """A privatization job's output: ``manifest.json`` and ``shards/*.parquet``."""
    p = Path(path)
    if not p.is_dir():
        raise InputError("input: not a folder (a privatization job's output folder)")
    if not (p / MANIFEST).is_file():
        raise InputError(f"input: no {MANIFEST} (not the output of a finished privatization job)")
    if not any((p / "shards").glob("*.parquet")):
        raise InputError("input: no shards/*.parquet (the privatization job wrote no records)")


class _MetricsMirror(threading.Thread):
    """Copies the run folder's ``metrics.jsonl`` to the remote output when it has grown."""

    def __init__(self, local: Path, location: str, every: float):
        super().__init__(name="metrics-mirror", daemon=True)
        self.local, self.every = local / METRICS, every
        self.fs, self.path = open_location(location)
        self.stopped = threading.Event()
        self.size = -1

    def push(self) -> None:
        import pyarrow.fs as pafs

        try:
            size = self.local.stat().st_size if self.local.is_file() else -1
            if size > self.size:
                self.fs.create_dir(self.path, recursive=True)
                pafs.copy_files(str(self.local), f"{self.path}/{METRICS}", source_filesystem=pafs.LocalFileSystem(),
                                destination_filesystem=self.fs)
                self.size = size
        except OSError as exc:  # progress is best effort; the final upload is not
            log.warning("could not copy %s to the output: %s", METRICS, str(exc).splitlines()[0])

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.push()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=60)


def upload_run(local: Path, location: str) -> None:
    """Upload a finished run folder: everything, ``summary.json`` last."""
    files = sorted(f.relative_to(local).as_posix() for f in local.rglob("*")
                   if f.is_file() and not any(part.startswith(".") for part in f.relative_to(local).parts))
    upload_files(local, location, files, last=SUMMARY)


def run_job(config_location: str, input_location: str, output_location: str, *, keep_checkpoints: bool = False,
            overwrite: bool = False, mirror_every: float = 10.0, progress: bool = True,
            checkpoint_location: str | None = None) -> dict:
    """Run the training; returns the summary that ``main`` prints. ``checkpoint_location``
    (a path or URI; a remote one is copied locally first) replaces ``model.checkpoint``."""
    from train.run import run_training

    remote_out = is_remote(output_location)
    with tempfile.TemporaryDirectory(prefix="train-job-") as tmpname:
        tmp = Path(tmpname)
        cfg = load_config_any(config_location)
        for path, value, m, _ in marked_values(cfg, (ServerPath,)):
            if m.runner_sets and value:
                raise SpecError(f"{'.'.join(path)}: set by this command (INPUT and OUTPUT), not by the config")
        ckpt_remote = None
        if remote_out:
            clear_output(output_location, overwrite)
            if cfg.storage is None:  # Ray Train's checkpoints where every node reaches them
                ckpt_remote = f"{output_location.rstrip('/')}/{CHECKPOINTS}"
                cfg = cfg.model_copy(update={"storage": ckpt_remote})
        input_path = localize_input(input_location, tmp)
        out = tmp / "output" if remote_out else Path(local_path(output_location))
        redact = {str(Path(input_path).resolve()): "<input>", input_path: "<input>",
                  str(out.resolve()): "<output>", str(out): "<output>"}
        if checkpoint_location is not None:
            (tmp / "checkpoint").mkdir()
            ckpt = str(Path(localize_input(checkpoint_location, tmp / "checkpoint")).resolve())
            cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"checkpoint": ckpt})})
            redact[ckpt] = "<checkpoint>"
        elif cfg.model.checkpoint and cfg.model.checkpoint.startswith(("training:", "base:")):
            raise SpecError(f"model.checkpoint: {cfg.model.checkpoint} is the service's reference; give the "
                            "model folder with --checkpoint")
        mirror = None
        try:
            check_input(input_path)
            if remote_out:
                out.mkdir(parents=True)
                mirror = _MetricsMirror(out, output_location, mirror_every)
                mirror.start()
            summary = run_training(cfg.with_paths(data=str(Path(input_path).resolve()), output=str(out.resolve())),
                                   progress=progress)
        except PrivatizeError as exc:
            line = redact_paths(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, redact)
            try:
                err = type(exc)(line)
            except TypeError:  # an error class with another signature
                err = PrivatizeError(line)
            raise err from None
        finally:
            if mirror is not None:
                mirror.stop()
        if not keep_checkpoints and ckpt_remote is not None:
            delete_dir(ckpt_remote)
        elif not keep_checkpoints and cfg.storage is None:
            shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
        if remote_out:
            upload_run(out, output_location)
            where = output_location
            summary_at = f"{output_location.rstrip('/')}/{SUMMARY}"
        else:
            where, summary_at = str(out.resolve()), str((out / SUMMARY).resolve())
    keep = ("kind", "steps", "final_loss", "tokens", "seconds", "epsilon", "delta", "confidentiality")
    return {"status": "ok", "output": where, "summary": summary_at, **{k: summary[k] for k in keep if k in summary}}


def main(argv: list[str] | None = None) -> int:
    p = JobParser(prog="python -m train.job", description="Train a language model on a privatization job's output "
                                                        "(Ray Train, on the current Ray cluster).")
    p.add_argument("config", help="training config (YAML or JSON) without data.path and output: a path or a URI")
    p.add_argument("input", help="a privatization job's output folder: a path or a URI")
    p.add_argument("output", help="the run folder: a path or a URI (a local unfinished run there resumes)")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep Ray Train's checkpoints after success")
    p.add_argument("--overwrite", action="store_true", help="replace a remote output that exists")
    p.add_argument("--mirror-every", type=float, default=10.0, metavar="S",
                   help="seconds between copies of metrics.jsonl to a remote output while training")
    p.add_argument("--checkpoint", metavar="LOCATION", default=None,
                   help="the model folder (a path or a URI) to start from, in place of the config's "
                        "model.checkpoint (the service names a training's model so)")
    args = p.parse_args(argv)
    return run_entrypoint("train", args.verbose, lambda: run_job(
        args.config, args.input, args.output, keep_checkpoints=args.keep_checkpoints, overwrite=args.overwrite,
        mirror_every=args.mirror_every, checkpoint_location=args.checkpoint))


if __name__ == "__main__":
    sys.exit(main())
