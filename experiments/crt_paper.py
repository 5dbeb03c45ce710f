"""CRT's own experiment on its own data (issue 37; paper 004, Zhao et al., Figures 2 to 4),
with the product's stages, trainers and attacks, every model fine-tuned from one public base.

Datasets: CustomerSim (``../shared/data/customersim``: a seeded sample of ``--dialogues``
training dialogues; its test split is the held-out text) and MultiWOZ (the real dialogues of
``real_dev/dialogue_multiwoz_val.jsonl``, split 80/10/10 by dialogue, and as nothing is tuned
here both tenths are held out; the paper used MultiWOZ 2.2). The protocol:

* 10 canaries ``My ID is: <6 digits>``, inserted 20 times each by the ``canaries`` stage
  (10 more never inserted: the noise floor); exposure exact over all 10^6 candidates;
* data points: whole sentences (the ``split`` stage), for every model and for the held-out
  text, as in the paper (its appendix A.6: "tokenization and splitting into individual
  sentences (data points) should go before redaction / deduplication");
* privatizations: ``raw`` (canaries, split) and the CRT recipe (canaries, split, Presidio
  redaction to ``<MASK>``, SHA-1 dedup of every repeated sentence that either policy flagged,
  split_private: ``dedup.skip_clean``, the product's ``privatize/specs/crt.yaml``) with a seeded
  share gamma of the policy's hits left in the clear (``redact.miss_share``), gamma in
  {0, 0.1, 0.3};
* models, all fine-tuned from the same public base (``privatize base``) for the same epochs:
  plain (raw text), redacted (the recipe's output trained plainly) at each gamma, DP-SGD on the
  raw text and CRT at target epsilon 1, 3 and 8 (CRT at gamma 0.1; epsilon 3 also at 0 and 0.3);
* epochs: the paper's 10 (its appendix A.3); learning rate 0.002 for every model. The
  paper's 5e-4 (its choice for DPSGD-GPT and CRT-GPT, at batch 256) was measured here and is
  worse for this model and batch: CRT 4.7-7.2x plain against 2.9-10.4x, DP-SGD 8.2-18.1x
  against 2.9-6.8x, and the plain model memorises less (12.35 bits against 18.93)
  (``benchmarks/results/history/crt_paper/2026-11-28T000738Z_*``, the diary);
* attacks: perplexity on the raw held-out sentences (no redaction), also split into the tokens
  outside the held-out dialogues' gold secrets (the text protection should keep) and those on
  them (``perplexity.spans_column``), canary exposure, membership inference on
  secrets (customer addresses in CustomerSim, booking references in MultiWOZ; members from
  the training dialogues, non-members from held-out ones, up to 1,000 a side) and its group
  attack;
* figures (``benchmarks/results/crt_paper_<dataset>_fig{2,3,4}.png``): perplexity against the
  Bayesian confidentiality epsilon (DP: its epsilon); max canary exposure against gamma; MIA AUC
  against gamma.

Every step writes its own folder under ``--work`` and is skipped when it is there, so an
interrupted run resumes where it stopped::

    .venv/bin/python -m experiments.crt_paper [--dataset customersim|multiwoz|both]
        [--dialogues 3000] [--preset tiny] [--epochs 10] [--lr 0.002]
        [--digits 6] [--work DIR] [--gpu]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from pathlib import Path

from experiments.common import ROOT, machine, need_data, save_result

EPSILONS = (1.0, 3.0, 8.0)
GAMMAS = (0.0, 0.1, 0.3)
# the CRT inputs the paper's report needs: customersim's measured figures (benchmarks/RESULTS.md)
CRT_INPUTS = {"gamma": 0.0382, "delta_2": 0.0033,
              "source": "customersim held-out gold spans, one-sided 95% upper bounds (experiments/pi_c_curve.py)"}
MIA_CONTEXT = {"customersim": "USR: Ok, it is {text}.", "multiwoz": "Booking was successful . Reference number is : {text} .",
               "clinical": "pt of dr. {text}."}  # clinicians' names, as the notes write them


def _write(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    tmp.replace(path)


SECRET_SLOTS = ("Ref", "Phone", "Post", "Addr")
"""MultiWOZ's slots that are secrets here: booking references, telephone numbers, postcodes,
addresses (the paper: "email address, reference number, telephone number, etc."). CustomerSim's
are all its gold spans: names, addresses, phone, order and tracking numbers."""


MIA_SECRET = {"customersim": "ADDRESS", "multiwoz": "Ref", "clinical": "HCPName"}
"""Per dataset, the secrets the membership inference tells members from non-members by:
customer addresses, booking references, clinicians' names."""


