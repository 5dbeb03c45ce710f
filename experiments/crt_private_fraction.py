"""CRT routing on CustomerSim with dialogue turns as data points (``split unit: line``):
the share of turns routed to the private split, with and without dedup, for several
``min_length`` settings, and with the redact stage (pi, pi_c) where it is installed:
split -> dedup -> redact -> split_private, the recipe of the CRT paper (Algorithm 1).

Besides the private fraction, each row says how many of the corpus' gold secrets
(names, phone and order numbers, addresses, tracking numbers, the canary; the
``spans`` of the JSONL) are still readable in a turn routed *public*: the ones that
would be trained on without DP.

    python -m experiments.crt_private_fraction [--limit N] [--no-redact]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from experiments.common import machine, need_data, save_result

try:  # the redact stage registers itself on import; the spec must see it first
    import privatize.stages.redact  # noqa: F401
    HAVE_REDACT = True
except Exception as exc:  # noqa: BLE001 - report why and go on without it
    HAVE_REDACT = False
    REDACT_ERROR = f"{type(exc).__name__}: {exc}"

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from privatize import run as run_pipeline  # noqa: E402
from privatize.spec import parse_spec  # noqa: E402


def gold_spans(corpus: Path, limit: int | None) -> list[tuple[str, int, int, str]]:
    out = []
    with open(corpus, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if limit is not None and i >= limit:
                break
            r = json.loads(line)
            out += [(r["id"], s["start"], s["end"], s["text"]) for s in r.get("spans", [])]
    return out


def run(corpus: Path, stages: list[dict]) -> tuple[dict, pa.Table, float]:
    spec = parse_spec({"stages": stages, "output": {"num_shards": 4}})
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        m = run_pipeline(spec, corpus, Path(d) / "out")
        secs = time.perf_counter() - t
        cols = ["doc_id", "parent_id", "start", "end", "text", "private", "dedup_hit", "pi_hit", "pi_c_hit"]
        tables = [pq.read_table(p) for p in sorted((Path(d) / "out" / "shards").glob("*.parquet"))]
        rows = pa.concat_tables([t_.select([c for c in cols if c in t_.column_names]) for t_ in tables])
    return m, rows, secs


def exposed(rows: pa.Table, private: pa.Array, gold: list[tuple[str, int, int, str]]) -> int:
    """Gold secrets whose text is still in a turn routed public."""
    public = rows.filter(pc.invert(private))
    by_parent: dict[str, list[tuple[int, int, str]]] = {}
    for p, s, e, t in zip(public["parent_id"].to_pylist(), public["start"].to_pylist(), public["end"].to_pylist(),
                          public["text"].to_pylist()):
        by_parent.setdefault(p, []).append((s, e, t))
    n = 0
    for parent, s, e, secret in gold:
        for rs, re_, text in by_parent.get(parent, ()):
            if rs <= s and e <= re_ and secret in text:
                n += 1
                break
    return n


def private_of(rows: pa.Table, flags: list[str]) -> pa.Array:
    out = None
    for f in flags:
        v = pc.fill_null(rows[f], False)
        out = v if out is None else pc.or_(out, v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None, help="first N records of train.jsonl only")
    ap.add_argument("--no-redact", action="store_true")
    args = ap.parse_args()
    src = need_data() / "customersim" / "train.jsonl"
    corpus = src
    tmp = None
    if args.limit:
        tmp = tempfile.TemporaryDirectory()
        corpus = Path(tmp.name) / "train.jsonl"
        with open(src, encoding="utf-8") as fh, open(corpus, "w", encoding="utf-8") as out:
            for i, line in enumerate(fh):
                if i >= args.limit:
                    break
                out.write(line)
    gold = gold_spans(corpus, None)
    n_records = sum(1 for _ in open(corpus, encoding="utf-8"))
    split = {"kind": "split", "unit": "line"}
    results = []  # (setting, turns, private, masked char fraction, exposed, seconds)

    m, rows, secs = run(corpus, [split])
    no_flag = pa.array([False] * rows.num_rows)
    results.append(("split only (no flag recorded)", rows.num_rows, 0, None, exposed(rows, no_flag, gold), secs))
    for min_len in (0, 20, 40):
        m, rows, secs = run(corpus, [split, {"kind": "dedup", "min_length": min_len}, {"kind": "split_private"}])
        st = m["stages"][1]["stats"]
        results.append((f"dedup (SHA-1), min_length {min_len}", rows.num_rows, int(pc.sum(rows["private"]).as_py()),
                        st["masked_chars"] / st["chars"], exposed(rows, rows["private"], gold), secs))
    if HAVE_REDACT and not args.no_redact:
        for min_len, with_dedup in ((20, True), (0, True), (None, False)):
            stages = [split] + ([{"kind": "dedup", "min_length": min_len}] if with_dedup else []) + \
                [{"kind": "redact"}, {"kind": "split_private"}]
            m, rows, secs = run(corpus, stages)
            masked = None
            if with_dedup:
                st = m["stages"][1]["stats"]
                masked = st["masked_chars"] / st["chars"]
            base = f"dedup min_length {min_len} + redact" if with_dedup else "redact only"
            for label, flags in (("pi, pi_c", ["pi_hit", "pi_c_hit"]), ("pi", ["pi_hit"])):
                flags = (["dedup_hit"] if with_dedup else []) + flags
                private = private_of(rows, flags)
                results.append((f"{base}; route by {', '.join(flags)}", rows.num_rows, int(pc.sum(private).as_py()),
                                masked, exposed(rows, private, gold), secs))
    elif not HAVE_REDACT:
        print(f"redact stage not available ({REDACT_ERROR}): dedup-only rows")

    print(f"CustomerSim train: {n_records} records (dialogues and canaries), turns as data points; "
          f"{len(gold)} gold secrets ({machine()})")
    print(f"{'setting':<62} {'turns':>7} {'private':>8} {'fraction':>8} {'masked chars':>12} "
          f"{'secrets public':>14} {'seconds':>8}")
    for name, turns, priv, masked, exp, secs in results:
        mc = f"{masked:.3f}" if masked is not None else "-"
        print(f"{name:<62} {turns:>7} {priv:>8} {priv / turns:>8.3f} {mc:>12} {exp:>14} {secs:>8.1f}")
    rows = [dict(zip(["setting", "turns", "private", "masked_char_fraction", "secrets_public", "seconds"], r))
            for r in results]
    print(json.dumps(rows))
    save_result("crt_private_fraction", {"machine": machine(), "rows": rows})
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
