"""Issue 17: CRT's public fraction against pi_c's miss rate delta_2, per pi_c setting.

CRT trains the public split with plain SGD and the private split with DP-SGD; it only
pays off when the public split is large. pi_c (the conservative policy) sends every
sentence it does not call clean to the private split, and a secret it misses in a
sentence routed public is trained on without DP: that miss rate is delta_2 of the CRT
guarantee. This script measures both for a set of pi_c settings (``redact``'s ``pi_c``
block), prints the curve, plots it and picks the setting with the largest public
fraction on the tuning sample whose delta_2 (point estimate) is at most 1% on both
tuning sets:

* CustomerSim ``train.jsonl`` (a seeded sample of dialogues plus the 10 canaries):
  public fraction and delta_2;
* presidio-research ``generated_large.json`` (pi's own tuning set): delta_2 only. pi
  finds nearly every CustomerSim secret, so there pi_c has almost nothing to catch and
  the CustomerSim constraint alone would pick "pi alone" (no pi_c at all); on
  generated_large pi misses a fifth of the spans, which is where pi_c's recall shows;

and among the settings that keep every kind of signal SEEDS.md section 6 names for
pi_c (every NER label, digit runs, capitalised non-initial words, low-score recognizer
hits; narrowing within a kind is allowed). The pick without that condition is printed
too.

Report only (never used for the choice): a CustomerSim ``test.jsonl`` sample (every
setting), presidio-research ``synth_dataset_v2.json`` and the demo corpus
(``privatize make-corpus``, seed 0) for the old default and the chosen setting.

Each setting runs ``split (sentence) -> redact (pi, operator mask, the pi_c setting) ->
split_private`` in-process (``privatize.run``, runner ``local``); no dedup, so the
public fraction is pi's and pi_c's alone (extra lines give the full CRT recipe's, with
``crt.yaml``'s SHA-1 dedup, for the old default and the chosen setting).

Definitions (data points are sentences):

* public fraction = sentences routed public / all sentences;
* delta_2 = gold spans with a letter or digit in a sentence routed public that pi did
  not remove / all gold spans (every type, canaries included; per type too), with the
  one-sided 95% Clopper-Pearson upper bound ``beta.ppf(0.95, misses + 1, n - misses)``;
* gamma (policy pi, whatever pi_c does) = gold spans with any letter or digit not
  removed by pi / all gold spans, with the same bound.

Gold spans are offsets into the dialogue; the split records carry ``parent_id`` and the
sentence's ``start``/``end`` in it, and redact's ``spans`` are offsets into the sentence.
A gold span may cross a sentence cut ("... Apt. 079 East Kim"): each piece is checked.

    python -m experiments.pi_c_curve [--train 300] [--heldout 300] [--demo-docs 300] [--no-presidio]
                                    [--write-quality benchmarks/results/crt_quality.json]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import defaultdict
from datetime import date
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result

import privatize.stages.redact  # noqa: F401,E402 - registers the stage before specs are parsed
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from scipy.stats import beta  # noqa: E402

from privatize import run  # noqa: E402
from privatize.stages.redact import PiCSettings  # noqa: E402

TARGET = 0.01  # delta_2 (point estimate) the chosen setting must keep

# Every pi_c signal on: the default before issue 17. Each setting below is this with
# some signals off or narrowed (spelled out, so the rows do not move when defaults do).
ALL_ON = {"all_ner_labels": True, "recognizer_hits": True, "digits": True, "capitalized": True, "min_score": 0.0,
          "sentence_initial": True, "speaker_labels": True, "relative_dates": True, "digit_min_length": 1}
FREE = {"speaker_labels": False, "relative_dates": False}
# From the most conservative to pi alone (every pi_c signal off: the largest public split
# any pi_c can give): first the two signals that flag format and date words, then, on top
# of both, one more signal off or narrowed at a time.
SETTINGS: list[tuple[str, dict]] = [
    ("every signal (the settings before issue 17)", {}),
    ("speaker_labels off", {"speaker_labels": False}),
    ("relative_dates off", {"relative_dates": False}),
    ("speaker_labels, relative_dates off", FREE),
    ("... + digit_min_length 3", {**FREE, "digit_min_length": 3}),
    ("... + min_score 0.3", {**FREE, "min_score": 0.3}),
    ("... + sentence_initial off", {**FREE, "sentence_initial": False}),
    ("... + digits off", {**FREE, "digits": False}),
    ("... + recognizer_hits off", {**FREE, "recognizer_hits": False}),
    ("... + all_ner_labels off", {**FREE, "all_ner_labels": False}),
    ("... + capitalized off", {**FREE, "capitalized": False}),
    ("pi alone (every pi_c signal off)",
     {"all_ner_labels": False, "recognizer_hits": False, "digits": False, "capitalized": False}),
]
SETTINGS = [(name, {**ALL_ON, **pic}) for name, pic in SETTINGS]
DEDUP = {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask", "min_length": 20}  # crt.yaml's


def upper95(misses: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound on a miss rate."""
    if n == 0:
        return float("nan")
    if misses >= n:
        return 1.0
    return float(beta.ppf(0.95, misses + 1, n - misses))


