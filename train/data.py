"""Shards -> tokenized, packed blocks with a per-token loss mask, with Ray Data.

The plan (read, filter the split, tokenize, pack) is the same whether Ray runs in this
process's embedded cluster or on a real one; it is materialised once per split and handed
to the Ray Train workers whole (each worker samples its own batches: Poisson sampling for
DP-SGD needs the whole dataset, not a streaming shard).

A block is ``seq_len`` token ids; documents are concatenated with ``<|endoftext|>``
between them and cut into blocks (the last block of a batch padded). ``loss`` is 1 where
the token is a prediction target: 0 on padding and, when ``mask_token_loss`` is on, on
``<MASK>`` (paper 002's Baseline1), and with ``ignore_spans`` on every token that
overlaps one of the record's character spans in that column (paper 003's
privacy-preserving training: identifiers stay in the context, never as targets). The batching is fixed (``preserve_order``, a fixed
rows-per-batch) so a corpus packs the same way on any cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privatize.errors import InputError, SpecError

PACK_ROWS = 256  # records concatenated per packing batch


def data_files(path: str) -> tuple[str, list[str]]:
    """(format, files) under a privatization output folder, a folder, or one file:
    Parquet, JSONL, or plain text (``.txt``: one record per non-blank line, in the
    column ``text``)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"data.path: {path} does not exist")
    if p.is_dir():
        root = p / "shards" if (p / "shards").is_dir() else p
        for fmt, pats in (("parquet", ("*.parquet",)), ("json", ("*.jsonl", "*.json")), ("text", ("*.txt",))):
            files = sorted(str(f) for pat in pats for f in root.glob(pat))
            if files:
                return fmt, files
        raise InputError(f"data.path: {path} has no .parquet, .jsonl or .txt files")
    if p.suffix == ".parquet":
        return "parquet", [str(p)]
    if p.suffix in (".jsonl", ".json"):
        return "json", [str(p)]
    if p.suffix == ".txt":
        return "text", [str(p)]
    raise InputError(f"data.path: {path}: expected .parquet, .jsonl or .txt")


def read_table(fmt: str, f: str):
    """One data file as an Arrow table: ``parquet``, ``json`` (JSON lines), or text (a
    ``text`` column, one non-empty line a row). The attacks read their sources with it."""
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    if fmt == "parquet":
        return pq.read_table(f)
    if fmt == "json":
        return pj.read_json(f)
    with open(f, encoding="utf-8") as fh:
        return pa.table({"text": [line.rstrip("\n") for line in fh if line.strip()]})


def read_texts(path: str, column: str, split: str = "all", limit: int | None = None) -> list[str]:
    """The texts of a split, read in this process (tokenizer training, benchmarks)."""
    import pyarrow as pa

    fmt, files = data_files(path)
    out: list[str] = []
    for f in files:
        t = read_table(fmt, f)
        _check_columns(t.schema.names, column, split, f)
        if split != "all":
            t = t.filter(pa.compute.equal(t["private"], split == "private"))
        out.extend(x for x in t[column].to_pylist() if x)
        if limit and len(out) >= limit:
            return out[:limit]
    return out


def _check_columns(names, column: str, split: str, where: str, ignore_spans: str | None = None) -> None:
    if column not in names:
        raise SpecError(f"data.text_column: {where} has no column {column!r} (columns: {', '.join(names)})")
    if ignore_spans and ignore_spans not in names:
        raise SpecError(f"data.ignore_spans: {where} has no column {ignore_spans!r} (run the identifiers stage, "
                        f"or name a column of character spans; columns: {', '.join(names)})")
    if split != "all" and "private" not in names:
        raise SpecError(f"data.split: {split}: {where} has no 'private' column "
                        "(privatize the corpus with a split_private stage first)")


