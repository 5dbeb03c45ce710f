"""Paper 003's evaluation at small scale: does a model trained with privacy-preserving
causal language modelling (PPCLM: identifier tokens stay in the context but are never
prediction targets) give away fewer identifiers than one trained plainly, and at what
cost in perplexity?

1. The corpus (JSONL with ``individual_id``) is split by individual: ``member_share`` of
   the individuals are members, the rest held out.
2. The ``identifiers`` stage runs twice through the product's own runner: over the
   members' records (the training data and its identifiers) and over everyone's (the
   auditor's graph for the membership inference, as in the paper's section 6.4).
3. From one base model pre-trained on a public corpus (its tokenizer too, so no
   identifier of the private corpus is in the vocabulary), continual pre-training on the
   members' records with ``privatize train``: ``plain``; ``ppclm`` (no loss on direct or
   indirect identifiers); optionally ``ppclm_indirect`` and ``ppclm_direct`` (paper
   003's IPPCLM and DPPCLM, one kind each).
4. Each model, and the base model as the floor, is asked about the records
   (:mod:`attacks.identifiers`): Privacy overall, direct and indirect; the low-cost
   membership inference; the loss attack per individual; perplexity on the held-out
   individuals' records (the utility cost).
5. Opt-in, the masked-LM side (methods ``mlm`` and ``ppmlm``): from one base masked LM
   pre-trained on the public corpus (kind ``mlm``, the filler of
   :mod:`experiments.refill_eval`, or ``filler``), fine-tuning (kind ``mlm``) on the members'
   records: ``mlm`` plainly, ``ppmlm`` with ``data.ignore_spans`` (identifier tokens never
   chosen as masks). Each, and the base masked LM as the floor, is asked which identifiers
   it predicts when they are masked (:mod:`experiments.mlm_identifiers`; no regurgitation: a
   masked LM does not generate), the same Privacy and low-cost MIA, the loss attack over
   15% of each record's tokens masked, and in place of perplexity the masked-token
   accuracy and perplexity on the held-out individuals' records with ``utility_mask`` of
   their tokens masked at ``seed``. Their rows are in ``mlm_models``. With only masked-LM
   methods, no causal model is trained.

    from experiments.identifier_eval import IdentifierPlan, evaluate
    result = evaluate(IdentifierPlan(corpus=..., base_corpus=..., work=...))

``experiments/identifier_eval.py`` runs it on CustomerSim and draws the result.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from experiments.refill_eval import SmallLM, base_model, write_jsonl

METHODS = {"plain": None, "ppclm": [], "ppclm_indirect": ["indirect"], "ppclm_direct": ["direct"]}
"""Method -> the span kinds whose tokens carry no loss (None: no ignore_spans at all; []:
every kind)."""
MLM_METHODS = {"mlm": None, "ppmlm": []}
"""Masked-LM method -> the span kinds whose tokens are never chosen as masks (as
``METHODS``)."""
LABELS = {"base": "base model (no private data)", "plain": "plain (CLM)", "ppclm": "PPCLM",
          "ppclm_indirect": "IPPCLM (indirect only)", "ppclm_direct": "DPPCLM (direct only)",
          "base_mlm": "base MLM (no private data)", "mlm": "plain (MLM)", "ppmlm": "PPMLM"}


@dataclass
class IdentifierPlan(SmallLM):
    corpus: Path
    """JSONL: ``id``, ``individual_id``, ``text``."""
    base_corpus: Path
    """The public pre-training corpus of the base model and its tokenizer."""
    work: Path
    methods: tuple[str, ...] = ("plain", "ppclm")
    member_share: float = 0.5
    k: int = 2
    max_n: int = 3
    direct: str = "detect"
    samples: int = 2
    max_new_tokens: int = 48
    filler: Path | None = None
    """The base masked LM of ``mlm``/``ppmlm`` (a folder); None trains one (kind mlm) on
    ``base_corpus`` as :mod:`experiments.refill_eval` does."""
    filler_steps: int = 600
    mlm_steps: int | None = None
    """Fine-tuning steps of ``mlm``/``ppmlm``; None: ``adapt_steps``."""
    utility_mask: float = 0.15
    """The share of the held-out records' tokens masked for the masked LMs' utility."""


def read_corpus(path: Path) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                out.append({"id": r.get("id", r.get("doc_id")), "individual_id": r["individual_id"], "text": r["text"]})
    return out


def customersim_by_customer(path: str | Path, n: int) -> list[dict]:
    """The first ``n`` CustomerSim dialogues, each with its customer (the name the
    customer gives; some customers call more than once) as ``individual_id``."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            names = [s["text"] for s in r.get("spans", []) if s["type"] == "NAME"]
            if r["kind"] == "dial" and names:
                out.append({"id": r["id"], "individual_id": names[0], "text": r["text"]})
                if len(out) == n:
                    break
    return out