def _dialogues(name: str, dialogues: int) -> tuple[list[dict], list[dict]]:
    """(training, held-out) dialogues: ``{doc_id, text, secrets: {type: [strings]}}``."""
    data = need_data()
    if name == "customersim":
        def load(split):
            rows = [json.loads(x) for x in open(data / "customersim" / f"{split}.jsonl", encoding="utf-8")]
            return [r for r in rows if r["kind"] != "canary"]  # the dataset's own canary: ours are inserted

        def doc(r):
            secrets: dict[str, list[str]] = {}
            for s in r["spans"]:
                secrets.setdefault(s["type"], []).append(s["text"])
            return {"doc_id": r["id"], "text": r["text"], "secrets": secrets}
        train = random.Random(0).sample(load("train"), min(dialogues, 10_000))
        return [doc(r) for r in train], [doc(r) for r in (load("test") + load("valid"))[:1000]]
    if name == "clinical":  # issue 50: real ICU notes, split by patient (80/20 by a hash of the patient)
        from experiments.gold_sentences import load as load_gold

        train_docs, held = [], []
        for doc in load_gold("clinical", data):
            secrets = {}
            for a, b, typ in doc.secrets:
                secrets.setdefault(typ, []).append(doc.text[a:b])
            r = {"doc_id": doc.id, "text": doc.text, "secrets": secrets}
            part = int(hashlib.sha256(f"crt_paper\x00{doc.group}".encode()).hexdigest()[:8], 16) % 100
            (train_docs if part < 80 else held).append(r)
        return train_docs, held
    rows = [json.loads(x) for x in open(data / "real_dev" / "dialogue_multiwoz_val.jsonl", encoding="utf-8")]
    random.Random(0).shuffle(rows)
    n = len(rows)

    def doc(g):
        secrets: dict[str, list[str]] = {}
        for t in g["turns"]:
            for sp in t["spans"]:
                if sp["slot"] in SECRET_SLOTS:
                    secrets.setdefault(sp["slot"], []).append(sp["text"])
        text = "\n".join(("USR: " if t["speaker"] == "USER" else "SYS: ") + t["text"] for t in g["turns"])
        return {"doc_id": g["dialogue_id"], "text": text, "secrets": secrets}
    # train; validation + test (held out)
    return [doc(g) for g in rows[: int(0.8 * n)]], [doc(g) for g in rows[int(0.8 * n):]]


def corpus(name: str, dialogues: int, d: Path) -> Path:
    """train.jsonl, heldout.jsonl, members.jsonl, non_members.jsonl in ``d``."""
    if (d / "non_members.jsonl").is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    train, held = _dialogues(name, dialogues)
    kind = MIA_SECRET[name]  # the MIA's secrets

    def secrets(docs):
        return sorted({s for r in docs for s in r["secrets"].get(kind, [])})
    members, non = secrets(train), sorted(set(secrets(held)) - set(secrets(train)))
    rng = random.Random(1)
    _write(d / "train.jsonl", [{"doc_id": r["doc_id"], "text": r["text"]} for r in train])
    _write(d / "heldout.jsonl", [{"doc_id": r["doc_id"], "text": r["text"]} for r in held])
    _write(d / "members.jsonl", [{"text": s} for s in rng.sample(members, min(1000, len(members)))])
    _write(d / "non_members.jsonl", [{"text": s} for s in rng.sample(non, min(1000, len(non)))])
    return d