def sample(path: Path, n: int, seed: int, keep_canaries: bool) -> list[dict]:
    recs = [json.loads(line) for line in open(path, encoding="utf-8")]
    dials = [r for r in recs if r["kind"] != "canary"]
    out = random.Random(seed).sample(dials, min(n, len(dials)))
    if keep_canaries:
        out = [r for r in recs if r["kind"] == "canary"] + out
    for r in out:
        for sp in r["spans"]:
            assert r["text"][sp["start"]:sp["end"]] == sp["text"], (r["id"], sp)
    return out


def run_setting(corpus: Path, pi_c: dict, dedup: bool = False) -> tuple[pa.Table, float]:
    stages = [{"kind": "split", "unit": "sentence"}] + ([DEDUP] if dedup else []) + \
        [{"kind": "redact", "operator": "mask", "pi_c": pi_c}, {"kind": "split_private"}]
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        run({"stages": stages, "output": {"num_shards": 1}}, corpus, Path(d) / "out", runner="local")
        secs = time.perf_counter() - t
        cols = ["parent_id", "start", "end", "spans", "private"]
        rows = pa.concat_tables([pq.read_table(p, columns=cols)
                                 for p in sorted((Path(d) / "out" / "shards").glob("*.parquet"))])
    return rows, secs


def score(rows: pa.Table, docs: list[dict]) -> dict:
    """Public fraction, delta_2 and gamma (with bounds, overall and per gold type) for
    the documents ``docs`` (rows of other documents are ignored)."""
    ids = {d["id"] for d in docs}
    sents: dict[str, list[tuple[int, int, bool, list[tuple[int, int]]]]] = defaultdict(list)
    n_sent = n_pub = 0
    for p, s, e, spans, private in zip(*(rows[c].to_pylist() for c in ("parent_id", "start", "end", "spans",
                                                                        "private"))):
        if p not in ids:
            continue
        removed = [(s + sp["start"], s + sp["end"]) for sp in spans or ()]
        sents[p].append((s, e, bool(private), removed))
        n_sent += 1
        n_pub += not private
    per = defaultdict(lambda: {"n": 0, "public_miss": 0, "pi_miss": 0})
    for d in docs:
        text = d["text"]
        for g in d["spans"]:
            st = per[g["type"]]
            st["n"] += 1
            exposed_public = exposed_any = False
            for s, e, private, removed in sents[d["id"]]:
                a, b = max(s, g["start"]), min(e, g["end"])
                if a >= b:
                    continue
                left = [k for k in range(a, b) if text[k].isalnum() and not any(x <= k < y for x, y in removed)]
                if left:
                    exposed_any = True
                    exposed_public |= not private
            st["public_miss"] += exposed_public
            st["pi_miss"] += exposed_any
    tot = {k: sum(v[k] for v in per.values()) for k in ("n", "public_miss", "pi_miss")}

    def rates(st):
        return {"n": st["n"], "delta2_misses": st["public_miss"], "delta2": st["public_miss"] / st["n"],
                "delta2_upper95": upper95(st["public_miss"], st["n"]),
                "gamma_misses": st["pi_miss"], "gamma": st["pi_miss"] / st["n"],
                "gamma_upper95": upper95(st["pi_miss"], st["n"])}

    return {"sentences": n_sent, "public": n_pub, "public_fraction": n_pub / n_sent, **rates(tot),
            "per_type": {t: rates(v) for t, v in sorted(per.items())}}


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


SET_LABEL = {"tune": "CustomerSim train", "heldout": "CustomerSim test", "gen_large": "generated_large"}