class Pack:
    """Ray Data callable: a batch of texts -> packed ``ids``/``loss`` blocks."""

    def __init__(self, tokenizer_dir: str, column: str, seq_len: int, mask_token_loss: bool,
                 ignore_spans: str | None = None, ignore_kinds: tuple[str, ...] = (), per_record: bool = False,
                 owners: bool = False):
        from tokenizers import Tokenizer  # the fast tokenizer alone: no transformers import per worker

        from privatize.ciphers.tokens import MASK_TOKEN
        from train.tokenizer import EOS, PAD

        self.tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        self.column, self.seq_len = column, seq_len
        self.eos, self.pad = self.tok.token_to_id(EOS), self.tok.token_to_id(PAD)
        if self.pad is None:  # a foreign tokenizer: pad with EOS (never a target)
            self.pad = self.eos
        self.mask_id = self.tok.token_to_id(MASK_TOKEN) if mask_token_loss else None
        self.ignore_spans, self.ignore_kinds = ignore_spans, frozenset(ignore_kinds)
        self.per_record, self.owners = per_record or owners, owners

    def __call__(self, batch: dict) -> dict:
        keep = [i for i, t in enumerate(batch[self.column].tolist()) if t]
        texts = [batch[self.column][i] for i in keep]
        targets = None
        if not self.ignore_spans:
            enc = self.tok.encode_batch_fast(texts, add_special_tokens=False) if texts else []
        else:
            enc = self.tok.encode_batch(texts, add_special_tokens=False) if texts else []
            spans = [batch[self.ignore_spans][i] for i in keep]
            targets = [token_targets(e.offsets, self._spans(s)) for e, s in zip(enc, spans)]
        docs = [e.ids for e in enc]
        if not self.per_record:
            return pack(docs, self.seq_len, self.eos, self.pad, self.mask_id, targets)
        out = pack_records(docs, self.seq_len, self.eos, self.pad, self.mask_id, targets)
        if self.owners:
            who = [owner_id(batch[OWNER_COLUMN][i]) for i in keep]
            out["owner"] = np.repeat(np.asarray(who, np.int64), out["sizes"])
        del out["sizes"]
        return out

    def _spans(self, spans) -> list[tuple[int, int]]:
        if spans is None:
            return []
        return [(int(s["start"]), int(s["end"])) for s in spans
                if not self.ignore_kinds or s.get("kind") in self.ignore_kinds]