def privatized(d: Path, gamma: float | None, digits: int, masked: str = "private", operator: str = "mask",
               locale: str = "en_US") -> Path:
    """``raw`` (gamma None: canaries only) or the CRT recipe at ``gamma`` (``masked``: where
    it routes masked sentences, :func:`privatize.recipes.crt_stages`; ``operator``: what
    replaces what pi finds, ``mask`` or ``surrogate`` values of ``locale``)."""
    from privatize import run as run_pipeline
    from privatize.recipes import crt_split, crt_stages
    from privatize.spec import parse_spec

    masked, _, domain = masked.partition("@")  # "public@booking" (model_spec)
    out = d / ("raw" if gamma is None else
               f"crt{'m' if masked == 'public' else ''}{'-' + domain if domain else ''}-g{gamma:g}"
               + ("" if operator == "mask" else f"-{operator}"))
    if (out / "manifest.json").is_file():
        return out
    try:  # the stages register themselves on import; the specs must see them first
        import privatize.stages.canaries  # noqa: F401
        import privatize.stages.redact  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the environment lacks spaCy/Presidio
        raise SystemExit(f"crt_paper needs the redaction stage to privatize {out} (or run --prepare where "
                         f"Presidio is installed and bring the work folder): {exc}") from None
    canaries = {"kind": "canaries", "key": f"file:{d.parent / 'canary.key'}", "digits": digits, "count": 10,
                "repeats": 20, "held_out": 10}
    # every model trains on the same data points, the paper's D: whole sentences, cut before
    # redaction and dedup (its appendix A.6, points 2 and 3)
    stages = [canaries, crt_split()]
    if gamma is not None:
        # dedup after redaction, of every sentence the policies flagged, however short: a
        # canary repeated 20 times counts once (the paper's Proposition 7), while repeats of
        # sentences both policies passed stay public (``dedup.skip_clean``)
        extra = {"pi_c": {"policy": "calibrated", "domain": domain}} if domain else {}
        if operator == "surrogate":
            extra["surrogate_locale"] = locale
        stages = [canaries, *crt_stages(masked=masked, operator=operator, miss_share=gamma, miss_seed=0, **extra)]
    t = time.perf_counter()
    m = run_pipeline(parse_spec({"version": 1, "stages": stages, "output": {"num_shards": 4}}),
                     d / "train.jsonl", out)
    print(f"  privatized {out.name}: {m['counts']['output_records']} records in {time.perf_counter() - t:.0f} s",
          flush=True)
    return out


def heldout_sentences(d: Path, ds: str, dialogues: int) -> Path:
    """The held-out dialogues cut into the same data points as training (the ``split``
    stage alone, no redaction): ``heldout_sentences.jsonl``, what perplexity is measured on,
    each sentence with the ``spans`` of the held-out dialogues' gold secrets it contains
    (every occurrence of one of their strings), which split its perplexity into the text
    around the secrets and the secrets themselves."""
    import re

    from privatize import run as run_pipeline
    from privatize.recipes import crt_split
    from privatize.spec import parse_spec
    from train.data import read_texts

    path = d / "heldout_sentences.jsonl"
    if path.is_file() and "spans" in json.loads(path.open(encoding="utf-8").readline()):
        return path
    out = d / "heldout-split"
    if not (out / "manifest.json").is_file():
        run_pipeline(parse_spec({"version": 1, "stages": [crt_split()], "output": {"num_shards": 1}}),
                     d / "heldout.jsonl", out)
    # five characters at least: one MultiWOZ "phone number" span is the word "Yes"; the
    # longest first, so a secret inside another is covered by it
    secrets = sorted({s for r in _dialogues(ds, dialogues)[1] for v in r["secrets"].values() for s in v
                      if len(s.strip()) >= 5}, key=len, reverse=True)
    rx = re.compile("|".join(re.escape(s) for s in secrets))
    _write(path, [{"text": t, "spans": [{"start": m.start(), "end": m.end()} for m in rx.finditer(t)]}
                  for t in read_texts(str(out), "text") if t.strip()])
    return path