def keeps_signal_kinds(pic: dict) -> bool:
    """The setting keeps every kind of signal SEEDS.md section 6 names for pi_c: every NER
    label, digit runs (of any length), capitalised non-initial words and low-score
    recognizer hits. Narrowing within a kind (speaker labels, relative dates,
    sentence-initial words) is allowed."""
    return (pic["all_ner_labels"] and pic["digits"] and pic["digit_min_length"] == 1 and pic["capitalized"]
            and pic["recognizer_hits"] and pic["min_score"] == 0.0)


def choose(results: list[dict], constraints: tuple[str, ...], signal_kinds: bool = True) -> dict:
    """The setting with the largest CustomerSim train public fraction among those whose
    delta_2 (point estimate) is at most :data:`TARGET` on every set in ``constraints``
    (and, with ``signal_kinds``, that keep every signal kind: :func:`keeps_signal_kinds`);
    ties: the smaller train miss rate, then the earlier (more conservative) setting."""
    ok = [r for r in results if all(r[k]["delta2"] <= TARGET for k in constraints)
          and (not signal_kinds or keeps_signal_kinds(r["pi_c"]))]
    return max(ok, key=lambda r: (r["tune"]["public_fraction"], -r["tune"]["delta2"], -results.index(r)))


def table(results: list[dict], chosen: dict, keys: list[str]) -> str:
    head = f"{'#':>2} {'pi_c setting':<56}" + "".join(f" | {SET_LABEL[k]:^31}" for k in keys)
    sub = f"{'':>2} {'':<56}" + "".join(f" | {'public':>7} {'delta_2':>7} {'miss':>5} {'upper95':>8}" for _ in keys)
    lines = [head, sub]
    for i, r in enumerate(results):
        cells = "".join(f" | {pct(r[k]['public_fraction']):>7} {pct(r[k]['delta2']):>7} {r[k]['delta2_misses']:>5} "
                        f"{pct(r[k]['delta2_upper95']):>8}" for k in keys)
        lines.append(f"{i + 1:>2} {r['name']:<56}{cells}" + (" <= chosen" if r is chosen else ""))
    return "\n".join(lines)