def token_targets(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> np.ndarray:
    """1 for each token that overlaps none of the character ``spans``, else 0."""
    out = np.ones(len(offsets), np.uint8)
    if not spans or not offsets:
        return out
    spans = sorted(spans)
    starts = np.array([s for s, _ in spans])
    ends = np.maximum.accumulate(np.array([e for _, e in spans]))
    tok = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    # the last span starting before the token's end; it overlaps when it ends after the token starts
    j = np.searchsorted(starts, tok[:, 1], side="left") - 1
    hit = (j >= 0) & (ends[np.clip(j, 0, None)] > tok[:, 0]) & (tok[:, 1] > tok[:, 0])
    out[hit] = 0
    return out


def pack(docs: list[list[int]], seq_len: int, eos: int, pad: int, mask_id: int | None,
         targets: list[np.ndarray] | None = None) -> dict:
    """Concatenate ``docs`` (each followed by ``eos``), cut into ``seq_len`` blocks, pad
    the last; ``loss`` zero on padding, on ``mask_id`` and where ``targets`` (one 0/1 array
    per document) is 0."""
    if not docs:
        return {"ids": np.zeros((0, seq_len), np.int32), "loss": np.zeros((0, seq_len), np.uint8)}
    flat = np.fromiter((i for d in docs for i in (*d, eos)), np.int32)
    n = -(-len(flat) // seq_len)
    ids = np.full(n * seq_len, pad, np.int32)
    ids[: len(flat)] = flat
    loss = np.zeros(n * seq_len, np.uint8)
    if targets is None:
        loss[: len(flat)] = 1
    else:
        loss[: len(flat)] = np.concatenate([np.append(t, 1) for t in targets])
    if mask_id is not None:
        loss[ids == mask_id] = 0
    return {"ids": ids.reshape(n, seq_len), "loss": loss.reshape(n, seq_len)}


def pack_records(docs: list[list[int]], seq_len: int, eos: int, pad: int, mask_id: int | None,
                 targets: list[np.ndarray] | None = None) -> dict:
    """:func:`pack` one record at a time: no block holds tokens of two records (``dp.unit:
    record`` and ``individual``). ``first`` is 1 on each record's first block and ``blocks``
    is its record's number of blocks, for the group accounting; ``sizes`` is the blocks of
    each record in turn."""
    parts = [pack([d], seq_len, eos, pad, mask_id, None if targets is None else [targets[i]])
             for i, d in enumerate(docs)]
    if not parts:
        out = pack([], seq_len, eos, pad, mask_id)
        return out | {"first": np.zeros(0, np.uint8), "blocks": np.zeros(0, np.int32), "sizes": np.zeros(0, np.int64)}
    sizes = [len(p["ids"]) for p in parts]
    first = np.concatenate([np.eye(1, n, dtype=np.uint8)[0] for n in sizes])
    return {"ids": np.concatenate([p["ids"] for p in parts]), "loss": np.concatenate([p["loss"] for p in parts]),
            "first": first, "blocks": np.repeat(np.asarray(sizes, np.int32), sizes),
            "sizes": np.asarray(sizes, np.int64)}


OWNER_COLUMN = "individual_id"


def owner_id(individual) -> int:
    """A block's owner for ``dp.unit: individual``: a 63-bit digest of the record's
    ``individual_id`` (1 or more), 0 where it has none (refused at planning); negative ids
    are the audit's canaries, each its own individual."""
    if individual is None or (isinstance(individual, float) and individual != individual) or individual == "":
        return 0
    import hashlib

    h = int.from_bytes(hashlib.blake2b(str(individual).encode("utf-8"), digest_size=8).digest(), "big")
    return max(1, h & (2 ** 63 - 1))


@dataclass(frozen=True)
class Blocks:
    """One materialised split: ``ids`` and ``loss`` of shape (blocks, seq_len), and under
    ``dp.unit: individual`` each block's ``owner`` (:func:`owner_id`)."""

    ids: np.ndarray
    loss: np.ndarray
    owner: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def target_tokens(self) -> int:
        return int(self.loss[:, 1:].sum())


LOCAL_PACK_BYTES = 64 * 2**20
"""``data.packing: auto`` packs data files of up to this many bytes (in all) in the driver's
process, larger ones with Ray Data (see :func:`pack_local`). The default is ``ray``: Ray
Data ends a packing batch at each of its read blocks (a 1 MB JSONL file: 4 blocks, 3,015
packed blocks against 3,014 here), and the identifier experiment's claim moved with that one
block (its plain model leaked 3 identifiers or 0), so ``auto`` is opt-in until it is robust."""


def data_bytes(path: str) -> int:
    """The size of the data files :func:`data_files` finds under ``path``."""
    return sum(Path(f).stat().st_size for f in data_files(path)[1])


def _columns(names, path: str, column: str, split: str, ignore_spans: str | None, owners: bool) -> list[str]:
    """The columns packing reads (a one-line error naming the field when one is missing)."""
    _check_columns(names, column, split, path, ignore_spans)
    if owners and OWNER_COLUMN not in names:
        raise SpecError(f"dp.unit: individual: {path} has no {OWNER_COLUMN} column (privatize with an hmac "
                        "pseudonym key to keep it, or choose dp.unit record or sequence)")
    return ([column] + (["private"] if split != "all" else []) + ([ignore_spans] if ignore_spans else [])
            + ([OWNER_COLUMN] if owners else []))


def plan_blocks(path: str, column: str, split: str, tokenizer_dir: str, seq_len: int, mask_token_loss: bool,
                limit: int | None = None, ignore_spans: str | None = None, ignore_kinds: tuple[str, ...] = (),
                per_record: bool = False, owners: bool = False):
    """The Ray Data plan for one split (not executed). ``per_record``: blocks never mix
    records; ``owners``: also each block's owner (``dp.unit: individual``)."""
    import ray

    fmt, files = data_files(path)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    if fmt == "parquet":
        ds = ray.data.read_parquet(files)
    elif fmt == "json":
        ds = ray.data.read_json(files)
    else:
        ds = ray.data.read_text(files, drop_empty_lines=True)
    ds = ds.select_columns(_columns(ds.schema().names, path, column, split, ignore_spans, owners))
    if split != "all":
        ds = ds.map_batches(_keep_split, fn_kwargs={"private": split == "private"}, batch_format="pyarrow",
                            batch_size=None)
    if limit:
        ds = ds.limit(limit)
    return ds.map_batches(_pack_batch, fn_args=(tokenizer_dir, column, seq_len, mask_token_loss, ignore_spans,
                                                tuple(ignore_kinds), per_record, owners),
                          batch_size=PACK_ROWS, batch_format="numpy", num_cpus=0.5)


class LocalBlocks:
    """One split packed in this process (:func:`pack_local`), answering what planning asks
    of a materialised Ray dataset (``count``, ``unique``, ``sum``, ``max``)."""

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

    def refs(self) -> list:
        """The blocks in Ray's object store, as :func:`block_refs` gives a dataset's."""
        import ray

        return [ray.put(self.columns)] if self.count() else []


def pack_local(path: str, column: str, split: str, tokenizer_dir: str, seq_len: int, mask_token_loss: bool,
               limit: int | None = None, ignore_spans: str | None = None, ignore_kinds: tuple[str, ...] = (),
               per_record: bool = False, owners: bool = False, counts_only: bool = False) -> LocalBlocks:
    """:func:`plan_blocks`' blocks, packed here with the same :class:`Pack` in the same
    batches of ``PACK_ROWS`` records in order (identical where Ray Data reads each file as one
    block, as a privatization's Parquet shards): for small data, where Ray Data's read and
    pack tasks cost seconds of worker start-up (3-10 s a training, measured) for well under
    one of work. ``counts_only``: ``ids`` and ``loss`` are dropped (planning needs their
    count, the service's admission nothing more)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fmt, files = data_files(path)
    tables = []
    for f in files:
        t = read_table(fmt, f)
        keep = _columns(t.schema.names, f, column, split, ignore_spans, owners)
        if split != "all":
            t = t.filter(pc.fill_null(pc.equal(t["private"], split == "private"), False))
        tables.append(t.select(keep))
    table = pa.concat_tables(tables) if tables else pa.table({column: pa.array([], pa.string())})
    if limit:
        table = table.slice(0, limit)
    pack = Pack(tokenizer_dir, column, seq_len, mask_token_loss, ignore_spans, tuple(ignore_kinds), per_record,
                owners)
    parts: dict[str, list] = {}
    for start in range(0, table.num_rows, PACK_ROWS):
        chunk = table.slice(start, PACK_ROWS)
        out = pack({c: np.asarray(chunk[c].to_pylist(), dtype=object) for c in chunk.column_names})
        if counts_only:
            out = {k: v for k, v in out.items() if k not in ("ids", "loss")} | {"ids": np.zeros(len(out["ids"]), np.int8)}
        for k, v in out.items():
            parts.setdefault(k, []).append(np.asarray(v))
    return LocalBlocks({k: np.concatenate(v) for k, v in parts.items()})


_PACKERS: dict = {}


def _pack_batch(batch: dict, tokenizer_dir: str, column: str, seq_len: int, mask_token_loss: bool,
                ignore_spans: str | None = None, ignore_kinds: tuple[str, ...] = (), per_record: bool = False,
                owners: bool = False) -> dict:
    """Ray Data task: one :class:`Pack` per worker process and tokenizer, reused."""
    key = (tokenizer_dir, column, seq_len, mask_token_loss, ignore_spans, ignore_kinds, per_record, owners)
    if key not in _PACKERS:
        _PACKERS.clear()
        _PACKERS[key] = Pack(*key)
    return _PACKERS[key](batch)


def _keep_split(batch, private: bool):
    import pyarrow.compute as pc

    return batch.filter(pc.fill_null(pc.equal(batch["private"], private), False))


def block_refs(ds) -> list:
    """Object references to a materialised plan's blocks as numpy batches (what the Ray
    Train workers fetch: each holds the whole split)."""
    return ds.refs() if isinstance(ds, LocalBlocks) else ds.to_numpy_refs()


def from_refs(refs: list) -> Blocks:
    """A split from :func:`block_refs` (called in a worker)."""
    import ray

    parts = [b for b in ray.get(refs) if len(b["ids"])]
    if not parts:
        return Blocks(np.zeros((0, 0), np.int32), np.zeros((0, 0), np.uint8))
    owner = (np.concatenate([np.asarray(b["owner"], np.int64) for b in parts])
             if all("owner" in b for b in parts) else None)
    return Blocks(np.concatenate([np.asarray(b["ids"], np.int32) for b in parts]),
                  np.concatenate([np.asarray(b["loss"], np.uint8) for b in parts]), owner)


def to_blocks(ds) -> Blocks:
    """Collect a dataset into arrays in this process."""
    ids, loss = [], []
    for b in ds.iter_batches(batch_size=4096, batch_format="numpy"):
        ids.append(np.asarray(b["ids"], np.int32))
        loss.append(np.asarray(b["loss"], np.uint8))
    if not ids:
        return Blocks(np.zeros((0, 0), np.int32), np.zeros((0, 0), np.uint8))
    return Blocks(np.concatenate(ids), np.concatenate(loss))