def train(d: Path, name: str, kind: str, data: Path, base: Path, args, eps: float | None = None) -> Path:
    from train.config import parse_config
    from train.run import run_training

    out = d / "runs" / name
    if (out / "summary.json").is_file():
        if kind == "crt" and _optimizer_state(out) != args.dp_optimizer_state:
            raise SystemExit(f"{out} was trained with the {_optimizer_state(out)} optimizer state, not "
                             f"--dp-optimizer-state {args.dp_optimizer_state}: use another --work, or move it away")
        return out
    cfg = {"version": 1, "kind": kind, "data": {"path": str(data), "seq_len": 64},
           "model": {"preset": None, "checkpoint": str(base / "model")},
           "optim": {"batch_size": args.batch_size, "epochs": args.epochs, "lr": args.lr, "warmup_steps": 10},
           "workers": {"num_workers": 1, "cpus_per_worker": 1 if args.gpu else 2, "use_gpu": args.gpu,
                       "precision": "bf16" if args.gpu else "fp32"},
           "checkpoint_every": 100_000, "report_every": 50, "output": str(out)}
    if eps is not None:
        cfg["dp"] = {"target_epsilon": eps, "max_grad_norm": 1.0, "grad_sample_mode": "bk"}
        if args.dp_batch_size:
            cfg["dp"]["batch_size"] = args.dp_batch_size
        if args.dp_lr:
            cfg["dp"]["lr"] = args.dp_lr
        if args.dp_optimizer_state != "separate":  # left out at the default, as the configs before it
            cfg["dp"]["optimizer_state"] = args.dp_optimizer_state
    if kind == "crt":
        cfg["crt"] = crt_inputs(data)
    if getattr(args, "lora", 0):  # every linear layer of the Llama-style presets, alpha 2r
        cfg["model"]["lora"] = {"r": args.lora, "alpha": 2 * args.lora, "target_modules": [
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    t = time.perf_counter()
    s = run_training(parse_config(cfg), progress=False)
    print(f"  trained {name}: {s['steps']} steps, loss {s['final_loss']:.3f}"
          + (f", epsilon {s['epsilon']:.2f}" if s.get("epsilon") is not None else "")
          + f" in {time.perf_counter() - t:.0f} s", flush=True)
    return out


def crt_inputs(data: Path) -> dict | None:
    """The CRT report's gamma and delta_2 for a model trained on ``data``: none typed (the
    training reads its privatization manifest's ``quality``) where the calibrated pi_c
    stated them, its gamma counting the recipe's ``miss_share``; otherwise, under the
    paper's routing, CustomerSim's measured figures claimed, gamma widened by the
    ``miss_share`` the recipe left in the clear."""
    m = json.loads((data / "manifest.json").read_text())
    missed = max((s.get("miss_share", 0.0) for s in m["spec"]["stages"] if s.get("kind") == "redact"), default=0.0)
    q = m.get("quality") or {}
    if q.get("delta_2") is not None and q.get("gamma") is not None:
        if missed and "miss_share" not in (q.get("source") or ""):
            raise SystemExit(f"{data}: its manifest's gamma predates the miss_share it was made with (before "
                             "40d482d): move the folder away so that it is privatized again")
        return None
    from privatize.redaction.calibration import with_miss_share

    return {**CRT_INPUTS, "gamma": round(with_miss_share(CRT_INPUTS["gamma"], missed), 6),
            "source": CRT_INPUTS["source"] + (f"; gamma with the recipe's miss_share {missed:g}" if missed else "")}


def _optimizer_state(run: Path) -> str:
    """How a finished CRT run's phases kept their optimizer state, from its last checkpoint
    (runs from before session 49 have no public optimizer: they shared one)."""
    import torch

    state = torch.load(max(run.glob("checkpoints/**/state.pt")), weights_only=False, map_location="cpu")
    return "shared" if state.get("public_optimizer") is None else "separate"


def evaluate(d: Path, name: str, runs: dict[str, Path], ds: str, digits: int, device: str = "cpu") -> dict:
    from attacks.config import parse_config
    from attacks.results import keyed_results
    from attacks.run import run_evaluation

    out = d / "eval"
    done = out / "evaluation.json"
    saved = json.loads(done.read_text())["models"] if done.is_file() else None
    if saved is None or [m["name"] for m in saved] != list(runs) or any(not (keyed_results(m).get("perplexity") or {}).get("spans") for m in saved):
        cfg = {"version": 1, "models": [{"name": n, "path": str(p), "reference": n == "plain"} for n, p in runs.items()],
               "canaries": {"key": f"file:{d.parent / 'canary.key'}", "digits": digits, "count": 10, "held_out": 10,
                            "repeats": 20},
               "mia": {"members": str(d / "members.jsonl"), "non_members": str(d / "non_members.jsonl"),
                       "limit": 1000, "group_size": 10, "context": MIA_CONTEXT[ds]},
               "perplexity": {"data": str(d / "heldout_sentences.jsonl"), "limit": 5000, "spans_column": "spans"},
               "scoring": {"device": device}, "output": str(out)}
        t = time.perf_counter()
        run_evaluation(parse_config(cfg), progress=False)
        print(f"  evaluated {len(runs)} models on {device} in {time.perf_counter() - t:.0f} s", flush=True)
    return json.loads(done.read_text())


def _rows(ev: dict, runs: dict[str, Path]) -> list[dict]:
    from attacks.results import keyed_results

    out = []
    for m in ev["models"]:
        s = json.loads((runs[m["name"]] / "summary.json").read_text())
        res = keyed_results(m)  # the results by attack (either form of evaluation.json)
        aucs = {r["score"]: r["auc"] for r in res["mia"]["scores"]}
        conf = s.get("confidentiality") or {}
        sp = res["perplexity"].get("spans") or {}
        out.append({"model": m["name"], "kind": s["kind"], "perplexity": res["perplexity"]["perplexity"],
                    "perplexity_outside_secrets": sp.get("outside"), "perplexity_on_secrets": sp.get("inside"),
                    "secret_token_share": sp["inside_tokens"] / sp["tokens"] if sp else None,
                    "max_exposure": res["canaries"]["max_exposure"],
                    "reference_exposure": res["canaries"]["max_reference_exposure"],
                    "mia_auc": aucs.get("loss"), "mia_best_auc": max(aucs.values()),
                    "group_auc": (res["mia"].get("group") or {}).get("auc"),
                    "epsilon": s.get("epsilon"), "confidentiality_epsilon": conf.get("epsilon"),
                    "public_share": (s["examples"]["public"] / (s["examples"]["public"] + s["examples"]["private"])
                                     if "public" in s["examples"] else None),
                    "noise_multiplier": (s.get("dp") or {}).get("noise_multiplier"), "steps": s["steps"]})
    return out


def figures(ds: str, rows: list[dict], prefix: str = "crt_paper") -> list[Path]:
    """The paper's Figures 2 to 4 from the models that were trained (a subset draws what it can)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    by = {r["model"]: r for r in rows}
    paths = []

    def save(fig, k):
        FigureCanvasAgg(fig)
        p = ROOT / "benchmarks" / "results" / f"{prefix}_{ds}_fig{k}.png"
        fig.savefig(p, dpi=110)
        paths.append(p)

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for pre, marker, label in (("dp-", "s", "DP-SGD"), ("crt-", "o", "CRT (gamma 0.1)"),
                               ("crtm-", "^", "CRT, masked sentences public (gamma 0.1)")):
        pts = sorted((r["confidentiality_epsilon"] or r["epsilon"], r["perplexity"]) for r in rows
                     if r["model"].startswith(pre) and (pre == "dp-" or r["model"].endswith("g0.1")))
        if pts:
            ax.plot(*zip(*pts), marker=marker, label=label)
    for name, ls in (("plain", "--"), ("redacted-g0.1", ":")):
        if name in by:
            ax.axhline(by[name]["perplexity"], ls=ls, color="grey", label=name)
    ax.set(xscale="log", xlabel="epsilon (CRT: Bayesian confidentiality; DP: its own)", ylabel="test perplexity",
           title=f"{ds}: utility against confidentiality (Fig. 2)")
    ax.legend(fontsize=8)
    save(fig, 2)
    for k, key, label in ((3, "max_exposure", "max canary exposure (bits)"), (4, "mia_best_auc", "best MIA AUC")):
        fig = Figure(figsize=(6, 4), layout="constrained")
        ax = fig.subplots()
        for pre, lab in (("redacted-g", "redacted"), ("crt-e3-g", "CRT, epsilon 3")):
            pts = sorted((float(r["model"].rsplit("g", 1)[1]), r[key]) for r in rows
                         if r["model"].startswith(pre) and split_operator(r["model"])[1] == "mask")
            if pts:
                ax.plot(*zip(*pts), marker="o", label=lab)
        if "plain" in by:
            ax.axhline(by["plain"][key], ls="--", color="grey", label="plain")
            if k == 3:
                ax.axhline(by["plain"]["reference_exposure"], ls=":", color="black", label="never-inserted (plain)")
        if k == 4:
            ax.axhline(0.5, ls=":", color="black", label="chance")
        ax.set(xlabel="gamma (share of the policy's hits missed)", ylabel=label,
               title=f"{ds}: {label} against gamma (Fig. {k})")
        ax.legend(fontsize=8)
        save(fig, k)
    return paths


MODELS = ["plain", *(f"redacted-g{g:g}" for g in GAMMAS), *(f"dp-e{e:g}" for e in EPSILONS),
          *(f"crt-e{e:g}-g{g:g}" for e, g in [(1.0, 0.1), (3.0, 0.0), (3.0, 0.1), (3.0, 0.3), (8.0, 0.1)])]
"""The fine-tunings, in the order a full run trains them (``--models`` picks and orders a subset)."""
MASKED_PUBLIC = [f"crtm-e{e:g}-g0.1" for e in EPSILONS]
"""CRT with masked sentences routed public when pi_c passes what pi left in the clear
(``crt_stages(masked="public")``): asked for by name, not in a full run. A name may end in
``_DOMAIN`` (``crtm-e3-g0.1_booking``): pi_c's threshold calibrated for that domain instead of
the default."""


OPERATORS = ("mask", "surrogate")
SURROGATE_LOCALE = {"customersim": "en_US", "multiwoz": "en_GB", "clinical": "en_US"}
"""Per dataset, the Faker locale of ``+surrogate`` models' made-up values (MultiWOZ's
venues are in Cambridge, UK)."""


def split_operator(name: str) -> tuple[str, str]:
    """``crtm-e3-g0.1_booking-surrogate`` -> (``crtm-e3-g0.1_booking``, ``surrogate``): a
    model name may end in ``-OPERATOR``, what replaces pi's spans in its recipe (``mask``
    when none is named); only models trained on the recipe's text take one."""
    base, op = name, "mask"
    for known in OPERATORS[1:]:
        if name.endswith(f"-{known}"):
            base, op = name[:-len(known) - 1], known
    if op != "mask" and (base == "plain" or base.startswith("dp-e")):
        raise ValueError(f"{name}: {base} trains on the raw text, which no operator touches")
    return base, op


