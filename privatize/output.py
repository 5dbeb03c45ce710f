"""The deterministic output layout, the manifest, the quarantine, and ``verify``.

Layout of an output directory::

    manifest.json
    shards/part-00000-of-00008.parquet   (N fixed by the spec; empty shards written too)

A row goes to shard ``blake2b(doc_id) mod N``; rows are sorted by ``doc_id`` within a
shard; columns are ``doc_id, text, individual_id, meta`` then the stage columns sorted
by name; the Parquet writer settings are fixed. So the same spec and input give
byte-identical shards whatever the runner, batch size or worker count.

The quarantine (records a stage could not process, with their reasons) is written
*outside* the output directory, as ``<output>.quarantine.jsonl`` with mode 0600, and is
never served.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from privatize.version import __version__
from privatize.errors import OutputError, RecordError
from privatize.execution import DSTAGE, QSTAGE, READ_STAGE
from privatize.stage import DROP, QUARANTINE, STAT_PREFIX, add_stats

MANIFEST = "manifest.json"
SHARD_DIR = "shards"
SCHEMA_VERSION = 1
BASE_COLUMNS = ("doc_id", "text", "individual_id", "meta")
_ROW_GROUP = 65536


def shard_name(i: int, n: int) -> str:
    return f"part-{i:05d}-of-{n:05d}.parquet"


def shard_of(doc_ids: pa.Array | pa.ChunkedArray | list[str], n: int) -> np.ndarray:
    """The shard of each ``doc_id``: its 8-byte BLAKE2b, read little-endian, mod ``n``.

    One digest per id is the floor (a per-row Python call, about half the time of a
    dedup run's final pass); the digests are joined and reduced in NumPy, and Arrow ids
    are hashed as the UTF-8 bytes they hold, with no str round trip (0.6 s per million
    ids here, against 0.87 s converting each digest to an int in Python)."""
    if isinstance(doc_ids, (pa.Array, pa.ChunkedArray)):
        ids = doc_ids.cast(pa.large_binary()).to_pylist()
    else:
        ids = [d.encode("utf-8") for d in doc_ids]
    if not ids:
        return np.zeros(0, np.int64)
    blake2b = hashlib.blake2b
    digests = np.frombuffer(b"".join([blake2b(d, digest_size=8).digest() for d in ids]), dtype="<u8")
    return (digests % np.uint64(n)).astype(np.int64)


def quarantine_path(output_dir: str | os.PathLike) -> Path:
    p = Path(output_dir)
    return p.with_name(p.name + ".quarantine.jsonl")


def _canonical_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(_canonical_field(t.value_field))
    if pa.types.is_list(t):
        return pa.list_(_canonical_field(t.value_field))
    if pa.types.is_struct(t):
        return pa.struct([_canonical_field(f) for f in t])
    return t


def _canonical_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, _canonical_type(f.type), nullable=True)


def canonicalize(table: pa.Table) -> pa.Table:
    """Public columns only, in the fixed order, with canonical Arrow types."""
    public = [n for n in table.column_names if not n.startswith("_")]
    extra = sorted(n for n in public if n not in BASE_COLUMNS)
    cols = [c for c in BASE_COLUMNS if c in public] + extra
    table = table.select(cols)
    schema = pa.schema([_canonical_field(f) for f in table.schema])
    return table.cast(schema).replace_schema_metadata(None)


def filter_meta(meta: pa.ChunkedArray, allowed: list[str]) -> pa.Array:
    """Keep only the allowed keys of each record's JSON ``meta`` (none by default)."""
    if not allowed:
        return pa.nulls(len(meta), pa.string())
    out = []
    for m in meta.to_pylist():
        if m is None:
            out.append(None)
            continue
        kept = {k: v for k, v in json.loads(m).items() if k in allowed}
        out.append(json.dumps(kept, ensure_ascii=False, sort_keys=True) if kept else None)
    return pa.array(out, pa.string())


def pseudonymize(ids: pa.ChunkedArray, key: bytes | None) -> pa.Array:
    """Keyed pseudonym of ``individual_id`` (HMAC-SHA256, hex, 32 chars); without a key
    the column is emptied: the raw value never leaves."""
    if key is None:
        return pa.nulls(len(ids), pa.string())
    return pa.array([None if v is None else hmac.new(key, v.encode("utf-8"), hashlib.sha256).hexdigest()[:32]
                     for v in ids.to_pylist()], pa.string())


def prepare_output(rows: pa.Table, *, meta_keys: list[str], pseudonym_key: bytes | None) -> pa.Table:
    if "meta" in rows.column_names:
        rows = rows.set_column(rows.schema.get_field_index("meta"), "meta", filter_meta(rows["meta"], meta_keys))
    if "individual_id" in rows.column_names:
        rows = rows.set_column(rows.schema.get_field_index("individual_id"), "individual_id",
                               pseudonymize(rows["individual_id"], pseudonym_key))
    return canonicalize(rows)


def _write_parquet(table: pa.Table, where) -> None:
    # one chunk per column: page boundaries then depend on the rows alone, never on how
    # a runner happened to chunk the table
    pq.write_table(table.combine_chunks(), where, compression="zstd", compression_level=3,
                   row_group_size=_ROW_GROUP, use_dictionary=False, write_statistics=False, version="2.6",
                   data_page_version="1.0", store_schema=True)


def write_shard(table: pa.Table, path: Path) -> None:
    _write_parquet(table, path)


def shard_bytes(table: pa.Table) -> bytes:
    """The bytes :func:`write_shard` writes for ``table`` (a worker builds a shard in
    memory; the driver stores it with :meth:`OutputWriter.put_shard`)."""
    sink = pa.BufferOutputStream()
    _write_parquet(table, sink)
    return sink.getvalue().to_pybytes()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def split_final_rows(rows: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(output rows, quarantined rows, dropped rows)."""
    q = pc.is_valid(rows[QUARANTINE]) if QUARANTINE in rows.column_names else pa.array([False] * rows.num_rows)
    d = pc.is_valid(rows[DROP]) if DROP in rows.column_names else pa.array([False] * rows.num_rows)
    d = pc.and_(d, pc.invert(q))
    if not pc.any(q).as_py() and not pc.any(d).as_py():  # the usual case: no copy of the rows
        return rows, rows.slice(0, 0), rows.slice(0, 0)
    keep = pc.invert(pc.or_(q, d))
    return rows.filter(keep), rows.filter(q), rows.filter(d)


@dataclass
class StageTally:
    """What one stage position counted: its records, seconds and per-row statistics."""

    records_in: int = 0
    records_out: int = 0
    seconds: float = 0.0
    quarantined: int = 0
    dropped: int = 0
    stats: dict[str, float] = field(default_factory=dict)


@dataclass
class Tally:
    """Everything a run counts, in one typed value: the in-process runner fills one, each
    block of the Ray runner's final pass fills its own and the driver merges them
    (:meth:`merge`); :func:`build_manifest` reads it. Stage ``-1`` is reading."""

    num_stages: int
    input_records: int = 0
    output_records: int = 0
    quarantined: int = 0
    dropped: int = 0
    stages: dict[int, StageTally] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for i in range(READ_STAGE, self.num_stages):
            self.stages.setdefault(i, StageTally())

    def add_final_rows(self, rows: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
        """Count final rows (output, quarantined, dropped, and the statistics they carry);
        returns them split as :func:`split_final_rows` does."""
        out, q, d = split_final_rows(rows)
        self.output_records += out.num_rows
        self.quarantined += q.num_rows
        self.dropped += d.num_rows
        for col, attr in ((QSTAGE, "quarantined"), (DSTAGE, "dropped")):
            if col in rows.column_names:
                vals, counts = np.unique(rows[col].drop_null().to_numpy(), return_counts=True)
                for v, c in zip(vals, counts):
                    setattr(self.stages[int(v)], attr, getattr(self.stages[int(v)], attr) + int(c))
        for name in rows.column_names:
            if name.startswith(STAT_PREFIX):
                idx, stat = name[len(STAT_PREFIX):].split(".", 1)
                st = self.stages[int(idx)].stats
                st[stat] = st.get(stat, 0) + (pc.sum(rows[name]).as_py() or 0)
        return out, q, d

    def add_timing(self, index: int, records_in: int, records_out: int, seconds: float) -> None:
        st = self.stages[index]
        st.records_in += records_in
        st.records_out += records_out
        st.seconds += seconds

    def merge(self, other: "Tally") -> "Tally":
        self.input_records += other.input_records
        self.output_records += other.output_records
        self.quarantined += other.quarantined
        self.dropped += other.dropped
        for i, o in other.stages.items():
            st = self.stages[i]
            for attr in ("records_in", "records_out", "seconds", "quarantined", "dropped"):
                setattr(st, attr, getattr(st, attr) + getattr(o, attr))
            add_stats(st.stats, o.stats)
        self.key_ids.update(other.key_ids)
        return self

    def stage_entries(self, kinds: list[str]) -> list[dict]:
        entries = []
        for i, kind in enumerate(kinds):
            st = self.stages[i]
            entry = {"index": i, "kind": kind, "records_in": st.records_in, "records_out": st.records_out,
                     "seconds": round(st.seconds, 4), "quarantined": st.quarantined, "dropped": st.dropped,
                     "stats": st.stats}
            expanded = st.stats.get("expanded", 0)
            entry["reconciled"] = st.records_in + expanded == st.records_out + st.quarantined + st.dropped
            entries.append(entry)
        return entries


def check_strict(quarantined: pa.Table, stage_names: dict[int, str], files: list[str]) -> None:
    """``--strict``: the first quarantined record (in the global order) as an error."""
    if not quarantined.num_rows:
        return
    r = quarantined.slice(0, 1).to_pylist()[0]
    where = f"{files[r['_src']]}:{r['_line']}" if 0 <= r["_src"] < len(files) else f"line {r['_line']}"
    raise RecordError(f"{where}: {r[QUARANTINE]} (record {r['doc_id']!r}, stage "
                      f"{stage_names.get(r.get(QSTAGE, READ_STAGE), '?')}) "
                      f"[--strict; {quarantined.num_rows} record(s) in all]")


def build_manifest(spec, tally: Tally, kinds: list[str], *, shards: list[dict], quarantine: str | None,
                   quarantine_records: int, files: list[str], runner: str) -> dict:
    """The manifest (without ``seconds``) from a run's :class:`Tally`; every runner builds
    it here, so the fields agree."""
    manifest = manifest_skeleton(spec.to_dict(), spec.sha256())
    key_ids = {k: tally.key_ids[k] for k in sorted(tally.key_ids, key=_key_id_order)}
    manifest.update({
        "runner": runner,
        "inputs": files,
        "counts": {"input_records": tally.input_records, "read_quarantined": tally.stages[READ_STAGE].quarantined,
                   "output_records": tally.output_records, "quarantined": tally.quarantined,
                   "dropped": tally.dropped},
        "stages": tally.stage_entries(kinds),
        "key_ids": key_ids,
        "shards": shards,
        "quarantine": {"path": quarantine, "records": quarantine_records},
    })
    split = split_summary(spec, manifest["stages"])
    if split is not None:
        manifest["split"] = split
    if getattr(spec, "quality", None) is not None:
        manifest["quality"] = spec.quality.model_dump(mode="json")
    elif split is not None and split.get("pi_c", {}).get("delta_2") is not None:
        pic = split["pi_c"]
        from privatize.redaction.calibration import with_miss_share

        # gamma covers what pi misses and what the redact stage's miss_share leaves readable
        missed = [s for s in spec.stages if getattr(s, "kind", None) == "redact"][-1].miss_share  # pi_c's stage
        missed = missed if pic["gamma"] is not None else 0.0
        manifest["quality"] = {"gamma": with_miss_share(pic["gamma"], missed),
                               "delta_2": pic["delta_2"],
                               "source": f"calibrated pi_c ({pic['model']}, domain {pic['domain']}"
                                         + (", scope rest: secret sentences that keep a readable secret after pi"
                                            if pic.get("scope") == "rest" else "")
                                         + "): "
                                         + ("the largest per-corpus " if pic.get("delta_2_pooled") is not None else "")
                                         + "one-sided 95% upper bound on secret sentences routed public, "
                                           "measured on "
                                         f"{'; '.join(pic.get('calibration_data') or [])}; gamma: "
                                         + ("the largest per-corpus share of " if pic.get("gamma_pooled") is not None
                                            else "")
                                         + "secret sentences pi leaves readable there"
                                         + (f", with the redact stage's miss_share {missed:g} of pi's hits left "
                                            "in the clear" if missed else "")
                                         + " (not this corpus: give quality in the spec "
                                         "where the data owner measured its own)"}
    return manifest


def split_summary(spec, stages: list[dict]) -> dict | None:
    """The CRT split at a glance (for a spec with ``split_private``): public and private
    records, the public share, and the conservative policy that routed them (the
    calibrated model's threshold and delta_2's bound with their provenance, or
    ``strict``)."""
    kinds = [getattr(s, "kind", None) for s in spec.stages]
    if "split_private" not in kinds:
        return None
    stats = stages[kinds.index("split_private")]["stats"] if len(stages) > kinds.index("split_private") else {}
    pub, priv = int(stats.get("public", 0)), int(stats.get("private", 0))
    out = {"public": pub, "private": priv, "public_share": pub / (pub + priv) if pub + priv else None}
    redacts = [s for s in spec.stages if getattr(s, "kind", None) == "redact"]
    if redacts:
        pic = redacts[-1].pi_c
        if pic.policy == "calibrated":
            from privatize.redaction.calibration import load_model
            from privatize.redaction.defaults import pi_c_model_file
            from privatize.refs import model_folder

            # the model the detector routed with: an adapted detector folder's own where it has one
            folder = model_folder(redacts[-1].model, "redact.model")
            out["pi_c"] = load_model(pi_c_model_file(folder, pic.calibration)).summary(pic.domain, pic.scope)
        else:
            out["pi_c"] = {"policy": "strict", "scope": pic.scope}
        redact_stats = stages[kinds.index("redact")]["stats"] if len(stages) > kinds.index("redact") else {}
        out["private_by"] = {k.split(".", 1)[1]: v for k, v in sorted(redact_stats.items())
                             if k.startswith("pi_c_by.") and v}
    return out


def _key_id_order(name: str) -> tuple:
    """``stages.<i>.<name>`` by stage position, then ``output.*``."""
    parts = name.split(".")
    return (0, int(parts[1]), name) if parts[0] == "stages" else (1, 0, name)


def write_quarantine(rows: pa.Table, path: Path, stage_names: dict[int, str]) -> int:
    """JSONL, mode 0600, atomically; nothing is written when there is nothing to write."""
    if rows.num_rows == 0:
        if path.exists():
            path.unlink()
        return 0
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            qs = rows[QSTAGE].to_pylist() if QSTAGE in rows.column_names else [READ_STAGE] * rows.num_rows
            for doc_id, reason, st, text, src, line in zip(
                    rows["doc_id"].to_pylist(), rows[QUARANTINE].to_pylist(), qs, rows["text"].to_pylist(),
                    rows["_src"].to_pylist(), rows["_line"].to_pylist()):
                fh.write(json.dumps({"doc_id": doc_id, "stage": stage_names.get(st, str(st)), "reason": reason,
                                     "input": src, "line": line, "text": text}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rows.num_rows


@dataclass
class OutputWriter:
    """Writes shards and manifest into a temporary sibling directory, then renames it
    into place: a reader sees the whole output or none of it."""

    output_dir: Path
    num_shards: int
    overwrite: bool = False
    tmp_dir: Path = field(init=False)

    def __post_init__(self):
        self.output_dir = Path(self.output_dir)
        if self.output_dir.exists() and not self.overwrite:
            raise OutputError(f"{self.output_dir}: output directory exists (use --overwrite to replace it)")
        self.output_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = self.output_dir.with_name(f".{self.output_dir.name}.tmp-{uuid.uuid4().hex[:8]}")
        (self.tmp_dir / SHARD_DIR).mkdir(parents=True)

    def write_shards(self, table: pa.Table) -> list[dict]:
        """Partition ``table`` (already canonical) into the fixed shards."""
        n = self.num_shards
        shard = shard_of(table["doc_id"], n) if table.num_rows else np.zeros(0, np.int64)
        entries = []
        for i in range(n):
            part = table.filter(pa.array(shard == i)) if table.num_rows else table
            if part.num_rows:
                part = part.take(pc.sort_indices(part, sort_keys=[("doc_id", "ascending")]))
            path = self.shard_path(i)
            write_shard(part, path)
            entries.append(self._entry(i, part.num_rows, path.stat().st_size, sha256_file(path)))
        return entries

    def shard_path(self, i: int) -> Path:
        """Where shard ``i`` goes before the commit (a worker on this machine may write it)."""
        return self.tmp_dir / SHARD_DIR / shard_name(i, self.num_shards)

    def _entry(self, i: int, rows: int, size: int, sha256: str) -> dict:
        return {"file": f"{SHARD_DIR}/{shard_name(i, self.num_shards)}", "rows": rows, "bytes": size,
                "sha256": sha256}

    def adopt_shard(self, i: int, rows: int, size: int, sha256: str) -> dict:
        """The manifest entry of shard ``i``, written to :meth:`shard_path` by a worker."""
        path = self.shard_path(i)
        if not path.is_file() or path.stat().st_size != size:
            raise OutputError(f"{path}: shard missing or truncated ({size} bytes expected)")
        return self._entry(i, rows, size, sha256)

    def put_shard(self, i: int, data: bytes, rows: int) -> dict:
        """Store shard ``i`` built elsewhere (:func:`shard_bytes`); returns its manifest entry."""
        self.shard_path(i).write_bytes(data)
        return self._entry(i, rows, len(data), hashlib.sha256(data).hexdigest())

    def commit(self, manifest: dict) -> None:
        body = json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
        (self.tmp_dir / MANIFEST).write_text(body, encoding="utf-8")
        old = None
        if self.output_dir.exists():
            old = self.output_dir.with_name(f".{self.output_dir.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(self.output_dir, old)
        os.replace(self.tmp_dir, self.output_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.tmp_dir, ignore_errors=True)


def manifest_skeleton(spec_dict: dict, spec_hash: str) -> dict:
    return {"schema_version": SCHEMA_VERSION, "created_by": f"privatize {__version__}",
            "spec": spec_dict, "spec_sha256": spec_hash}


def verify(output_dir: str | os.PathLike) -> list[str]:
    """Problems found in an output directory (empty list: intact)."""
    out = Path(output_dir)
    problems: list[str] = []
    mpath = out / MANIFEST
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"{mpath}: missing"]
    except (OSError, ValueError) as exc:
        return [f"{mpath}: unreadable ({exc})"]
    if manifest.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"{mpath}: unknown schema_version {manifest.get('schema_version')!r}")
    listed = set()
    total = 0
    for entry in manifest.get("shards", []):
        p = out / entry["file"]
        listed.add(entry["file"])
        if not p.is_file():
            problems.append(f"{p}: missing")
            continue
        if sha256_file(p) != entry["sha256"]:
            problems.append(f"{p}: SHA-256 differs from the manifest")
            continue
        rows = pq.ParquetFile(p).metadata.num_rows
        total += rows
        if rows != entry["rows"]:
            problems.append(f"{p}: {rows} rows, manifest says {entry['rows']}")
    on_disk = {p.relative_to(out).as_posix() for p in (out / SHARD_DIR).glob("*")} if (out / SHARD_DIR).exists() else set()
    for extra in sorted(on_disk - listed):
        problems.append(f"{out / extra}: not listed in the manifest")
    expected = manifest.get("counts", {}).get("output_records")
    if expected is not None and not problems and total != expected:
        problems.append(f"{out}: shards hold {total} rows, manifest counts {expected}")
    return problems
