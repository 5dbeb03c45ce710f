"""Issue 50: CRT's public/private split on real text, before (``pi_c: strict``) and after
(the calibrated pi_c) in the same run.

The shipped CRT recipe (``privatize/specs/crt.yaml``: sentences, redact, SHA-1 dedup of
flagged sentences, split_private; operator ``mask`` here, which routes as ``encrypt``
does) runs in process (``privatize.run``) on each corpus four times: as it shipped before
issue 50 (sentences judged alone, ``pi_c: strict``), with each sentence read in its
document's style (``split.doc_style``) and ``pi_c: strict``, with the calibrated pi_c
(the default threshold), with the corpus's calibrated domain, and twice with masked
sentences routed public when pi_c passes what pi left in the clear (``crt_stages(masked=
"public")``, ``pi_c.scope: rest``; default threshold and the corpus's domain); its output
records are scored against the gold secrets:

* clinical: the ``report`` part of the PhysioNet deid development half (patients hashed
  to 75-99 of 100: neither fitted nor calibrated on), every PHI span a secret;
* multiwoz: the ``report`` part of MultiWOZ 2.1 validation (secrets Addr, Phone, Post,
  Ref, Id);
* customersim: CustomerSim ``test.jsonl`` (never read by the fitting);
* canaries: every 4-digit secret in the ``canaries`` stage's default format (``My ID is:
  0603``, 10,000 records, the digits the secret), as ``make demo`` inserts them: a kind of
  secret no calibration corpus holds, scored with the support domain's threshold (the
  domain ``make demo`` once used, and which let a date-shaped canary through).

(:mod:`experiments.gold_sentences`). Per corpus and policy: sentences, the secret-free
share, the public share, split efficiency (secret-free sentences routed public / all
secret-free sentences), secret sentences made public with the one-sided 95%
Clopper-Pearson upper bound (delta_2's estimate; a secret sentence is made public when a
secret in it is still readable in a public record), and, for secret-free sentences routed
private, what sent them there (dedup, pi, or pi_c's signal kind). These are development
figures: the held-out halves are where the issue's targets are judged.

    python -m experiments.crt_split [--corpora clinical,multiwoz,customersim,canaries] [--all-dev]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from experiments.common import machine, need_data, save_result

import privatize.stages.redact  # noqa: F401,E402 - registers the stage before specs are parsed
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from experiments.gold_sentences import CORPORA, load, part_of, secrets_in  # noqa: E402
from privatize.redaction.spans import left_readable  # noqa: E402
from privatize import run  # noqa: E402
from privatize.recipes import crt_stages  # noqa: E402
from privatize.redaction.calibration import clopper_pearson_upper, load_model  # noqa: E402

POLICIES = {"before (the recipe before issue 50)": "before", "pi_c: strict, doc_style": "strict",
            "after (pi_c: calibrated)": "calibrated",
            "after, the corpus's domain": "domain",
            "masked public (pi_c: rest)": "rest",
            "masked public, the corpus's domain": "rest_domain"}
DOMAIN = {"clinical": "clinical", "multiwoz": "booking", "customersim": "support", "canaries": "support"}


def canary_docs(digits: int = 4) -> list:
    """Every ``digits``-digit secret in the canaries stage's default format, one record each."""
    from experiments.gold_sentences import Doc
    from privatize.stages.canaries import CanariesSettings

    fmt = CanariesSettings.model_fields["format"].default
    at = fmt.index("{secret}")
    return [Doc(id=f"canary-{n:0{digits}d}", group="canaries", text=fmt.format(secret=f"{n:0{digits}d}"),
                secrets=[(at, at + digits, "CANARY")]) for n in range(10 ** digits)]


def docs_for(corpus: str, data: Path, all_dev: bool):
    if corpus == "canaries":
        return canary_docs()
    if corpus == "customersim":
        return load(corpus, data, split="test")
    docs = load(corpus, data)
    return docs if all_dev else [d for d in docs if part_of(corpus, d.group) == "report"]


def run_recipe(docs, policy) -> tuple[pa.Table, float, dict]:
    import json

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        with open(corpus, "w", encoding="utf-8") as fh:
            for d in docs:
                fh.write(json.dumps({"id": d.id, "text": d.text}) + "\n")
        rest = isinstance(policy, dict) and policy.get("scope") == "rest"
        stages = crt_stages(masked="public" if rest else "private", operator="mask",
                            pi_c="strict" if policy == "before" else policy)
        if policy == "before":  # the recipe as it shipped before issue 50: sentences judged alone, every signal
            stages = [{**s, "doc_style": False} if s["kind"] == "split" else s for s in stages]
        spec = {"stages": stages, "output": {"num_shards": 1}}
        t = time.perf_counter()
        manifest = run(spec, corpus, Path(tmp) / "out", runner="local")
        secs = time.perf_counter() - t
        cols = ["parent_id", "start", "end", "private", "dedup_hit", "pi_hit", "pi_c_hit", "pi_c_by", "spans"]
        rows = pa.concat_tables([pq.read_table(p, columns=cols)
                                 for p in sorted((Path(tmp) / "out" / "shards").glob("*.parquet"))])
    return rows, secs, manifest