def recipe(name: str) -> tuple[float | None, str, str]:
    """The privatization model ``name`` trains on: (gamma, masked routing, operator)."""
    base, op = split_operator(name)
    _, gamma, _, masked = model_spec(base)
    return gamma, masked, op


def model_spec(name: str) -> tuple[str, float | None, float | None, str]:
    """(training kind, gamma of the recipe's shards or None for the raw text, target epsilon,
    where the recipe routes masked sentences: ``private`` as the paper does, or ``public``,
    with ``@DOMAIN`` when the name ends in ``_DOMAIN``: that domain's pi_c threshold)."""
    if name == "plain":
        return "continue", None, None, "private"
    if name.startswith("redacted-g"):
        return "continue", float(name[len("redacted-g"):]), None, "private"
    if name.startswith("dp-e"):
        return "dp", None, float(name[len("dp-e"):]), "private"
    name, _, domain = name.partition("_")
    if domain and not name.startswith("crtm-"):
        raise ValueError(f"{name}_{domain}: a pi_c domain applies to the masked-public models (crtm-) only")
    masked = ("public" + (f"@{domain}" if domain else "")) if name.startswith("crtm-") else "private"
    eps, gamma = name.split("-e", 1)[1].split("-g")
    return "crt", float(gamma), float(eps), masked