def split_members(rows: list[dict], share: float, seed: int) -> set[str]:
    """``share`` of the distinct individuals, drawn at ``seed``."""
    people = sorted({r["individual_id"] for r in rows})
    order = np.random.default_rng(seed).permutation(len(people))
    return {people[i] for i in order[: max(1, int(round(share * len(people))))]}


def _records(folder: Path, who: dict[str, str]):
    import pyarrow.parquet as pq

    from attacks.identifiers import Record

    out = []
    for f in sorted((folder / "shards").glob("*.parquet")):
        t = pq.read_table(f, columns=["doc_id", "text", "identifier_spans"])
        for d, text, spans in zip(*(t[c].to_pylist() for c in ("doc_id", "text", "identifier_spans"))):
            out.append(Record(d, who[d], text, spans or []))
    return sorted(out, key=lambda r: r.doc_id)


def evaluate(plan: IdentifierPlan, progress: bool = True) -> dict:
    """Train every model and ask each about the records; returns the figures (also in
    ``work/result.json``). An interrupted evaluation picks up where it stopped."""
    from attacks.identifiers import leaks, loss_mia, low_cost_mia, privacy
    from attacks.model import ModelAdapter
    from experiments.refill_eval import privatize_corpus, stage_stats
    from privatize.stages.identifiers import IdentifiersSettings

    unknown = [m for m in plan.methods if m not in METHODS and m not in MLM_METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {', '.join(unknown)} (known: {', '.join([*METHODS, *MLM_METHODS])})")
    causal = [m for m in plan.methods if m in METHODS]
    masked = [m for m in plan.methods if m in MLM_METHODS]
    work = plan.work
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if progress:
            print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    rows = read_corpus(plan.corpus)
    members = split_members(rows, plan.member_share, plan.seed)
    who = {r["id"]: r["individual_id"] for r in rows}
    stage = {"kind": "identifiers", "k": plan.k, "max_n": plan.max_n, "direct": plan.direct}
    settings = IdentifiersSettings(**{k: v for k, v in stage.items() if k != "kind"})
    say(f"{len(rows)} records of {len(set(who.values()))} individuals, {len(members)} members: "
        "the identifiers stage over the members' records and over everyone's")
    m_members = privatize_corpus([stage], write_jsonl([r for r in rows if r["individual_id"] in members],
                                                work / "members.jsonl"), work / "corpora" / "members")
    m_all = privatize_corpus([stage], write_jsonl(rows, work / "all.jsonl"), work / "corpora" / "all")
    member_records = _records(work / "corpora" / "members", who)
    all_records = _records(work / "corpora" / "all", who)
    held_out = [r.text for r in all_records if r.individual not in members]
    graph = stage_stats(m_members, "identifiers")
    per_person: dict[str, set] = {}
    for r in all_records:
        per_person.setdefault(r.individual, set()).update(s["term"] for s in r.spans if s["kind"] == "indirect")
    counts = np.array([len(v) for v in per_person.values()])

    optim = {"batch_size": plan.batch_size, "lr": plan.lr, "warmup_steps": min(20, plan.adapt_steps // 5),
             "seed": plan.seed, "epochs": 1000}
    common = {"version": 1, "checkpoint_every": 10_000_000, "report_every": 10_000_000}
    if causal or not masked:
        say("base model: pretrain on the public corpus")
        base = base_model(plan, plan.base_corpus, work, common, optim, progress)

    def measure(name: str, model: Path) -> dict:
        adapter = ModelAdapter.load(model)
        found = leaks(adapter, member_records, settings, samples=plan.samples, max_new_tokens=plan.max_new_tokens,
                      seed=plan.seed)
        audit = leaks(adapter, all_records, settings, samples=0)
        mia = loss_mia(all_records, audit, members)
        row = {"perplexity": adapter.perplexity(held_out), "privacy": privacy(member_records, found, settings),
               "low_cost_mia": low_cost_mia(all_records, audit, members),
               "loss_mia": {"auc": mia.auc, "tpr_at_1pct_fpr": mia.tpr_at[0].tpr, "curve": asdict(mia)}}
        p = row["privacy"]
        say(f"{name}: perplexity {row['perplexity']:.1f}, Privacy {p['all']['privacy']:.3f} (direct "
            f"{p['direct']['privacy']:.3f}, indirect {p['indirect']['privacy']:.3f}), low-cost MIA F1 "
            f"{row['low_cost_mia']['f1']:.2f}, loss MIA AUC {mia.auc:.2f}")
        return row

    result: dict = {
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(plan).items()},
        "records": len(rows), "individuals": len(per_person), "members": len(members),
        "graph": {"distinct_words": graph.get("terms_n1", 0), "identifier_words": graph.get("identifiers_n1", 0),
                  "share_of_distinct_words": graph.get("identifiers_n1", 0) / max(1, graph.get("terms_n1", 0)),
                  "share_of_word_occurrences": graph.get("identifier_words", 0) / max(1, graph.get("words", 0)),
                  "distinct_terms": sum(v for k, v in graph.items() if k.startswith("terms_n")),
                  "identifier_terms": sum(v for k, v in graph.items() if k.startswith("identifiers_n")),
                  "direct_spans": graph.get("direct_spans", 0), "indirect_spans": graph.get("indirect_spans", 0),
                  "identifier_seconds": next(s["seconds"] for s in m_all["stages"] if s["kind"] == "identifiers"),
                  "indirect_per_individual": {"median": float(np.median(counts)) if len(counts) else 0.0,
                                              "mean": float(counts.mean()) if len(counts) else 0.0,
                                              "with_none": int((counts == 0).sum())}},
        "models": {"base": measure("base", base)} if causal or not masked else {}, "train_seconds": {}}
    for method in causal:
        say(f"{method}: continual pre-training on the members' records")
        result["models"][method] = measure(method, _adapt(plan, "continue", method, METHODS[method], base,
                                                          plan.adapt_steps, result, common, optim, progress))
    if masked:
        _masked_side(plan, masked, result, member_records, all_records, held_out, members, settings, common, optim,
                     say, progress)
    result["checks"] = checks(result)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (work / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _masked_side(plan: IdentifierPlan, methods: list[str], result: dict, member_records, all_records,
                 held_out: list[str], members: set[str], settings, common: dict, optim: dict, say,
                 progress: bool) -> None:
    """The masked LMs: the base one (the filler), then each of ``methods`` fine-tuned from
    it on the members' records; each measured into ``result["mlm_models"]``."""
    from attacks.identifiers import loss_mia, low_cost_mia, privacy
    from experiments.mlm_identifiers import MaskedLMAdapter, masked_utility, mlm_leaks
    from experiments.refill_eval import filler_model

    if plan.filler is None:
        say("base masked LM: kind mlm on the public corpus")
    filler = filler_model(plan, plan.base_corpus, plan.work, common, optim, progress)

    def measure(name: str, model: Path) -> dict:
        t = time.perf_counter()
        adapter = MaskedLMAdapter.load(model, max_length=plan.seq_len)
        memo: dict = {}  # the members' spans are mostly the auditor's too: each asked once
        found = mlm_leaks(adapter, member_records, loss=False, memo=memo)
        audit = mlm_leaks(adapter, all_records, probability=plan.utility_mask, seed=plan.seed, memo=memo)
        mia = loss_mia(all_records, audit, members)
        row = {"utility": masked_utility(adapter, held_out, probability=plan.utility_mask, seed=plan.seed),
               "privacy": privacy(member_records, found, settings),
               "low_cost_mia": low_cost_mia(all_records, audit, members),
               "loss_mia": {"auc": mia.auc, "tpr_at_1pct_fpr": mia.tpr_at[0].tpr, "curve": asdict(mia)},
               "questions": len(memo), "measure_seconds": round(time.perf_counter() - t, 1)}
        p, u = row["privacy"], row["utility"]
        say(f"{name}: masked-token accuracy {u['accuracy']:.3f} (perplexity {u['perplexity']:.1f}), Privacy "
            f"{p['all']['privacy']:.3f} (direct {p['direct']['privacy']:.3f}, indirect "
            f"{p['indirect']['privacy']:.3f}), low-cost MIA F1 {row['low_cost_mia']['f1']:.2f}, loss MIA AUC "
            f"{mia.auc:.2f} ({len(memo)} masked questions, {row['measure_seconds']:.0f} s)")
        return row

    result["filler"] = str(filler)
    result["mlm_models"] = {"base_mlm": measure("base_mlm", filler)}
    for method in methods:
        say(f"{method}: masked-LM fine-tuning on the members' records")
        result["mlm_models"][method] = measure(method, _adapt(plan, "mlm", method, MLM_METHODS[method], filler,
                                                              plan.mlm_steps or plan.adapt_steps, result, common,
                                                              optim, progress))


def _adapt(plan: IdentifierPlan, kind: str, method: str, kinds: list[str] | None, start: Path, steps: int,
           result: dict, common: dict, optim: dict, progress: bool) -> Path:
    """Train ``method`` (``kind`` ``continue`` or ``mlm``) from ``start`` on the members'
    records, with no loss on (or, for a masked LM, no masks over) the identifier spans of
    ``kinds`` (None: no spans ignored; []: every kind); its time into ``result``; returns
    the model's folder."""
    from experiments.refill_eval import train_model

    data = {"path": str(plan.work / "corpora" / "members"), "seq_len": plan.seq_len}
    if kinds is not None:
        data.update(ignore_spans="identifier_spans", ignore_kinds=kinds)
    run = plan.work / "runs" / method
    summary = train_model({**common, "kind": kind, "data": data, "model": {"preset": None, "checkpoint": str(start)},
                      "optim": {**optim, "max_steps": steps}}, run, progress)
    result["train_seconds"][method] = summary.get("seconds")
    return run / "model"


def checks(result: dict) -> dict[str, bool]:
    """Paper 003's claims, where the models to check them were trained: PPCLM gives away
    fewer indirect (and direct) identifiers than plain training, and its low-cost
    membership inference recalls fewer members."""
    m = result["models"]
    out = {}
    if "plain" in m and "ppclm" in m:
        for kind in ("indirect", "direct", "all"):
            if m["plain"]["privacy"][kind]["identifiers"]:  # none found (direct: none): nothing to compare
                out[f"ppclm_{kind}_privacy_higher"] = m["ppclm"]["privacy"][kind]["privacy"] > \
                    m["plain"]["privacy"][kind]["privacy"]
        out["ppclm_low_cost_mia_recall_lower"] = m["ppclm"]["low_cost_mia"]["recall"] < \
            m["plain"]["low_cost_mia"]["recall"]
    m = result.get("mlm_models", {})
    if "mlm" in m and "ppmlm" in m:
        for kind in ("indirect", "direct", "all"):
            if m["mlm"]["privacy"][kind]["identifiers"]:
                out[f"ppmlm_{kind}_privacy_higher"] = m["ppmlm"]["privacy"][kind]["privacy"] > \
                    m["mlm"]["privacy"][kind]["privacy"]
        out["ppmlm_low_cost_mia_recall_lower"] = m["ppmlm"]["low_cost_mia"]["recall"] < \
            m["mlm"]["low_cost_mia"]["recall"]
    return out


def markdown(result: dict) -> str:
    lines = ["| model | perplexity (held out) | Privacy | direct | indirect | low-cost MIA P / R / F1 | "
             "loss MIA AUC | TPR @ 1% FPR |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in result["models"].items():
        p, mia = row["privacy"], row["low_cost_mia"]
        lines.append(f"| {LABELS[name]} | {row['perplexity']:.1f} | {p['all']['privacy']:.3f} | "
                     f"{p['direct']['privacy']:.3f} | {p['indirect']['privacy']:.3f} | "
                     f"{mia['precision']:.2f} / {mia['recall']:.2f} / {mia['f1']:.2f} | "
                     f"{row['loss_mia']['auc']:.3f} | {row['loss_mia']['tpr_at_1pct_fpr']:.3f} |")
    return "\n".join(lines)


def mlm_markdown(result: dict) -> str:
    """The masked LMs' table: masked-token accuracy and perplexity (held out) in place of
    perplexity; Privacy counts predictions alone (no regurgitation)."""
    lines = ["| model | masked-token accuracy (held out) | masked-token perplexity | Privacy | direct | indirect | "
             "low-cost MIA P / R / F1 | loss MIA AUC | TPR @ 1% FPR |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in result.get("mlm_models", {}).items():
        p, mia, u = row["privacy"], row["low_cost_mia"], row["utility"]
        lines.append(f"| {LABELS[name]} | {u['accuracy']:.3f} | {u['perplexity']:.1f} | {p['all']['privacy']:.3f} | "
                     f"{p['direct']['privacy']:.3f} | {p['indirect']['privacy']:.3f} | "
                     f"{mia['precision']:.2f} / {mia['recall']:.2f} / {mia['f1']:.2f} | "
                     f"{row['loss_mia']['auc']:.3f} | {row['loss_mia']['tpr_at_1pct_fpr']:.3f} |")
    return "\n".join(lines)


def mlm_plot(result: dict, path: Path) -> Path:
    """The masked LMs' trade-off: Privacy (direct, indirect) against held-out masked-token
    accuracy, one point per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    markers = {"base_mlm": "o", "mlm": "s", "ppmlm": "D"}
    for ax, kind in zip(axes, ("indirect", "direct")):
        for name, row in result["mlm_models"].items():
            ax.scatter(row["utility"]["accuracy"], row["privacy"][kind]["privacy"], s=50,
                       marker=markers.get(name, "o"), label=LABELS[name], alpha=0.8)
        ax.set_xlabel(f"masked-token accuracy, held out ({100 * result['plan']['utility_mask']:.0f}% masked)")
        ax.set_ylabel("Privacy (1 = nothing predicted)")
        ax.set_title(f"{kind} identifiers")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Privacy-preserving masked LM (paper 003): identifiers predicted when masked")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot(result: dict, path: Path) -> Path:
    """Privacy (direct, indirect) against held-out perplexity, one point per model: the
    paper's utility / privacy trade-off (its Figure 9)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    markers = dict(zip(LABELS, "osD^v"))
    for ax, kind in zip(axes, ("indirect", "direct")):
        for name, row in result["models"].items():
            ax.scatter(row["perplexity"], row["privacy"][kind]["privacy"], s=50, marker=markers.get(name, "o"),
                       label=LABELS[name], alpha=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("perplexity on held-out individuals (lower is better)")
        ax.set_ylabel("Privacy (1 = nothing given away)")
        ax.set_title(f"{kind} identifiers")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Privacy-preserving causal LM (paper 003): what each model gives away")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- the experiment, run as a script: python -m experiments.identifier_eval ----

RUN_DOC = """Paper 003 at small scale (issue 22): a tiny causal LM pre-trained on WikiText-2, then
continually pre-trained on the CustomerSim dialogues of half the customers, plainly and
with privacy-preserving causal LM (PPCLM: the identifiers stage's direct and indirect
identifiers never prediction targets; also IPPCLM and DPPCLM, one kind each). Each model
is asked what it predicts and regurgitates of the identifiers (Privacy, direct and
indirect), the low-cost and the loss membership inference per customer, and perplexity on
the other customers' dialogues. Writes benchmarks/results/identifier_eval.{json,md} and
benchmarks/results/identifier_eval.png.

With ``--mlm``, the masked-LM side instead: a tiny BERT pre-trained on WikiText-2 (kind
mlm, as refill_eval's filler; ``--filler`` reuses one), fine-tuned on the same members'
dialogues plainly (MLM) and with PPMLM (identifier tokens never chosen as masks); which
identifiers each predicts when they are masked, the same Privacy and membership
inferences, and masked-token accuracy on the other customers' dialogues. Writes
benchmarks/results/identifier_eval_mlm.{json,md} and benchmarks/results/identifier_eval_mlm.png.

    .venv/bin/python -m experiments.identifier_eval [--dialogues 400] [--adapt-steps 400]
    .venv/bin/python -m experiments.identifier_eval --mlm [--filler benchmarks/work/refill_eval/filler/model]

An interrupted run resumes (its work folder keeps every finished training).
"""


def main() -> None:
    import argparse
    from datetime import date

    from experiments.common import ROOT, machine, need_data, save_result, wikitext_corpus
    from experiments.refill_eval import write_jsonl

    ap = argparse.ArgumentParser(description=RUN_DOC.split("\n\n")[0])
    ap.add_argument("--dialogues", type=int, default=400, help="CustomerSim dialogues (members and held out)")
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--adapt-steps", type=int, default=400)
    ap.add_argument("--methods", default=None, help="default plain,ppclm,ppclm_indirect,ppclm_direct; "
                    "with --mlm, mlm,ppmlm")
    ap.add_argument("--direct", default="detect", choices=["detect", "none"])
    ap.add_argument("--work", default=None, help="default benchmarks/work/identifier_eval (_mlm with --mlm)")
    ap.add_argument("--mlm", action="store_true", help="the masked-LM side (MLM against PPMLM)")
    ap.add_argument("--filler", default=None, help="--mlm: a base masked-LM folder instead of training one")
    ap.add_argument("--filler-steps", type=int, default=600)
    ap.add_argument("--mlm-steps", type=int, default=None, help="--mlm: fine-tuning steps (default --adapt-steps)")
    args = ap.parse_args()
    name = "identifier_eval_mlm" if args.mlm else "identifier_eval"
    methods = args.methods or ("mlm,ppmlm" if args.mlm else "plain,ppclm,ppclm_indirect,ppclm_direct")
    args.work = args.work or str(ROOT / "benchmarks" / "work" / name)

    data = need_data()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = wikitext_corpus(work)
    corpus = write_jsonl(customersim_by_customer(data / "customersim" / "train.jsonl", args.dialogues),
                         work / "customersim.jsonl")
    plan = IdentifierPlan(corpus=corpus, base_corpus=base, work=work, methods=tuple(methods.split(",")),
                          direct=args.direct, base_steps=args.base_steps, adapt_steps=args.adapt_steps,
                          filler=Path(args.filler) if args.filler else None, filler_steps=args.filler_steps,
                          mlm_steps=args.mlm_steps)
    print(f"# {machine()}; {args.dialogues} CustomerSim dialogues, base model on WikiText-2 valid+test", flush=True)
    result = evaluate(plan)
    result.update(date=str(date.today()), machine=machine())
    tables = ([markdown(result)] if result["models"] else []) + ([mlm_markdown(result)] if "mlm_models" in result
                                                                  else [])
    table = "\n\n".join(tables)
    png = (mlm_plot if args.mlm else plot)(result, ROOT / "benchmarks" / "results" / f"{name}.png")
    g = result["graph"]
    print(f"\nthe members' graph: {100 * g['share_of_distinct_words']:.1f}% of {g['distinct_words']} distinct words "
          f"are indirect identifiers ({100 * g['share_of_word_occurrences']:.1f}% of word occurrences); "
          f"{g['identifier_terms']} of {g['distinct_terms']} distinct terms (n <= {plan.max_n}); "
          f"indirect identifiers per customer: median {g['indirect_per_individual']['median']:.0f}\n")
    print(table)
    print("\npaper 003's claims: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["checks"].items()))
    save_result(name, result)
    (ROOT / "benchmarks" / "results" / f"{name}.md").write_text(table + "\n")
    print(f"\nplot: {png}; took {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