def score(rows: pa.Table, docs) -> dict:
    by_id = {d.id: d for d in docs}
    n = secret = public = free_public = misses = 0
    why = Counter()
    miss_types = Counter()
    for pid, s, e, private, dedup, pi, pic, by, spans in zip(*(rows[c].to_pylist() for c in rows.column_names)):
        found = secrets_in(by_id[pid], s, e)
        inside = [t for *_, t in found]
        n += 1
        public += not private
        if inside:
            secret += 1
            # made public: a secret still readable in the public record (under the paper's
            # routing a public record has no pi span, so that is any secret in it)
            removed = [(sp["start"], sp["end"]) for sp in spans or []]
            if not private and left_readable(by_id[pid].text[s:e], found, removed):
                misses += 1
                miss_types.update({t for a, b, t in found if left_readable(by_id[pid].text[s:e], [(a, b)], removed)})
        elif not private:
            free_public += 1
        else:
            why["dedup" if dedup else "pi" if pi else f"pi_c:{by}" if pic else "other"] += 1
    free = n - secret
    return {"sentences": n, "secret": secret, "secret_free": free, "secret_free_share": free / n,
            "public": public, "public_share": public / n, "efficiency": free_public / free if free else 0.0,
            "secret_made_public": misses, "secret_public_rate": misses / secret if secret else 0.0,
            "secret_public_upper95": clopper_pearson_upper(misses, secret) if secret else None,
            "missed_types": dict(miss_types.most_common()),
            "secret_free_private_by": dict(why.most_common())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", default=",".join([*CORPORA, "canaries"]))
    ap.add_argument("--all-dev", action="store_true",
                    help="score the whole development halves (fitted and calibrated on: optimistic)")
    args = ap.parse_args()
    data = need_data()
    model = load_model()
    out = {"machine": machine(), "model": model.summary(), "parts": "all-dev" if args.all_dev else "report",
           "corpora": {}}
    for corpus in args.corpora.split(","):
        docs = docs_for(corpus, data, args.all_dev)
        res = {"documents": len(docs)}
        for label, policy in POLICIES.items():
            pic = {"domain": {"policy": "calibrated", "domain": DOMAIN[corpus]},
                   "rest": {"policy": "calibrated", "scope": "rest"},
                   "rest_domain": {"policy": "calibrated", "domain": DOMAIN[corpus], "scope": "rest"}}.get(policy, policy)
            rows, secs, manifest = run_recipe(docs, pic)
            res[policy] = {**score(rows, docs), "seconds": round(secs, 1)}
            r = res[policy]
            print(f"{corpus:>12} {label:<26} sentences {r['sentences']:>6}  secret-free {r['secret_free_share']:.3f}  "
                  f"public {r['public_share']:.3f}  efficiency {r['efficiency']:.3f}  secret made public "
                  f"{r['secret_made_public']}/{r['secret']} ({100 * r['secret_public_rate']:.2f}%, upper95 "
                  f"{100 * r['secret_public_upper95']:.2f}%)  {secs:.0f} s", flush=True)
            print(f"{'':>12} {'':<26} secret-free sentences routed private by: {r['secret_free_private_by']}"
                  + (f"; missed types {r['missed_types']}" if r["missed_types"] else ""), flush=True)
        res["efficiency_ratio"] = res["calibrated"]["efficiency"] / max(res["before"]["efficiency"], 1e-9)
        res["domain_name"] = DOMAIN[corpus]
        out["corpora"][corpus] = res
    print("\n| corpus | policy | sentences | secret-free | public | efficiency | secret made public (upper95) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for corpus, res in out["corpora"].items():
        for label, policy in POLICIES.items():
            r = res[policy]
            print(f"| {corpus} | {label} | {r['sentences']} | {r['secret_free_share']:.3f} | {r['public_share']:.3f} "
                  f"| {r['efficiency']:.3f} | {r['secret_made_public']} of {r['secret']} "
                  f"({100 * r['secret_public_rate']:.2f}%, {100 * r['secret_public_upper95']:.2f}%) |")
    if "canaries" in out["corpora"]:
        c = out["corpora"]["canaries"]
        print("\ncanaries made public (of 10,000 4-digit secrets): "
              + ", ".join(f"{label} {c[p]['secret_made_public']}" for label, p in POLICIES.items()))
    save_result("crt_split", out)


if __name__ == "__main__":
    main()