def prepare(ds: str, args) -> tuple[Path, Path, Path]:
    """Everything before training, on the machine with Presidio: the canary key, the public
    text, the corpus, its privatizations and the held-out sentences. Returns (work, corpus
    folder, public corpus)."""
    from privatize.keys import new_key, write_key_file
    from train.base import public_corpus

    work = Path(args.work)
    if not (work / "canary.key").is_file():
        work.mkdir(parents=True, exist_ok=True)
        write_key_file(new_key("hmac"), work / "canary.key")
    public = public_corpus(work / "public-text", need_data())  # WikiText-2 and the stories, as before
    d = corpus(ds, args.dialogues, work / ds)
    print(f"== {ds}: {sum(1 for _ in open(d / 'train.jsonl'))} training dialogues", flush=True)
    for g, masked, op in sorted({recipe(m) for m in args.models},
                                key=lambda gm: (-1.0 if gm[0] is None else gm[0], gm[1], gm[2])):
        privatized(d, g, args.digits, masked, op, SURROGATE_LOCALE[ds])  # None: the raw text
    heldout_sentences(d, ds, args.dialogues)
    return work, d, public


def run_dataset(ds: str, args, t0: float) -> list[dict]:
    from train.base import base_config, described
    from train.run import run_training

    work, d, public = prepare(ds, args)
    if args.prepare:
        return []
    base = work / f"base-{args.preset}"
    if not (base / "summary.json").is_file():
        t = time.perf_counter()
        s = run_training(base_config(args.preset, public, base, args.gpu, description=described(public)),
                         progress=False)
        print(f"  trained base-{args.preset}: {s['steps']} steps, loss {s['final_loss']:.3f} in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    runs: dict[str, Path] = {}
    for name in args.models:
        if args.budget and time.time() - t0 > args.budget and not (d / "runs" / name / "summary.json").is_file():
            print(f"  skipped {name}: the training budget ({args.budget:.0f} s) is spent", flush=True)
            continue
        base_name, op = split_operator(name)
        kind, gamma, eps, masked = model_spec(base_name)
        try:
            runs[name] = train(d, name, kind, privatized(d, gamma, args.digits, masked, op, SURROGATE_LOCALE[ds]),
                               base, args, eps)
        except Exception as exc:  # noqa: BLE001 - one failed fine-tuning is reported; the others still count
            print(f"  FAILED {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", flush=True)
            args.failed.append(name)
    runs["base"] = base
    rows = _rows(evaluate(d, ds, runs, ds, args.digits, args.score_device or ("cuda" if args.gpu else "cpu")), runs)
    figures(ds, [r for r in rows if r["model"] != "base"], args.name)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=["customersim", "multiwoz", "clinical", "both"], default="both",
                    help="both: CustomerSim and MultiWOZ; clinical: the PhysioNet deid development notes, 80/20 by "
                         "patient")
    ap.add_argument("--dialogues", type=int, default=3000, help="CustomerSim training dialogues (seeded sample)")
    ap.add_argument("--preset", choices=["tiny", "small"], default="tiny")
    ap.add_argument("--epochs", type=int, default=10, help="the paper's 10 (its appendix A.3)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--dp-batch-size", type=int, default=None,
                    help="DP-SGD's expected batch (dp.batch_size; CRT: the private phase's), default --batch-size")
    ap.add_argument("--dp-optimizer-state", choices=["separate", "shared"], default="separate",
                    help="CRT: the DP steps' optimizer state apart from the public steps' (the default since "
                         "session 49) or shared with it (before)")
    ap.add_argument("--dp-lr", type=float, default=None,
                    help="DP-SGD's learning rate (dp.lr; CRT: the private phase's), default --lr")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank of every fine-tuning (0: full fine-tuning)")
    ap.add_argument("--lr", type=float, default=0.002,
                    help="every model (CRT: both phases); the paper's 5e-4 was worse here (the diary)")
    ap.add_argument("--digits", type=int, default=6)
    ap.add_argument("--work", default=str(ROOT / "benchmarks" / "work" / "crt_paper"))
    ap.add_argument("--gpu", action="store_true",
                    help="train on a GPU (Ray Train with use_gpu, bf16) and score the attacks there")
    ap.add_argument("--score-device", choices=["cpu", "cuda"], default=None,
                    help="where the attacks score the models (default: cuda with --gpu, else cpu)")
    ap.add_argument("--prepare", action="store_true",
                    help="only what needs Presidio (key, public text, corpus, privatizations, held-out sentences); "
                         "then train elsewhere with the same --work")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="the fine-tunings to run, in this order (default: all 12; also crtm-e<eps>-g0.1, "
                         "optionally ending in _DOMAIN)")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds after which no further fine-tuning starts (0: none); the ones done are evaluated")
    ap.add_argument("--name", default="crt_paper", help="the result's name (benchmarks/results/NAME.json, figures)")
    args = ap.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    try:
        bases = {m: split_operator(m)[0] for m in args.models}
    except ValueError as exc:
        ap.error(f"--models: {exc}")
    unknown = [m for m in args.models if bases[m] not in MODELS and bases[m].partition("_")[0] not in MASKED_PUBLIC]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS + MASKED_PUBLIC)})")
    args.failed = []
    t0 = time.time()
    result = {"machine": machine(), "args": vars(args)}
    if args.gpu:
        import torch

        result["gpu"] = torch.cuda.get_device_name(0)
    for ds in (["customersim", "multiwoz"] if args.dataset == "both" else [args.dataset]):
        rows = run_dataset(ds, args, t0)
        if not rows:
            print(f"{ds}: prepared in {args.work}", flush=True)
            continue
        result[ds] = rows
        plain = next((r for r in rows if r["model"] == "plain"), None)
        print(f"\n{ds}: {'model':<16} {'ppl':>8} {'x plain':>8} {'outside':>8} {'x plain':>8} {'max exp':>8} "
              f"{'ref exp':>8} {'MIA AUC':>8} {'group':>6} {'eps':>6} {'conf eps':>8} {'public':>7}")
        for r in rows:
            f = (lambda v, s: "-" if v is None else format(v, s))
            ratio = r["perplexity"] / plain["perplexity"] if plain else None
            out = r["perplexity_outside_secrets"]
            out_ratio = out / plain["perplexity_outside_secrets"] if plain and out is not None else None
            print(f"{'':<{len(ds) + 2}}{r['model']:<16} {r['perplexity']:>8.2f} {f(ratio, '.2f'):>8} "
                  f"{f(out, '.2f'):>8} {f(out_ratio, '.2f'):>8} "
                  f"{r['max_exposure']:>8.2f} {f(r['reference_exposure'], '.2f'):>8} {f(r['mia_best_auc'], '.3f'):>8} "
                  f"{f(r['group_auc'], '.3f'):>6} {f(r['epsilon'], '.2f'):>6} {f(r['confidentiality_epsilon'], '.3f'):>8} "
                  f"{f(r['public_share'], '.2f'):>7}", flush=True)
    if args.prepare:
        return
    result["seconds"] = round(time.time() - t0)
    if args.failed:
        print(f"failed fine-tunings: {', '.join(args.failed)}", flush=True)
    print(f"\nsaved {save_result(args.name, result)} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
