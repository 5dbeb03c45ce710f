"""The Ray Jobs entrypoint of a detector adaptation (issue 51, item 2)::

    python -m privatize.adapt_job SPEC_URI INPUT_URI OUTPUT_URI

SPEC is an :class:`AdaptConfig` (JSON: ``format``, ``holdout``, ``epochs``, ``seed``,
``map``, ``complete``), INPUT an annotated JSONL file (records with ``text`` and ``spans``; see
:mod:`privatize.redaction.adapt`), OUTPUT the folder to write: ``detector/`` (the detector
folder ``privatize train-ner --annotated`` writes: the spaCy pipeline, ``detector.json``
with its held-out evaluation, ``pi_c.json``), then ``summary.json`` last (what the service
reads as the job's summary: the held-out figures), so a reader that finds the summary
finds the detector.

The work runs as one Ray task (one worker, ``num_cpus`` 1) on the cluster the driver
joined (``privatize.ray.cluster.connect``: inside a Ray job, that cluster; otherwise an
embedded local one): the task localises the input, trains, and uploads the output
itself, so the annotated corpus goes only from the storage to the worker and back as a
model. The detector's provenance names no local path (``source``: ``<input>``).

The last line of stdout is a one-line JSON summary. Exit codes: 0 success, 2 bad input
(config, annotated records, locations; one line on stderr), 1 anything else.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from privatize.entrypoint import JobParser, run_entrypoint
from privatize.errors import InputError, PrivatizeError, SpecError
from privatize.jobio import check_output, is_remote, local_path, localize_input, output_dir, upload_files
from privatize.policy import Quota

DETECTOR_DIR = "detector"
SUMMARY = "summary.json"
HELD_OUT_KEYS = ("recall", "miss_rate_upper_95", "char_recall", "char_precision", "span_precision")
_LABEL = r"[A-Z][A-Z0-9_]{0,31}"


class AdaptConfig(BaseModel):
    """What a detector adaptation is asked: the input's format, the held-out share, the
    epochs (a service bounds them: ``detector_max_epochs``), the seed, ``map``
    (annotated type -> spaCy label, as ``--map TYPE=LABEL``) and ``complete`` (as
    ``--complete``: the corpus annotates everything the tenant redacts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["jsonl", "tab"] = "jsonl"
    """``jsonl`` (``text``, ``spans`` with ``start``, ``end``, ``type``) or ``tab`` (the Text
    Anonymization Benchmark's JSON lines)."""
    holdout: float = Field(0.2, gt=0.0, lt=1.0)
    epochs: Annotated[int, Quota("detector_max_epochs")] = Field(10, ge=1, le=50)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    map: dict[Annotated[str, Field(min_length=1, max_length=64)], Annotated[str, Field(pattern=_LABEL)]] = Field(
        default_factory=dict, max_length=64)
    complete: bool = False
    """The corpus annotates everything the tenant redacts: the base model's other entities are
    taught as outside, and the detector redacts only the types the corpus teaches."""
    general_rehearsal: float = Field(0.5, ge=0.0, le=4.0)
    """General sentences labelled by the base model trained beside the corpus, as a share of its
    characters (as ``--general-rehearsal``)."""
    sample_terms: bool = True
    """Keep the terms the corpus annotates (rare words mostly annotated where they occur), which
    the detector then always redacts (as ``privatize train-ner`` does unless ``--no-sample-terms``)."""

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def sha256(self) -> str:
        import hashlib

        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()


def parse_config(data) -> AdaptConfig:
    """An :class:`AdaptConfig` from raw data; :class:`SpecError` ``config: <path>: <message>``
    (the first error, as the other job configs' parsers say it)."""
    if not isinstance(data, dict):
        raise SpecError("config: (config): must be a JSON object")
    try:
        return AdaptConfig.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        path = ".".join(str(p) for p in e["loc"]) or "(config)"
        raise SpecError(f"config: {path}: {e['msg'].removeprefix('Value error, ')}") from None


def summary_of(doc: dict) -> dict:
    """The figures of a ``detector.json`` that a summary holds: held-out evaluation (the
    adapted detector and the base model on the same slice), threshold, labels, ``complete``, counts."""
    ev, be = doc.get("evaluation") or {}, doc.get("base_evaluation") or {}
    prov = doc.get("provenance") or {}
    return {"score_threshold": doc.get("score_threshold"),
            "labels": doc.get("labels") or {}, "complete": bool(doc.get("complete")),
            "terms": (doc.get("terms") or {}).get("terms", 0),
            "held_out": {k: ev.get(k) for k in HELD_OUT_KEYS},
            "held_out_by_type": ev.get("by_type"),
            "base_held_out": {k: be.get(k) for k in HELD_OUT_KEYS},
            "pi_c": {k: (doc.get("pi_c") or {}).get(k) for k in ("threshold", "delta_2", "calibrated")},
            "records": prov.get("records"), "train_records": prov.get("train_records"),
            "held_out_records": prov.get("held_out_records"), "held_out_spans": prov.get("held_out_spans"),
            "epochs": prov.get("epochs"), "epochs_run": prov.get("epochs_run"), "batch_size": prov.get("batch_size"),
            "seed": prov.get("seed"), "base_model": prov.get("base_model"),
            "source_sha256": prov.get("source_sha256"), "seconds": prov.get("seconds")}


def _read_config(location: str) -> AdaptConfig:
    from privatize.io.configfile import read_mapping

    return parse_config(read_mapping(location if is_remote(location) else local_path(location), what="config"))


def adapt_to(config: AdaptConfig, input_location: str, output_location: str) -> dict:
    """Localise the input, adapt, write ``detector/`` then ``summary.json`` at the output;
    returns the summary (what runs on the worker)."""
    from privatize.redaction.adapt import adapt
    from privatize.redaction.defaults import DETECTOR_FILE

    remote_out = is_remote(output_location)
    with tempfile.TemporaryDirectory(prefix="privatize-adapt-") as tmpname:
        tmp = Path(tmpname)
        if remote_out:
            check_output(output_location, False)
        elif Path(local_path(output_location), SUMMARY).exists():
            raise InputError(f"{output_location}: output exists")
        annotated = localize_input(input_location, tmp)
        if Path(annotated).is_dir():
            raise InputError("<input>: an annotated corpus is one JSONL file")
        out = output_dir(output_location, tmp)
        out.mkdir(parents=True, exist_ok=True)
        folder = out / DETECTOR_DIR
        try:
            doc = adapt(annotated, folder, fmt=config.format, epochs=config.epochs, seed=config.seed,
                        holdout=config.holdout, label_map=dict(config.map), complete=config.complete,
                        sample_terms=config.sample_terms, general_rehearsal=config.general_rehearsal, force=True,
                        progress=lambda msg: print(f"adapt: {msg}", file=sys.stderr, flush=True))
        except InputError as exc:  # name the input, never this machine's path
            raise InputError(str(exc).replace(str(annotated), "<input>").replace("--annotated ", "")) from None
        doc["provenance"]["source"] = "<input>"
        (folder / DETECTOR_FILE).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        (folder / "README.md").write_text(
            (folder / "README.md").read_text(encoding="utf-8").replace(str(annotated), "<input>"), encoding="utf-8")
        summary = summary_of(doc)
        (out / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        if remote_out:
            upload_files(out, output_location, [DETECTOR_DIR, SUMMARY], last=SUMMARY)
        return summary


def _adapt_task(config: AdaptConfig, input_location: str, output_location: str) -> dict:
    """:func:`adapt_to` on a worker: a bad input comes back as ``{"error": one line}`` (not
    as Ray's wrapped traceback)."""
    try:
        return adapt_to(config, input_location, output_location)
    except PrivatizeError as exc:
        return {"error": (str(exc).splitlines() or [type(exc).__name__])[0]}


def run_job(spec_location: str, input_location: str, output_location: str) -> dict:
    """Read the config, run :func:`adapt_to` as one Ray task, and return its summary."""
    config = _read_config(spec_location)
    from privatize.ray.cluster import connect, task

    connected = connect()
    try:
        import ray

        work = task(_adapt_task, num_cpus=1, max_retries=0)
        summary = ray.get(work.remote(config, input_location, output_location))
        if "error" in summary:
            raise InputError(summary["error"])
    finally:
        if connected:
            import ray

            ray.shutdown()
    return {"status": "ok", "output": output_location, **summary}


def main(argv: list[str] | None = None) -> int:
    p = JobParser(prog="python -m privatize.adapt_job",
                  description="Adapt the detector to an annotated corpus on the current Ray cluster.")
    p.add_argument("spec", help="the adaptation's config (JSON: format, holdout, epochs, seed, map): a path or a URI")
    p.add_argument("input", help="the annotated JSONL file: a path or a URI")
    p.add_argument("output", help="the output folder (detector/ and summary.json): a path or a URI")
    args = p.parse_args(argv)
    return run_entrypoint("adapt", args.verbose, lambda: run_job(args.spec, args.input, args.output))


if __name__ == "__main__":
    sys.exit(main())