def plot(results: list[dict], chosen: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    series = (("tune", "o", "CustomerSim train sample (tuning)", "tune"),
              ("heldout", "s", "CustomerSim test sample (held out)", "heldout"),
              ("gen_large", "^", "generated_large (tuning), at the CustomerSim train public fraction", "tune"))
    for key, marker, label, xkey in (x for x in series if x[0] in results[0]):
        xs = [r[xkey]["public_fraction"] for r in results]
        ys = [100 * r[key]["delta2"] for r in results]
        ub = [100 * r[key]["delta2_upper95"] - y for r, y in zip(results, ys)]
        ax.errorbar(xs, ys, yerr=[[0] * len(ys), ub], fmt=marker, capsize=3, alpha=0.75, label=label)
    if "gen_large" in results[0]:
        for i, r in enumerate(results):
            ax.annotate(str(i + 1), (r["tune"]["public_fraction"], 100 * r["gen_large"]["delta2"]), fontsize=8,
                        xytext=(-10 if i % 2 else 4, 6), textcoords="offset points")
    ax.axhline(100 * TARGET, color="red", ls="--", lw=1, label="delta_2 = 1% (target)")
    ax.plot([chosen["tune"]["public_fraction"]], [100 * chosen["tune"]["delta2"]], "*", ms=16, color="gold",
            mec="black", label=f"chosen: {chosen['name']}", zorder=5)
    ax.set_xlabel("public fraction on CustomerSim (sentences routed public / all sentences)")
    ax.set_ylabel("delta_2 (% of gold spans left readable in a public sentence)")
    ax.set_title("CRT routing, pi_c settings: public fraction vs pi_c miss rate\n"
                 "(bars: one-sided 95% Clopper-Pearson upper bound; numbers: settings)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.text(0.01, 0.01, "; ".join(f"{i + 1} {r['name']}" for i, r in enumerate(results)), fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out, dpi=120)


def load_presidio(path: Path, prefix: str) -> list[dict]:
    """presidio-research JSON as documents with gold spans (every entity type)."""
    out = []
    for i, x in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        spans = [{"start": g["start_position"], "end": g["end_position"], "type": g["entity_type"],
                  "text": g["entity_value"]} for g in x["spans"]]
        for g in spans:
            assert x["full_text"][g["start"]:g["end"]] == g["text"], (i, g)
        out.append({"id": f"{prefix}/{i}", "text": x["full_text"], "spans": spans})
    return out


def run_sets(sets: dict[str, list[dict]], pi_c: dict, dedup: bool = False) -> tuple[dict, float]:
    """One pipeline run over the documents of every set; the scores per set."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        with open(corpus, "w", encoding="utf-8") as fh:
            for docs in sets.values():
                for r in docs:
                    fh.write(json.dumps({"id": r["id"], "text": r["text"]}) + "\n")
        rows, secs = run_setting(corpus, pi_c, dedup)
    return {name: score(rows, docs) for name, docs in sets.items()}, secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", type=int, default=300, help="dialogues sampled from train.jsonl (tuning; + canaries)")
    ap.add_argument("--heldout", type=int, default=300, help="dialogues sampled from test.jsonl (report only)")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--demo-docs", type=int, default=300,
                    help="documents of the demo corpus (privatize make-corpus, seed 0) to report default and chosen "
                         "settings on (0: skip)")
    ap.add_argument("--no-presidio", action="store_true",
                    help="skip presidio-research (generated_large as a second tuning constraint, synth_dataset_v2 "
                         "as a report set)")
    ap.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "results" / "pi_c_curve.png")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "pi_c_curve.json")
    ap.add_argument("--write-quality", type=Path, default=None,
                    help="write gamma and delta_2 of the chosen setting (held-out sample) to this JSON file")
    args = ap.parse_args()
    t_all = time.perf_counter()
    data = need_data()
    for _, pic in SETTINGS:
        PiCSettings(**pic)  # a typo fails before the first run
    sets = {"tune": sample(data / "customersim" / "train.jsonl", args.train, args.seed, keep_canaries=True),
            "heldout": sample(data / "customersim" / "test.jsonl", args.heldout, args.seed, keep_canaries=False)}
    if not args.no_presidio:
        sets["gen_large"] = load_presidio(data / "presidio_research" / "generated_large.json", "generated_large")
    results = []
    for name, pic in SETTINGS:
        scores, secs = run_sets(sets, pic)
        res = {"name": name, "pi_c": pic, **scores, "seconds": round(secs, 1)}
        results.append(res)
        print(f"  {name}: public {pct(res['tune']['public_fraction'])}, delta_2 {pct(res['tune']['delta2'])}"
              + (f", generated_large delta_2 {pct(res['gen_large']['delta2'])}" if "gen_large" in res else "")
              + f" ({secs:.0f} s)", flush=True)
    constraints = ("tune", "gen_large") if "gen_large" in sets else ("tune",)
    cs_only = choose(results, ("tune",), signal_kinds=False)
    any_kind = choose(results, constraints, signal_kinds=False)
    chosen = choose(results, constraints)
    # the full CRT recipe (with crt.yaml's dedup) and the report sets: default and chosen only
    cs_sets = {k: sets[k] for k in ("tune", "heldout")}
    pair = (("every signal", ALL_ON), ("chosen", chosen["pi_c"]))
    recipe = {lab: run_sets(cs_sets, pic, dedup=True)[0] for lab, pic in pair}
    report = {}
    if not args.no_presidio:
        synth = {"synth": load_presidio(data / "presidio_research" / "synth_dataset_v2.json", "synth")}
        for lab, pic in pair:
            report[f"synth_dataset_v2, {lab}"] = run_sets(synth, pic)[0]["synth"]
    if args.demo_docs:
        from privatize.corpus import make_corpus

        with tempfile.TemporaryDirectory() as tmp:
            make_corpus(Path(tmp) / "demo.jsonl", n_docs=args.demo_docs, seed=0)
            demo = {"demo": [json.loads(line) for line in open(Path(tmp) / "demo.jsonl", encoding="utf-8")]}
        for lab, pic in pair:
            report[f"demo corpus ({args.demo_docs} docs), {lab}"] = run_sets(demo, pic)[0]["demo"]
            report[f"demo corpus ({args.demo_docs} docs), {lab}, with dedup"] = run_sets(demo, pic, dedup=True)[0]["demo"]

    gammas = {tuple(r[k]["gamma_misses"] for k in sets) for r in results}
    assert len(gammas) == 1, f"pi's misses changed with pi_c settings: {gammas}"
    t0, h0 = results[0]["tune"], results[0]["heldout"]
    print()
    print(f"CustomerSim, sentences as data points; tuning: {args.train} train dialogues + 10 canaries "
          f"({t0['sentences']} sentences, {t0['n']} gold spans); held out: {args.heldout} test dialogues "
          f"({h0['sentences']} sentences, {h0['n']} gold spans); seed {args.seed}"
          + (f"; generated_large: {results[0]['gen_large']['sentences']} sentences, "
             f"{results[0]['gen_large']['n']} gold spans" if "gen_large" in sets else "")
          + f"; {machine()}, {date.today()}")
    print(table(results, chosen, list(sets)))
    print(f"\nchosen (largest train public fraction with delta_2 <= {pct(TARGET)} on "
          f"{' and '.join(SET_LABEL[k] for k in constraints)}, every signal kind of SEEDS.md section 6 kept): "
          f"{chosen['name']} {json.dumps(chosen['pi_c'])}")
    if any_kind is not chosen:
        print(f"(allowing a signal kind to be narrowed or dropped: {any_kind['name']}, train public "
              f"{pct(any_kind['tune']['public_fraction'])})")
    if cs_only is not chosen:
        print(f"(with the CustomerSim train constraint alone, any setting: {cs_only['name']})")
    print("per gold type, chosen setting (delta_2 misses / spans, upper95; gamma misses):")
    for key in sets:
        for ty, st in chosen[key]["per_type"].items():
            print(f"  {SET_LABEL[key]:<22} {ty:<18} {st['delta2_misses']:>4}/{st['n']:<5} "
                  f"upper {pct(st['delta2_upper95']):>7}; gamma {st['gamma_misses']}")
    for key in sets:
        g = results[0][key]
        print(f"gamma (pi, {SET_LABEL[key]}): {pct(g['gamma'])} ({g['gamma_misses']}/{g['n']}), "
              f"upper95 {pct(g['gamma_upper95'])}")
    for lab, rec in recipe.items():
        print(f"full CRT recipe (split, SHA-1 dedup min_length 20, redact, split_private), {lab} pi_c: public "
              f"{pct(rec['tune']['public_fraction'])} train / {pct(rec['heldout']['public_fraction'])} test, "
              f"delta_2 {pct(rec['tune']['delta2'])} / {pct(rec['heldout']['delta2'])}")
    for lab, d in report.items():
        print(f"{lab}: {d['sentences']} sentences, public {d['public']} ({pct(d['public_fraction'])}), delta_2 "
              f"{pct(d['delta2'])} ({d['delta2_misses']}/{d['n']}, upper95 {pct(d['delta2_upper95'])}), "
              f"gamma {pct(d['gamma'])} (upper95 {pct(d['gamma_upper95'])})")
    secs = time.perf_counter() - t_all
    print(f"total {secs:.0f} s")

    plot(results, chosen, args.plot)
    summary = {"date": str(date.today()), "machine": machine(), "seed": args.seed,
               "train_dialogues": args.train, "heldout_dialogues": args.heldout,
               "target_delta2": TARGET, "settings": results, "chosen": chosen["name"],
               "chosen_customersim_only": cs_only["name"],
               "chosen_any_signal_kind": any_kind["name"], "recipe_with_dedup": recipe,
               "report_sets": report, "seconds": round(secs, 1)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    save_result("pi_c_curve_run", summary)
    if args.write_quality:
        h = chosen["heldout"]
        args.write_quality.write_text(json.dumps({
            "source": "experiments/pi_c_curve.py (issue 17)",
            "data": f"CustomerSim test.jsonl, {args.heldout} dialogues sampled with seed {args.seed} "
                    f"({h['n']} gold spans, {h['sentences']} sentences); the pi_c setting was chosen on other data "
                    "(a train.jsonl sample and presidio-research generated_large)",
            "date": str(date.today()), "machine": machine(),
            "pi_c": chosen["pi_c"],
            "gamma": round(h["gamma"], 6), "gamma_upper95": round(h["gamma_upper95"], 6),
            "delta_2": round(h["delta2"], 6), "delta_2_upper95": round(h["delta2_upper95"], 6),
            "definitions": {
                "gamma": "gold spans with a letter or digit that policy pi did not remove / all gold spans",
                "delta_2": "gold spans with a letter or digit left un-removed in a sentence routed public "
                           "(no pi_hit, no pi_c_hit) / all gold spans",
                "upper95": "one-sided 95% Clopper-Pearson: scipy.stats.beta.ppf(0.95, misses + 1, n - misses)"},
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
