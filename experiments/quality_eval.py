"""The QuALITY harness (issue 20): does continual pre-training on the entity-graph
synthetic text of a few articles teach a model what they say, measured as SoE does
(paper 001, SEEDS.md section 3) by closed-book multiple-choice accuracy on the articles'
questions, against the same model without synthesis?

1. **Articles and questions**: the first ``articles`` of ../shared/data/quality's
   ``quality_dev_fulltext.jsonl`` (34 articles, 609 dev questions, 4 options each, a
   0-indexed gold label) and their questions (:func:`load_quality`).
2. **Privatize**: the product's own runner, ``redact`` with ``operator: encrypt`` (AES-SIV
   entity tokens under a fresh key of the harness's work folder) then ``synthesize``
   against an OpenAI-compatible endpoint: by default ``transformers serve`` started here
   on loopback, serving the base model below with a chat template (:func:`served`), or
   any ``llm_url``/``llm_model`` given (vLLM, a hosted API with ``api_key: env:NAME``).
   The synthesize settings are small by default (4 entities, tuples of 3, 48 tokens per
   answer) so the default run fits in minutes on a CPU.
3. **Decrypt and count**: the synthetic records' entity tokens are decrypted with the key
   (:class:`privatize.ciphers.entity.EntityCipher`); SoE's Table 5 (unique cipher tokens,
   unique failures, total tokens, failure ratio) and, as its Table 6 splits failures,
   where each token came from (its own article, another article: SoE's FCAOA, or none);
   the growth factor from the synthesize stage's manifest statistics (synthetic tokens per
   source token, requests per article, tokens in and out).
4. **Continual pre-training** (kind ``continue``, ``privatize train`` on Ray Train, the
   path :mod:`experiments.refill_eval` uses) from one base model, with the same steps, seed
   and tokenizer, on the arms of SoE's Table 3: ``raw`` (the articles, SoE's orig.),
   ``synthetic`` (the decrypted synthetic text: the data owner holds the key; SoE's
   synt.), and optionally ``raw_encrypted`` (encO.) and ``synthetic_encrypted`` (encS.).
5. **Multiple-choice accuracy** of the base model and each adapted one on the questions
   (:func:`score_choices`): every option scored by the model's log-likelihood of its text
   after a question prompt; ``acc`` takes the highest summed log-likelihood, ``acc_norm``
   the highest per character (lm-eval-harness's two figures). Questions are plain text
   for every arm (SoE's "question encryption" variant is not run).

With the tiny model the project trains on WikiText-2 every accuracy is near chance (25%)
and the tiny model's synthetic samples rarely follow their instructions (it writes no
``Score:``, so its graph has no edge): the run checks the mechanics. A real model is
given with ``base_model`` (any local Hugging Face causal-LM folder) and ``llm_url`` /
``llm_model``; then it measures the effect. An arm without data (no synthetic sample
passed the stage's checks) is skipped and said so, never filled with anything else.

    from experiments.quality_eval import QualityPlan, evaluate
    result = evaluate(QualityPlan(data=..., base_corpus=..., work=...))

``experiments/quality_harness.py`` is the command; it prints and draws the result.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from experiments.refill_eval import SmallLM, privatize_corpus, stage_stats, train_model, base_model, write_jsonl

ARMS = ("base", "raw", "synthetic", "raw_encrypted", "synthetic_encrypted")
LABELS = {"base": "base (no CPT)", "raw": "CPT on the raw articles", "raw_encrypted": "CPT on the encrypted articles",
          "synthetic": "CPT on the synthetic text", "synthetic_encrypted": "CPT on the encrypted synthetic text"}
CHANCE = 0.25
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
"""The plain chat template given to a served model that has none (the project's own)."""
TINY_NOTE = ("with the tiny model trained on WikiText-2 the accuracies are near chance (25%) and the run checks the "
             "mechanics; give a real model with --base-model DIR (any local Hugging Face causal LM) and "
             "--llm-url/--llm-model to measure the effect")


# ---- the data ------------------------------------------------------------------------

@dataclass(frozen=True)
class Question:
    article: str  # the article's key
    question: str
    options: tuple[str, ...]
    gold: int


@dataclass(frozen=True)
class Article:
    key: str
    text: str
    questions: tuple[Question, ...]


def load_quality(path: str | Path, n: int | None = None) -> list[Article]:
    """The first ``n`` articles (all when None) of a QuALITY full-text JSONL (``key``,
    ``article``, ``questions`` with ``question``, ``options``, 0-indexed ``gold_label``),
    with their questions. A question whose label is not one of its options is refused."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if n is not None and len(out) >= n:
                break
            r = json.loads(line)
            qs = []
            for q in r["questions"]:
                opts = tuple(str(o) for o in q["options"])
                gold = int(q["gold_label"])
                if not 0 <= gold < len(opts):
                    raise ValueError(f"{path}: {r['key']}: gold label {gold} of a question with {len(opts)} options")
                qs.append(Question(r["key"], q["question"], opts, gold))
            out.append(Article(r["key"], r["article"], tuple(qs)))
    return out


# ---- multiple-choice scoring -----------------------------------------------------------

def prompt(q: Question) -> str:
    """The closed-book context of a question (no article: what the model learnt is tested)."""
    return f"Question: {q.question.strip()}\nAnswer:"


def continuation(option: str) -> str:
    """An option as the text scored after :func:`prompt` (one space, as lm-eval's delimiter)."""
    return " " + option.strip()


def choice_loglikelihoods(adapter, contexts: Sequence[str], continuations: Sequence[str], *,
                          batch_tokens: int = 4096) -> list[tuple[float, int]]:
    """``(log p(continuation | context), continuation tokens)`` per pair, batched with the
    adapter's padding (:class:`attacks.model.ModelAdapter`). Context and continuation are
    tokenized apart and joined after a leading BOS (EOS where the tokenizer has no BOS,
    the adapter's convention); a sequence longer than the model's context loses the start
    of its context, never the continuation (one that alone does not fit is refused)."""
    import torch

    tok = adapter.tok
    lead = tok.bos_token_id if tok.bos_token_id is not None else adapter.bos
    ctx = tok(list(contexts), add_special_tokens=False)["input_ids"]
    cont = tok(list(continuations), add_special_tokens=False)["input_ids"]
    seqs, conts = [], []
    for c, x in zip(ctx, cont):
        if not x:
            raise ValueError("an empty continuation has no likelihood to compare")
        if len(x) >= adapter.max_len:
            raise ValueError(f"a continuation of {len(x)} tokens does not fit the model's context "
                             f"({adapter.max_len} positions)")
        s = [lead] + c + x
        if len(s) > adapter.max_len:
            s = [lead] + s[len(s) - adapter.max_len + 1:]
        seqs.append(s)
        conts.append(len(x))
    out: list[tuple[float, int] | None] = [None] * len(seqs)
    with torch.inference_mode():
        for idx, ids, lens in adapter._batches(seqs, batch_tokens):
            mask = (torch.arange(ids.shape[1], device=adapter.device)[None, :]
                    < torch.tensor(lens, device=adapter.device)[:, None])
            logits = adapter.model(input_ids=ids, attention_mask=mask.long()).logits[:, :-1].float()
            lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
            for r, k in enumerate(idx):
                n, c = lens[r], conts[k]
                out[k] = (float(lp[r, n - 1 - c: n - 1].double().sum()), c)
    return out  # type: ignore[return-value]


def score_choices(adapter, questions: Sequence[Question], *, batch_tokens: int = 4096) -> dict:
    """Closed-book multiple-choice accuracy: ``acc`` (the option with the highest summed
    log-likelihood) and ``acc_norm`` (the highest log-likelihood per character of the
    option, lm-eval-harness's normalisation), with each question's log-likelihoods and
    choices. Ties go to the first option."""
    pairs = [(prompt(q), continuation(o)) for q in questions for o in q.options]
    lls = choice_loglikelihoods(adapter, [p for p, _ in pairs], [c for _, c in pairs], batch_tokens=batch_tokens)
    per, i, right, right_norm = [], 0, 0, 0
    for q in questions:
        ll = [v for v, _ in lls[i: i + len(q.options)]]
        i += len(q.options)
        norm = [v / max(1, len(o.strip())) for v, o in zip(ll, q.options)]
        pick, pick_norm = _argmax(ll), _argmax(norm)
        right += pick == q.gold
        right_norm += pick_norm == q.gold
        per.append({"article": q.article, "gold": q.gold, "loglik": ll, "choice": pick, "choice_norm": pick_norm})
    n = len(questions)
    return {"questions": n, "acc": right / n if n else math.nan, "acc_norm": right_norm / n if n else math.nan,
            "correct": right, "correct_norm": right_norm, "per_question": per}


def _argmax(xs: Sequence[float]) -> int:
    return max(range(len(xs)), key=lambda k: (xs[k], -k))


# ---- decryption: SoE's Tables 5 and 6 --------------------------------------------------

def cipher_table(cipher, synthetic: Sequence[tuple[str, str]], articles: dict[str, str]) -> dict:
    """The entity tokens of the synthetic records (``(source article, text)`` pairs)
    decrypted with ``cipher``: :meth:`DecryptReport.summary` (SoE Table 5: unique cipher
    tokens, unique failures, total tokens, the failure ratio; invalid tokens are the
    failures) plus the unique failure ratio, and each token's origin (SoE Table 6's
    split): ``own`` (in its source article, as redaction wrote it), ``other_article``
    (decrypts, but copied from another article: SoE's FCAOA), ``nowhere`` (in no article:
    made up; these are the failures unless the model forged a valid token)."""
    from privatize.ciphers.entity import DecryptReport

    total = DecryptReport()
    origin = {"own": 0, "other_article": 0, "nowhere": 0}
    for src, text in synthetic:
        _, rep = cipher.decrypt_text(text)
        total.add(rep)
        for t in rep.tokens:
            if t["token"] in articles.get(src, ""):
                origin["own"] += 1
            elif any(t["token"] in a for k, a in articles.items() if k != src):
                origin["other_article"] += 1
            else:
                origin["nowhere"] += 1
    s = total.summary()
    s["unique_failure_ratio"] = s["unique_failures"] / s["unique_tokens"] if s["unique_tokens"] else 0.0
    s["origin"] = origin
    return s


def growth(stats: dict, articles: int, source_tokens: int, synthetic_tokens: int) -> dict:
    """The synthesize stage's cost and yield per article: requests, LLM tokens in and out,
    and the growth factor (synthetic tokens per source token, counted with one tokenizer;
    the stage's own word ratio beside it). ``tokens_out`` counts every answer, filtered
    ones and pair scores too; the synthetic tokens only the samples kept."""
    n = max(1, articles)
    return {"articles": articles, "requests": stats["requests"], "requests_per_article": stats["requests"] / n,
            "tokens_in": stats["tokens_in"], "tokens_out": stats["tokens_out"],
            "tokens_in_per_article": stats["tokens_in"] / n, "tokens_out_per_article": stats["tokens_out"] / n,
            "source_tokens": source_tokens, "synthetic_tokens": synthetic_tokens,
            "synthetic_tokens_per_source_token": synthetic_tokens / max(1, source_tokens),
            "tokens_out_per_source_token": stats["tokens_out"] / max(1, source_tokens),
            "synthetic_words_per_source_word": stats["synthetic_words"] / max(1, stats["source_words"])}


# ---- the served LLM --------------------------------------------------------------------

def chat_model(model: Path, dest: Path) -> Path:
    """``model`` itself when its tokenizer has a chat template; otherwise ``dest``: the
    same files (linked, not copied) with the tokenizer saved again with
    :data:`CHAT_TEMPLATE`, so ``transformers serve`` can answer chat requests."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if tok.chat_template:
        return model
    if (dest / "tokenizer_config.json").is_file() and AutoTokenizer.from_pretrained(dest).chat_template:
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    tok.chat_template = CHAT_TEMPLATE
    staged = dest.with_name(dest.name + ".tok")
    written = {Path(p).name for p in tok.save_pretrained(staged)}
    for f in model.iterdir():
        if f.is_file() and f.name not in written and not (dest / f.name).exists():
            (dest / f.name).symlink_to(f.resolve())
    for name in written:
        (dest / name).unlink(missing_ok=True)
        (staged / name).rename(dest / name)
    staged.rmdir()
    return dest


@contextmanager
def served(model: Path, log: Path, device: str = "cpu", timeout_s: float = 300.0) -> Iterator[str]:
    """``transformers serve`` of a local model folder on a free loopback port (offline:
    ``HF_HUB_OFFLINE=1``); yields the chat-completions base URL, stops the server after."""
    import socket
    import subprocess
    import sys

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = os.path.join(os.path.dirname(sys.executable), "transformers")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
                                 "--device", device], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"transformers serve {'exited' if proc.poll() is not None else 'did not answer'}"
                                   f" (log {log}):\n{tail}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the plan and the pipeline ---------------------------------------------------------

@dataclass(kw_only=True)
class QualityPlan(SmallLM):
    data: Path
    """``quality_dev_fulltext.jsonl``."""
    work: Path
    base_corpus: Path | None = None
    """The base model's pre-training corpus (JSONL; WikiText-2): needed without ``base_model``."""
    articles: int = 3
    base_steps: int = 300
    adapt_steps: int = 100
    llm_url: str | None = None
    """An OpenAI-compatible base URL; None serves the base model here (``transformers serve``)."""
    llm_model: str | None = None
    llm_api_key: str | None = None
    """A reference (``env:NAME``, ``file:PATH``), never the key."""
    synthesize: dict = field(default_factory=lambda: {"max_entities": 4, "max_k": 3})
    """Settings of the synthesize stage (besides ``llm`` and ``cache``)."""
    llm: dict = field(default_factory=lambda: {"max_tokens": 48, "max_in_flight": 4, "timeout_s": 600})
    """Settings of the stage's ``llm`` (besides the URL, model and key)."""
    arms: tuple[str, ...] = ("base", "raw", "synthetic")
    device: str = "cpu"
    cpus: int = 1
    """CPUs (and torch threads) of the training worker."""
    batch_tokens: int = 4096


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _records(out: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return [r for f in sorted((out / "shards").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def evaluate(plan: QualityPlan, progress: bool = True) -> dict:
    """Run the pipeline (module docstring) and return its figures (also written to
    ``work/result.json``). Every finished step is kept in ``work`` (the base model, the
    privatized corpus, each training), so an interrupted evaluation resumes."""
    from attacks.model import ModelAdapter, checkpoint_dir
    from privatize.ciphers.entity import EntityCipher
    from privatize.keys import load_key_file, new_key, write_key_file
    from train.tokenizer import load_tokenizer

    unknown = set(plan.arms) - set(ARMS)
    if unknown:
        raise ValueError(f"arms: unknown {sorted(unknown)} (known: {', '.join(ARMS)})")
    if plan.llm_url is not None and not plan.llm_model:
        raise ValueError("llm_model: give the model name the endpoint at llm_url serves")
    work = Path(plan.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    phases: dict[str, float] = {}

    def say(msg: str) -> None:
        if progress:
            print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    def phase(name: str, since: float) -> None:
        phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - since, 1)

    optim = {"batch_size": plan.batch_size, "lr": plan.lr, "warmup_steps": min(20, plan.adapt_steps // 5),
             "seed": plan.seed, "epochs": 1000}
    workers = {"num_workers": 1, "use_gpu": plan.device.startswith("cuda"),
               "cpus_per_worker": 1 if plan.device.startswith("cuda") else max(1, plan.cpus)}
    common = {"version": 1, "data": {"seq_len": plan.seq_len}, "checkpoint_every": 10_000_000,
              "report_every": 10_000_000, "workers": workers}

    # (1) the articles and their questions
    arts = load_quality(plan.data, plan.articles)
    questions = [q for a in arts for q in a.questions]
    raw = write_jsonl([{"doc_id": a.key, "text": a.text} for a in arts],
                      work / "corpora" / f"raw-{len(arts)}.jsonl")
    say(f"data: {len(arts)} QuALITY articles, {len(questions)} questions")

    t = time.perf_counter()
    if plan.base_model is None:
        if plan.base_corpus is None:
            raise ValueError("base_corpus: a base model is pretrained on it (or give base_model)")
        say(f"base model: pretrain a {plan.preset} model {plan.base_steps} steps on {Path(plan.base_corpus).name}")
    base = base_model(plan, plan.base_corpus, work, common, optim, progress)
    phase("base model", t)
    tok = load_tokenizer(str(checkpoint_dir(base)), what="model")

    # (2) privatize: redact (encrypt) then synthesize
    key_file = work / "entity.key"
    if not key_file.is_file():
        write_key_file(new_key("aes-siv"), key_file)
    redact = {"kind": "redact", "operator": "encrypt", "key": f"file:{key_file.resolve()}"}
    llm_id = (plan.llm_url, plan.llm_model) if plan.llm_url else ("served", str(Path(base).resolve()))
    tag = _digest(len(arts), llm_id, plan.synthesize, plan.llm)
    synth_out = work / "corpora" / f"synthetic-{tag}"

    def synth_stages(url: str, model: str) -> list[dict]:
        llm = {"base_url": url, "model": model, **plan.llm}
        if plan.llm_api_key:
            llm["api_key"] = plan.llm_api_key
        return [redact, {"kind": "synthesize", "cache": str((work / "llm-cache").resolve()), **plan.synthesize,
                         "llm": llm}]

    t = time.perf_counter()
    if (synth_out / "manifest.json").is_file():
        say(f"privatize: done already ({synth_out.name})")
        manifest = json.loads((synth_out / "manifest.json").read_text())
        endpoint = manifest["spec"]["stages"][1]["llm"]["base_url"] + " (a finished run, reused)"
    elif plan.llm_url:
        say(f"privatize: redact (encrypt) + synthesize against {plan.llm_url} ({plan.llm_model})")
        manifest = privatize_corpus(synth_stages(plan.llm_url, plan.llm_model), raw, synth_out)
        endpoint = plan.llm_url
    else:
        served_dir = chat_model(Path(checkpoint_dir(base)), work / "chat-model")
        say(f"privatize: transformers serve {served_dir} on loopback; redact (encrypt) + synthesize")
        with served(served_dir, work / "serve.log", device=plan.device) as url:
            manifest = privatize_corpus(synth_stages(url, str(served_dir)), raw, synth_out)
        endpoint = "transformers serve (loopback)"
    phase("privatize", t)
    st = stage_stats(manifest, "synthesize")
    say(f"privatize: {st['requests']} requests ({st['requests_cached']} cached), {st['tokens_in']:,} tokens in, "
        f"{st['tokens_out']:,} out; edges {st['edges']}, tuples {st['tuples']}; samples kept {st['samples']}, "
        f"filtered empty {st['filtered_empty']}, format {st['filtered_format']}, entities {st['filtered_entities']}")

    # (3) decrypt, Table 5, growth
    t = time.perf_counter()
    rows = _records(synth_out)
    redacted = {r["doc_id"]: r["text"] for r in rows if r.get("synthesis_source") is None}
    synthetic = [r for r in rows if r.get("synthesis_source") is not None]
    synthetic.sort(key=lambda r: r["doc_id"])
    cipher = EntityCipher(load_key_file(key_file))
    table5 = cipher_table(cipher, [(r["synthesis_source"], r["text"]) for r in synthetic], redacted)
    articles_check = cipher_table(cipher, list(redacted.items()), redacted)
    decrypted = [cipher.decrypt_text(r["text"])[0] for r in synthetic]

    def n_tokens(texts: list[str]) -> int:  # the base model's tokenizer: one count for source and synthetic
        return sum(len(x) for x in tok(texts, add_special_tokens=False)["input_ids"]) if texts else 0

    grow = growth(st, len(arts), n_tokens([a.text for a in arts]), n_tokens(decrypted))
    phase("decrypt", t)
    say(f"decrypt: {table5['total_tokens']} entity tokens in {len(synthetic)} synthetic records, "
        f"{table5['invalid']} failures ({table5['unique_failures']} of {table5['unique_tokens']} unique); "
        f"growth {grow['synthetic_tokens_per_source_token']:.4f} synthetic tokens per source token, "
        f"{grow['requests_per_article']:.1f} requests per article")

    corpora = {"raw": raw}
    if "raw_encrypted" in plan.arms:
        corpora["raw_encrypted"] = write_jsonl([{"doc_id": k, "text": v} for k, v in redacted.items()],
                                               work / "corpora" / f"raw_encrypted-{tag}.jsonl")
    if synthetic:
        corpora["synthetic"] = write_jsonl(
            [{"doc_id": r["doc_id"], "text": d} for r, d in zip(synthetic, decrypted)],
            work / "corpora" / f"synthetic-{tag}.jsonl")
        corpora["synthetic_encrypted"] = write_jsonl(
            [{"doc_id": r["doc_id"], "text": r["text"]} for r in synthetic],
            work / "corpora" / f"synthetic_encrypted-{tag}.jsonl")

    # (4) continual pre-training, (5) accuracy
    models: dict[str, Path] = {"base": Path(base)}
    skipped: dict[str, str] = {}
    train_seconds: dict[str, float] = {}
    for arm in plan.arms:
        if arm == "base":
            continue
        if arm not in corpora:
            skipped[arm] = (f"no synthetic sample passed the synthesize stage's checks ({st['samples']} kept of "
                            f"{st['samples'] + st['filtered_empty'] + st['filtered_format'] + st['filtered_entities']}"
                            " answered): nothing to train on")
            say(f"{arm}: skipped: {skipped[arm]}")
            continue
        digest = _digest(str(Path(base).resolve()), corpora[arm].name, plan.adapt_steps, plan.seed, plan.seq_len,
                         plan.batch_size, plan.lr, workers)
        run = work / "runs" / f"{arm}-{digest}"
        say(f"{arm}: continual pre-training, {plan.adapt_steps} steps on {corpora[arm].name}")
        t = time.perf_counter()
        summary = train_model({**common, "kind": "continue",
                          "data": {"path": str(corpora[arm]), "seq_len": plan.seq_len},
                          "model": {"preset": None, "checkpoint": str(checkpoint_dir(base))},
                          "optim": {**optim, "max_steps": plan.adapt_steps}}, run, progress)
        train_seconds[arm] = summary.get("seconds")
        phase("continual pre-training", t)
        models[arm] = run / "model"

    t = time.perf_counter()
    accuracy: dict[str, dict] = {}
    for arm, path in models.items():
        adapter = ModelAdapter.load(path, device=plan.device)
        accuracy[arm] = score_choices(adapter, questions, batch_tokens=plan.batch_tokens)
        del adapter
        a = accuracy[arm]
        say(f"{arm}: acc {a['acc']:.3f} ({a['correct']}/{a['questions']}), acc_norm {a['acc_norm']:.3f}")
    phase("scoring", t)

    plan_out = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(plan).items()}
    plan_out.pop("llm_api_key", None)
    result = {
        "plan": plan_out, "note": TINY_NOTE if plan.base_model is None else None,
        "articles": [a.key for a in arts], "questions": len(questions), "chance": CHANCE,
        "endpoint": endpoint, "synthesize_stats": st,
        "accuracy": {arm: {k: v for k, v in a.items() if k != "per_question"} for arm, a in accuracy.items()},
        "skipped": skipped, "table5": table5, "table5_articles": articles_check, "growth": grow,
        "synthetic_records": len(synthetic), "synthetic_example": decrypted[0][:300] if decrypted else None,
        "train_seconds": train_seconds, "phases": phases, "seconds": round(time.perf_counter() - t0, 1),
    }
    (work / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (work / "per_question.json").write_text(json.dumps({a: v["per_question"] for a, v in accuracy.items()}) + "\n")
    return result


# ---- printing and drawing --------------------------------------------------------------

def markdown(result: dict) -> str:
    """The accuracy table (one row per arm, skipped arms said so) and SoE's Table 5."""
    lines = ["| model | acc | acc_norm | correct / questions |", "|---|---:|---:|---:|"]
    for arm in ARMS:
        if arm in result["accuracy"]:
            a = result["accuracy"][arm]
            lines.append(f"| {LABELS[arm]} | {100 * a['acc']:.1f}% | {100 * a['acc_norm']:.1f}% | "
                         f"{a['correct']} / {a['questions']} |")
        elif arm in result["skipped"]:
            lines.append(f"| {LABELS[arm]} | skipped | | {result['skipped'][arm]} |")
    lines.append(f"| chance | {100 * result['chance']:.0f}% | {100 * result['chance']:.0f}% | |")
    t = result["table5"]
    lines += ["", "| entity tokens in the synthetic text | failures | cipher tokens | ratio |", "|---|---:|---:|---:|",
              f"| unique | {t['unique_failures']} | {t['unique_tokens']} | {t['unique_failure_ratio']:.3f} |",
              f"| total | {t['invalid']} | {t['total_tokens']} | {t['failure_ratio']:.3f} |"]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """Bars: acc and acc_norm per arm, chance as a line; skipped arms named in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in ARMS if a in result["accuracy"]]
    fig, ax = plt.subplots(figsize=(2.0 + 1.6 * len(arms), 4))
    for j, (k, label) in enumerate((("acc", "acc (summed log-likelihood)"), ("acc_norm", "acc_norm (per character)"))):
        xs = [i + (j - 0.5) * 0.38 for i in range(len(arms))]
        ax.bar(xs, [100 * result["accuracy"][a][k] for a in arms], 0.38, label=label)
    ax.axhline(100 * result["chance"], color="grey", ls="--", lw=1, label="chance (4 options)")
    ax.set_xticks(range(len(arms)), [LABELS[a].replace(" on the ", "\non the ") for a in arms], fontsize=8)
    ax.set_ylabel(f"accuracy on {result['questions']} questions (%)")
    ax.set_ylim(0, 100)
    title = f"QuALITY, {len(result['articles'])} articles: closed-book multiple choice"
    if result["skipped"]:
        title += "\n(skipped, no data: " + ", ".join(result["skipped"]) + ")"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
