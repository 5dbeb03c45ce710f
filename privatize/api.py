"""The one way to run a privatization spec, whatever runs it::

    import privatize

    manifest = privatize.run(spec, "corpus.jsonl", "out/", runner="ray",
                             options=privatize.RunOptions(strict=True))

``spec`` is a :class:`~privatize.spec.PipelineSpec`, a mapping, or a path to a YAML / JSON
file (its folder is then where ``file:`` key paths resolve, unless ``spec_dir`` says
otherwise). Everything that can be checked before work starts is checked here, in the
caller's process, with one-line errors (:mod:`privatize.errors`): the spec (field paths),
the runner name, the options and the input (exists, readable, formats known); each runner
checks the output (absent, or ``overwrite``) before its first step (Opacus'
``make_private`` is the model: one call, validated up front, the same result object
whichever engine runs).

Both runners give byte-identical shards and the same manifest fields; ``runner="ray"``
joins ``address`` (or ``RAY_ADDRESS``, or starts an embedded local Ray).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from privatize.errors import SpecError
from privatize.options import DEFAULT_RANGE_BYTES, RunOptions

__all__ = ["DEFAULT_RANGE_BYTES", "RUNNERS", "RunOptions", "prepare", "run"]

RUNNERS = ("local", "ray")


def _spec_of(spec: Any, spec_dir: str | None):
    """(PipelineSpec, the folder key paths resolve against)."""
    from privatize.spec import PipelineSpec, load_spec, parse_spec

    if isinstance(spec, PipelineSpec):
        return spec, spec_dir
    if isinstance(spec, dict):
        return parse_spec(spec), spec_dir
    if isinstance(spec, (str, Path)):
        p = Path(spec)
        return load_spec(p), spec_dir if spec_dir is not None else str(p.resolve().parent)
    raise SpecError(f"spec: expected a PipelineSpec, a mapping or a file path, not {type(spec).__name__}")


def prepare(spec: Any, input: str | Path, output: str | Path, *, runner: str = "local",
            spec_dir: str | None = None, options: RunOptions | None = None):
    """Everything :func:`run` checks before any work: (spec, spec_dir, input files, options)."""
    from privatize.records import list_inputs
    from privatize.spec import check_file_key_kinds

    if runner not in RUNNERS:
        raise SpecError(f"runner: must be one of {', '.join(RUNNERS)}, not {runner!r}")
    opts = options or RunOptions()
    if not isinstance(opts, RunOptions):
        raise SpecError(f"options: expected privatize.RunOptions, not {type(opts).__name__}")
    spec, spec_dir = _spec_of(spec, spec_dir)
    files = list_inputs(input, spec.input.format)
    # a key of the wrong kind (an aes-siv key for encrypt_text) is one line now, not a
    # failed task later; on a cluster, key files only the workers hold are theirs to check
    check_file_key_kinds(spec, spec_dir, missing_ok=runner == "ray")
    return spec, spec_dir, files, opts


def run(spec: Any, input: str | Path, output: str | Path, *, runner: Literal["local", "ray"] = "local",
        spec_dir: str | None = None, address: str | None = None, options: RunOptions | None = None,
        **option_fields) -> dict:
    """Run ``spec`` on ``input`` into ``output`` (written to a temporary sibling and
    renamed into place); returns the manifest. ``address``: the Ray cluster (``runner="ray"``
    only; default ``RAY_ADDRESS``, else an embedded local cluster). Options come as
    ``options=RunOptions(...)`` or as its fields (``batch_size=16, strict=True``), not both."""
    if address is not None and runner != "ray":
        raise SpecError("address: only the ray runner joins a cluster")
    if option_fields:
        if options is not None:
            raise TypeError("give options=RunOptions(...) or option fields, not both")
        options = RunOptions.from_kwargs(**option_fields)
    spec, spec_dir, files, opts = prepare(spec, input, output, runner=runner, spec_dir=spec_dir, options=options)
    if runner == "ray":
        from privatize.ray.run import run_ray

        return run_ray(spec, files, Path(output), spec_dir=spec_dir, address=address, options=opts)
    from privatize.runner import run_local

    return run_local(spec, files, Path(output), spec_dir=spec_dir, options=opts)
