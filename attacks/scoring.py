"""Per-token scores of many texts (membership inference's input): in this process, or on
Ray Data actors that load the model once each (``scoring.workers``)."""

from __future__ import annotations

import os
import sys

import numpy as np


def progress_bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="ex", file=sys.stderr, disable=not enabled, leave=False,
                dynamic_ncols=True)


def score(model_path: str, texts: list[str], scoring, progress: bool, desc: str, adapter=None):
    """Per-token scores of ``texts``: in this process (with ``adapter`` when the caller
    has the model loaded already), or on ``scoring.workers`` Ray actors (``scoring``: the
    config's ``ScoringSpec``)."""
    from attacks.model import ModelAdapter

    if scoring.workers == 0:
        adapter = adapter or ModelAdapter.load(model_path)
        with progress_bar(len(texts), desc, progress) as bar:
            return adapter.token_scores(texts, batch_tokens=scoring.batch_tokens, progress=bar.update), {os.getpid()}
    return score_on_ray(model_path, texts, workers=scoring.workers, batch_tokens=scoring.batch_tokens)


class _Scorer:
    """Ray Data actor: loads the model once, scores batches of texts."""

    def __init__(self, model_path: str, batch_tokens: int):
        from attacks.model import ModelAdapter

        # one CPU per actor: the actors are the parallelism
        self.adapter = ModelAdapter.load(model_path, threads=1)
        self.batch_tokens = batch_tokens

    def __call__(self, batch):
        texts = batch.column("text").to_pylist()
        got = self.adapter.token_scores(texts, batch_tokens=self.batch_tokens)
        return pa_table_of_scores(batch.column("i"), got, os.getpid())


def pa_table_of_scores(index, scores, pid: int):
    """Scores as Arrow list columns built from flat numpy arrays (no Python floats)."""
    import pyarrow as pa

    offsets = pa.array(np.concatenate([[0], np.cumsum([len(s.logprobs) for s in scores])]).astype(np.int32))

    def col(name: str):
        flat = np.concatenate([getattr(s, name) for s in scores]) if scores else np.zeros(0)
        return pa.ListArray.from_arrays(offsets, pa.array(flat.astype(np.float32)))

    return pa.table({"i": index, "logprobs": col("logprobs"), "mu": col("mu"), "sigma": col("sigma"),
                     "pid": pa.array([pid] * len(scores), pa.int64())})


def score_on_ray(model_path: str, texts: list[str], *, workers: int, batch_tokens: int = 16384):
    """Score ``texts`` on ``workers`` Ray Data actors; returns (scores in input order, pids)."""
    import pyarrow as pa
    import ray

    from attacks.model import TokenScores
    from privatize.ray.cluster import connect

    connect()
    ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)],
                             override_num_blocks=max(1, min(len(texts), workers * 4)))
    # at least four batches per worker, so every actor gets a share once loaded
    batch = max(1, min(64, -(-len(texts) // (workers * 4))))
    # the model folder is a path the actors read, never key material
    ds = ds.map_batches(_Scorer, fn_constructor_args=(str(model_path), batch_tokens), batch_size=batch,
                        batch_format="pyarrow", num_cpus=1,
                        compute=ray.data.ActorPoolStrategy(min_size=workers, max_size=workers))
    tables = [t for t in ray.get(ds.to_arrow_refs()) if t.num_rows]
    table = pa.concat_tables(tables).combine_chunks() if tables else None
    out: list = [None] * len(texts)
    pids: set[int] = set()
    if table is not None:
        cols = {}
        for name in ("logprobs", "mu", "sigma"):
            arr = table.column(name).chunk(0)
            cols[name] = (arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=False))
        for r, i in enumerate(table.column("i").to_numpy()):
            parts = [vals[offs[r]: offs[r + 1]] for offs, vals in (cols["logprobs"], cols["mu"], cols["sigma"])]
            out[int(i)] = TokenScores(*parts)
        pids = set(table.column("pid").to_pylist())
    return out, pids
