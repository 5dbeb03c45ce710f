"""A DP run's plan made before it is admitted, in the caller's process and without Ray.

The service must know what a training will spend before it admits it against its data's
privacy ledger (``services.ledger``): the noise, sample rate, steps and delta that the run's
own planning (:func:`train.planning.plan_run`) would choose. :func:`plan_offline` runs that
same planning on the same data, tokenizer and config, packing blocks with the run's own
packer (:class:`train.data.Pack`) over the Parquet shards in process instead of Ray Data.

The result is the config's ``admitted_plan``: the run takes its noise, its sample rate (1 /
the DP phase's steps per epoch, whatever the blocks Ray Data packs now), its delta and
audit seed, at most its steps, and fails before any step if its data would weaken it
(longer records, a delta past 1/N): :func:`train.planning.admitted_phase` and
:func:`train.planning.check_admitted`.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

import numpy as np

from train.config import TrainConfig

PACK_ROWS = 1024


class LocalSplit:
    """One split's packed columns in memory, answering what planning asks of a Ray
    dataset (``count``, ``unique``, ``sum``, ``max``)."""

    def __init__(self, columns: dict[str, np.ndarray]):
        self.columns = columns

    def count(self) -> int:
        return len(self.columns.get("ids", ()))

    def unique(self, column: str) -> list:
        return np.unique(self.columns[column]).tolist()

    def sum(self, column: str):
        return int(np.sum(self.columns[column]))

    def max(self, column: str):
        return int(np.max(self.columns[column])) if len(self.columns[column]) else 0


def _split_table(path: str, column: str, split: str, limit: int | None, extra: list[str]):
    import pyarrow as pa
    import pyarrow.compute as pc

    from train.data import data_files, read_table

    fmt, files = data_files(path)
    tables = []
    for f in files:
        t = read_table(fmt, f)
        if split != "all":
            t = t.filter(pc.fill_null(pc.equal(t["private"], split == "private"), False))
        tables.append(t.select([c for c in [column, *extra] if c in t.column_names]))
    table = pa.concat_tables(tables) if tables else pa.table({column: []})
    return table.slice(0, limit) if limit else table


def _pack_split(cfg: TrainConfig, data: str, split: str, tok_dir: str) -> LocalSplit:
    from train.data import OWNER_COLUMN, Pack

    per_record = cfg.dp is not None and cfg.dp.unit == "record"
    owners = cfg.dp is not None and cfg.dp.unit == "individual"
    extra = ([cfg.data.ignore_spans] if cfg.data.ignore_spans else []) + ([OWNER_COLUMN] if owners else [])
    table = _split_table(data, cfg.data.text_column, split, cfg.data.max_records, extra)
    pack = Pack(tok_dir, cfg.data.text_column, cfg.data.seq_len, cfg.data.mask_token_loss, cfg.data.ignore_spans,
                tuple(cfg.data.ignore_kinds), per_record, owners)
    parts: dict[str, list] = {}
    for start in range(0, table.num_rows, PACK_ROWS):
        batch = {c: np.asarray(table[c].slice(start, PACK_ROWS).to_pylist(), dtype=object)
                 for c in table.column_names}
        for k, v in pack(batch).items():
            if k != "ids" and k != "loss":
                parts.setdefault(k, []).append(np.asarray(v))
            elif k == "ids":
                parts.setdefault("ids", []).append(np.zeros(len(v), np.int8))  # the count is what planning needs
    return LocalSplit({k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()})


def plan_offline(cfg: TrainConfig) -> dict | None:
    """The plan a DP run of ``cfg`` (with its ``data.path``, a local folder) would make,
    as its ``privacy_plan.json`` holds it (``train.dp.budget.Budget.to_dict()``, with the
    audit's seed); None for a run without DP. A :class:`~privatize.errors.SpecError` (one
    line, with the field) when it cannot be planned: a delta past 1/N, a target that cannot
    be met, an overspend."""
    from train.dp.audit import SEED_FIELD, canaries
    from train.planning import plan_run
    from train.run import _tokenizer, prepare

    if cfg.dp is None:
        return None
    work = Path(tempfile.mkdtemp(prefix="privatize-admission-"))
    try:
        p = prepare(cfg.with_paths(output=str(work / "run")).model_copy(update={"admitted_plan": None}))
        tok = _tokenizer(p, False, work / "tokenizer")
        data = {}
        for name, split in p.splits.items():
            local = _pack_split(p.config, p.data, split, str(work / "tokenizer"))
            data[name] = (local, local.count())
        seed, extra = None, 0
        if cfg.audit is not None:
            from train.batches import plan_phases

            seed = secrets.randbits(63)
            _, inserted = canaries(seed, cfg.audit.canaries, cfg.data.seq_len, 0, len(tok))
            split = next(ph.split for ph in plan_phases(cfg.kind, {k: n for k, (_, n) in data.items()},
                                                       cfg.optim.batch_size, cfg.dp.batch_size) if ph.dp)
            extra = int(inserted.sum())
            ds, n = data[split]
            data[split] = (ds, n + extra)
        plan = plan_run(p, tok, data, False, extra)
        out = plan.budget.to_dict()
        if seed is not None:
            out[SEED_FIELD] = seed
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
