"""A training run, driven from one process: validate, tokenizer, data, Ray Train, outputs.

::

    from train.config import load_config
    from train.run import run_training
    summary = run_training(load_config("train/configs/tiny-pretrain.yaml").with_paths(data=..., output=...))

Everything a config can get wrong (unknown fields, a missing split, a checkpoint from
another tokenizer, a DP budget it would overspend) is found before the run folder is
made. The run folder::

    OUTPUT/
      tokenizer/          the run's tokenizer (Hugging Face format)
      checkpoints/        Ray Train's storage (unless ``storage`` names another place)
      privacy_plan.json   a DP run's noise, sample rate, delta and target (kept on resume)
      metrics.jsonl       loss, tokens/s, learning rate, epsilon every ``report_every`` steps
      workers.jsonl       one line per Ray Train worker start (rank, pid, node)
      model/              the final model with its tokenizer (written last but one)
      summary.json        final loss, tokens, epsilon/delta, confidentiality (written last)

Rerunning the same config on the same folder resumes from its last checkpoint; the
privacy accountant continues, and a resumed DP run may not spend past its target.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from privatize.errors import OutputError, SpecError
from privatize.output import MANIFEST
from train.config import TrainConfig
from train.kinds import train_kind
from train.dp.audit import SEED_FIELD
from train.audit_run import Canaries, insert_canaries, run_audit
from train.final import base_of, check_lora, save_final
from train.planning import PLAN, plan_run
from train.plan import Prepared, RunPlan
from train.setup import ModelSource
from train.progress import SUMMARY, ProgressBar, sink_class

log = logging.getLogger(__name__)

RAY_RUN_NAME = "train"


def _manifest(data: str) -> dict | None:
    p = Path(data) / MANIFEST
    try:
        return json.loads(p.read_text()) if p.is_file() else None
    except (OSError, ValueError):
        return None


def _latest_checkpoint(storage: str) -> tuple[str, dict, object] | None:
    """(path, position.json, filesystem) of the last complete checkpoint of this run's
    storage: a local folder or a pyarrow.fs URI (``s3://...``)."""
    import pyarrow.fs as pafs

    try:
        fs, root = pafs.FileSystem.from_uri(storage) if "://" in storage else (pafs.LocalFileSystem(),
                                                                                 str(Path(storage).resolve()))
    except (OSError, ValueError) as exc:
        raise OutputError(f"storage: {storage}: cannot open ({str(exc).splitlines()[0]})") from None
    base = f"{root.rstrip('/')}/{RAY_RUN_NAME}"
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as exc:
        raise OutputError(f"storage: {storage}: cannot list ({str(exc).splitlines()[0]})") from None
    found = []
    for info in infos:
        if info.type != pafs.FileType.Directory or not info.base_name.startswith("checkpoint_"):
            continue
        try:
            with fs.open_input_stream(f"{info.path}/position.json") as f:
                found.append((info.path, json.loads(f.read())))
        except (OSError, ValueError):
            continue  # an incomplete checkpoint
    if not found:
        return None
    path, pos = max(found, key=lambda x: x[1]["step"])
    return path, pos, fs


def storage_of(cfg: TrainConfig, output: Path) -> str:
    return cfg.storage or str(output / "checkpoints")


def prepare(cfg: TrainConfig) -> Prepared:
    """Every check that needs no training: raises SpecError/InputError/OutputError."""
    from train.data import _check_columns, data_files
    from train.tokenizer import fingerprint, load_tokenizer

    if not cfg.data.path:
        raise SpecError("data.path: no training data (give it in the config or with --data)")
    if not cfg.output:
        raise SpecError("output: no run folder (give it in the config or with --output)")
    out = Path(cfg.output)
    if (out / SUMMARY).exists():
        raise OutputError(f"output: {out} holds a finished run ({SUMMARY}); choose another folder")
    if out.exists() and not out.is_dir():
        raise OutputError(f"output: {out} is not a folder")
    fmt, files = data_files(cfg.data.path)
    import pyarrow.parquet as pq

    names = pq.read_schema(files[0]).names if fmt == "parquet" else None
    kind = train_kind(cfg.kind)
    splits = kind.splits(cfg)
    if names is not None:
        for s in set(splits.values()):
            _check_columns(names, cfg.data.text_column, s, files[0], cfg.data.ignore_spans)
    elif cfg.data.ignore_spans and fmt == "text":
        raise SpecError("data.ignore_spans: plain text has no span column; give Parquet or JSONL")
    try:
        kind.check_data(fmt)
    except ValueError as exc:
        raise SpecError(str(exc)) from None

    tok_from, checkpoint, base_vocab = None, None, None
    if cfg.tokenizer.path:
        load_tokenizer(cfg.tokenizer.path)
        tok_from = cfg.tokenizer.path
    if cfg.model.checkpoint:
        ck = Path(cfg.model.checkpoint)
        if not (ck / "config.json").is_file():
            raise SpecError(f"model.checkpoint: {ck} is not a Hugging Face model folder (no config.json)")
        from transformers import AutoConfig

        mconf = AutoConfig.from_pretrained(ck)
        if kind.masked_lm and cfg.data.seq_len > getattr(mconf, "max_position_embeddings", cfg.data.seq_len):
            raise SpecError(f"data.seq_len: {cfg.data.seq_len} is longer than {ck}'s "
                            f"{mconf.max_position_embeddings} positions")
        checkpoint = str(ck.resolve())
        if not kind.fresh_weights and cfg.tokenizer.mode == "shared":
            ck_tok = load_tokenizer(str(ck), "model.checkpoint") if (ck / "tokenizer.json").is_file() else None
            if tok_from is None:
                if ck_tok is None:
                    raise SpecError(f"model.checkpoint: {ck} has no tokenizer; give tokenizer.path or use "
                                    "tokenizer.mode: separate")
                tok_from = str(ck)
            elif ck_tok is not None and fingerprint(ck_tok) != fingerprint(load_tokenizer(tok_from)):
                raise SpecError(f"tokenizer.path: {tok_from} is not the tokenizer {ck} was trained with; "
                                "use tokenizer.mode: separate to re-initialise the embeddings")
            if len(load_tokenizer(tok_from)) != mconf.vocab_size:
                raise SpecError(f"model.checkpoint: {ck} has a vocabulary of {mconf.vocab_size}, the tokenizer "
                                f"{len(load_tokenizer(tok_from))}: it was trained with another tokenizer")
            if not kind.masked_lm:
                base_vocab = mconf.vocab_size  # entity tokens it lacks are added (_tokenizer)
    elif kind.masked_lm:
        most = kind.presets()[cfg.model.preset]["max_position_embeddings"]
        if cfg.data.seq_len > most:
            raise SpecError(f"data.seq_len: {cfg.data.seq_len} is longer than the {cfg.model.preset} masked "
                            f"LM's {most} positions")
    source = ModelSource(seed=cfg.optim.seed, preset=None if checkpoint else cfg.model.preset, checkpoint=checkpoint,
                         fresh_weights=bool(checkpoint) and kind.fresh_weights, base_vocab=base_vocab)
    resume = None
    latest = _latest_checkpoint(storage_of(cfg, out))
    if latest is not None:
        resume = dict(latest[1], path=latest[0], filesystem=latest[2])
        if (out / "tokenizer").is_dir():
            tok_from = str(out / "tokenizer")
    return Prepared(cfg, kind, out, cfg.data.path, tok_from, source, splits, _manifest(cfg.data.path), resume)


def _tokenizer(p: Prepared, progress: bool, dest: Path):
    """Load or train the run's tokenizer, saved to ``dest``."""
    from train.data import read_texts
    from train.tokenizer import load_tokenizer, train_tokenizer

    if p.tokenizer_from:
        tok = load_tokenizer(p.tokenizer_from)
        if p.source.base_vocab and p.resume is None:
            _add_entity_tokens(p, tok, progress)
    else:
        cfg = p.config
        texts = read_texts(p.data, cfg.data.text_column, "all", cfg.data.max_records)
        for extra in cfg.tokenizer.also_on:
            texts += read_texts(extra, cfg.data.text_column, "all", cfg.data.max_records)
        vocab = cfg.tokenizer.vocab_size
        if cfg.model.preset and "vocab_size" not in cfg.tokenizer.model_fields_set:
            vocab = p.kind.presets()[cfg.model.preset]["vocab_size"]
        t0 = time.perf_counter()
        tok = train_tokenizer(texts, vocab, cfg.tokenizer.min_frequency, cfg.tokenizer.max_entity_tokens)
        if progress:
            print(f"tokenizer: {len(tok)} tokens from {len(texts)} texts in {time.perf_counter() - t0:.1f} s")
    tok.save_pretrained(dest)
    return tok


def _add_entity_tokens(p: Prepared, tok, progress: bool) -> None:
    """Fine-tuning a base with its own tokenizer: the entity tokens of this run's text that
    the base's tokenizer lacks (``Person_[...]``, the redaction stage's encrypt operator)
    become single special tokens, as a trained tokenizer's are; the model grows a row for
    each (``ModelInit.grow_to``, the mean row)."""
    from train.data import read_texts
    from train.tokenizer import entity_tokens

    cfg = p.config
    texts = read_texts(p.data, cfg.data.text_column, "all", cfg.data.max_records)
    vocab = tok.get_vocab()
    new = [t for t in entity_tokens(texts, cfg.tokenizer.max_entity_tokens) if t not in vocab]
    if new:
        tok.add_special_tokens({"additional_special_tokens": new}, replace_extra_special_tokens=False)
        if progress:
            print(f"tokenizer: the base's {p.source.base_vocab} tokens and {len(new)} entity tokens of this data")


def split_blocks(p: Prepared, split: str, tok_dir: str, local: bool, counts_only: bool = False):
    """One split of the run's data packed as its config says (column, length, spans, the DP
    unit's blocks): in this process (:func:`train.data.pack_local`) or as a materialised Ray
    Data plan (:func:`train.data.plan_blocks`)."""
    from train.data import pack_local, plan_blocks

    c = p.config
    args = (p.data, c.data.text_column, split, tok_dir, c.data.seq_len, c.data.mask_token_loss, c.data.max_records,
            c.data.ignore_spans, tuple(c.data.ignore_kinds))
    units = {"per_record": c.dp is not None and c.dp.unit == "record",
             "owners": c.dp is not None and c.dp.unit == "individual"}
    if local:
        return pack_local(*args, **units, counts_only=counts_only)
    return plan_blocks(*args, **units).materialize()


def _datasets(p: Prepared, tok_dir: str) -> dict:
    """Each split's packed blocks: with Ray Data, or in this process where ``data.packing``
    says so (``auto``: data files of up to ``LOCAL_PACK_BYTES``)."""
    from train.data import LOCAL_PACK_BYTES, data_bytes

    cfg = p.config
    local = cfg.data.packing == "local" or (cfg.data.packing == "auto" and data_bytes(p.data) <= LOCAL_PACK_BYTES)
    out = {}
    for name, split in p.splits.items():
        ds = split_blocks(p, split, tok_dir, local)
        n = ds.count()
        if n == 0 and not p.kind.may_be_empty(split):
            raise SpecError(f"data.split: the {split} split of {p.data} is empty")
        if n == 0:
            log.warning("the public split is empty: CRT trains with DP-SGD on everything")
        out[name] = (ds, n)
    return out


def _crt_inputs(p: Prepared) -> tuple[float, float, dict]:
    """gamma and delta_2 with where each came from: the training config (claimed, with its
    ``crt.source``) or the privatization manifest's ``quality`` (measured by the data owner
    on gold data, with its own ``source``)."""
    c = p.config.crt
    q = (p.manifest or {}).get("quality", {})
    out, provenance = [], {}
    for name in ("gamma", "delta_2"):
        typed = getattr(c, name) if c else None
        if typed is not None:
            out.append(float(typed))
            provenance[name] = {"origin": "claimed in the training config", "source": c.source}
        elif q.get(name) is not None:
            out.append(float(q[name]))
            provenance[name] = {"origin": "measured: the privatization manifest's quality",
                                "source": q.get("source")}
        else:
            raise SpecError(f"crt.{name}: not given, and the privatization manifest has no quality.{name} "
                            "(measure it on gold data; see benchmarks/RESULTS.md)")
    return out[0], out[1], provenance


def _stage(p: Prepared, progress: bool, timings: dict):
    """Tokenizer, materialised blocks and the plan; then, every check passed, the run
    folder with its tokenizer and privacy plan."""
    work = Path(tempfile.mkdtemp(prefix="privatize-train-"))
    try:
        t0 = time.perf_counter()
        tok = _tokenizer(p, progress, work / "tokenizer")
        timings["tokenizer_s"] = time.perf_counter() - t0
        data = _datasets(p, str(work / "tokenizer"))
        timings["data_s"] = time.perf_counter() - t0 - timings["tokenizer_s"]
        canaries = insert_canaries(p, tok, data)
        plan = plan_run(p, tok, data, progress, int(canaries.inserted.sum()) if canaries else 0)
        p.output.mkdir(parents=True, exist_ok=True)
        if plan.budget is not None and not (p.output / PLAN).exists():
            saved = (plan.budget.to_dict() | ({SEED_FIELD: canaries.seed} if canaries else {})
                     | ({"admitted": True} if p.config.admitted_plan else {}))
            (p.output / f".{PLAN}.tmp").write_text(json.dumps(saved, indent=2) + "\n")
            os.replace(p.output / f".{PLAN}.tmp", p.output / PLAN)
        if not (p.output / "tokenizer").is_dir():
            shutil.copytree(work / "tokenizer", p.output / ".tokenizer.tmp", dirs_exist_ok=True)
            os.replace(p.output / ".tokenizer.tmp", p.output / "tokenizer")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tok, data, plan, canaries


def _trainer(p: Prepared, data: dict, plan: RunPlan, sink, torch_config, canaries: Canaries | None = None):
    """The ``TorchTrainer`` for this run: CPU and gloo, or GPUs and nccl
    (``torch_config``: :func:`train.rendezvous.torch_config`)."""
    from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

    from train.data import block_refs
    from train.loop import train_loop
    from train.raytrain import trainer_class

    cfg = p.config
    splits = {k: block_refs(ds) for k, (ds, _) in data.items()}
    if canaries is not None:
        splits[canaries.split] = splits[canaries.split] + [canaries.ref]
    loop_cfg = {"plan": plan.worker, "splits": splits, "sink": sink}
    storage = storage_of(cfg, p.output)
    if "://" not in storage:
        storage = str(Path(storage).resolve())
    return trainer_class()(
        train_loop, train_loop_config=loop_cfg,
        torch_config=torch_config,
        scaling_config=ScalingConfig(num_workers=cfg.workers.num_workers, use_gpu=cfg.workers.use_gpu,
                                     resources_per_worker={"CPU": cfg.workers.cpus_per_worker}),
        run_config=RunConfig(name=RAY_RUN_NAME, storage_path=storage,
                             # a worker group that cannot start (too few CPUs or GPUs) is retried
                             # until workers.start_timeout_s, then the run fails; Ray's default
                             # retries forever
                             failure_config=FailureConfig(max_failures=cfg.max_failures,
                                                          controller_failure_limit=_start_tries(cfg) - 1),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
        resume_from_checkpoint=Checkpoint(p.resume["path"], filesystem=p.resume["filesystem"]) if p.resume else None,
    )


def _summary(p: Prepared, tok, plan: RunPlan, metrics: dict, state: dict, gamma_delta, timings: dict) -> dict:
    from train.dp.budget import crt_confidentiality
    from train.tokenizer import fingerprint

    cfg, budget, sizes = p.config, plan.budget, plan.sizes
    summary = {
        "kind": cfg.kind, "steps": metrics.get("step"), "final_loss": metrics.get("loss"),
        "last_step_loss": next((f["last_loss"] for f in state["finals"] if f["rank"] == 0), None),
        "tokens": metrics.get("tokens"), "seconds": round(timings["fit_s"], 2),
        "examples": sizes, "seq_len": cfg.data.seq_len, "tokenizer": {
            "mode": cfg.tokenizer.mode, "vocab_size": len(tok), "fingerprint": fingerprint(tok),
            "trained": p.tokenizer_from is None},
        "workers": {"count": cfg.workers.num_workers, "ranks": sorted({w["rank"] for w in state["workers"]}),
                    "pids": sorted({w["pid"] for w in state["workers"]}),
                    "final_param_digests": sorted({f["digest"] for f in state["finals"]})},
        "model": "model", "base": base_of(cfg.model.checkpoint) if cfg.model.checkpoint else None,
        "timings": {k: round(v, 2) for k, v in timings.items()}, "config": cfg.to_dict(),
    }
    if budget is not None:
        eps = None if cfg.dp.no_guarantee else metrics.get("epsilon", 0.0)
        delta = budget.delta
        if eps is None:
            summary["guarantee"] = "none: dp.no_guarantee (DP-SGD's sampling and clipping, no privacy claim)"
        summary["unit"] = {"name": budget.unit, "units": budget.units, "blocks_per_unit_max": budget.group,
                           "block_tokens": cfg.data.seq_len}
        if budget.unit == "individual":  # a unit of any size, clipped as one: no group bound
            summary["unit"].update(blocks_per_unit_max=None,
                                   blocks_per_step_max=cfg.dp.max_blocks_per_individual)
        if eps is not None and budget.group > 1:
            from train.dp.budget import group_bound

            # the workers report the record's epsilon (k times the block's, group privacy)
            block = eps / budget.group
            summary["unit"].update(block_epsilon=block, block_delta=delta)
            eps, delta = group_bound(block, delta, budget.group)
        summary.update(epsilon=eps, delta=delta, dp=budget.to_dict(),
                       dp_steps=metrics.get("dp_steps"))
    if gamma_delta is not None:
        g, d2, provenance = gamma_delta
        e_bc, d_bc = crt_confidentiality(summary["epsilon"], summary["delta"], g, d2)
        summary["confidentiality"] = {"gamma": g, "delta_2": d2, "provenance": provenance,
                                      "epsilon": e_bc, "delta": d_bc,
                                      "dp_epsilon": summary["epsilon"], "dp_delta": summary["delta"],
                                      "public_examples": sizes["public"], "private_examples": sizes["private"]}
    return summary


_START_TRY_S = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"


def _start_try_s() -> float:
    return float(os.environ.get(_START_TRY_S, "60"))


def _start_tries(cfg: TrainConfig) -> int:
    """Worker-group starts of :func:`_start_try_s` each (Ray Train's per-try timeout, 60 s
    unless set) that fit in ``workers.start_timeout_s``: at least one."""
    return max(1, math.ceil(cfg.workers.start_timeout_s / _start_try_s() - 1e-9))


def _raise_unschedulable(e: Exception, cfg: TrainConfig) -> None:
    """A run whose workers never started ends in one line naming what it asked for and
    what the cluster has (Ray Train's own message is a paragraph of possible causes)."""
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

    cause = getattr(e, "controller_failure", None)
    if not isinstance(cause, WorkerGroupStartupTimeoutError):
        return
    import ray

    from privatize.ray.cluster import RunStalled

    w = cfg.workers
    need = f"{w.num_workers} worker(s) x {w.cpus_per_worker:g} CPU" + (" and 1 GPU" if w.use_gpu else "")
    total, free = ray.cluster_resources(), ray.available_resources()
    have = f"{free.get('CPU', 0):g} of {total.get('CPU', 0):g} CPUs free"
    if w.use_gpu:
        have += f", {free.get('GPU', 0):g} of {total.get('GPU', 0):g} GPUs free"
    tries = _start_tries(cfg)
    raise RunStalled(f"workers: {need} could not start in {tries} tries of {_start_try_s():g} s "
                     f"(workers.start_timeout_s {cfg.workers.start_timeout_s:g}; the cluster has {have})") from None


_WATCHER = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


def run_training(cfg: TrainConfig, *, progress: bool = True, address: str | None = None) -> dict:
    """Run ``cfg`` to the end; returns the summary (also written to OUTPUT/summary.json)."""
    import ray

    from privatize.ray.cluster import connect

    p = prepare(cfg)
    gamma_delta = _crt_inputs(p) if p.kind.confidentiality else None
    connect(address)
    timings: dict[str, float] = {}
    tok, data, plan, canaries = _stage(p, progress, timings)
    sink = sink_class().options(scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
        ray.get_runtime_context().get_node_id(), soft=False)).remote(str(p.output.resolve()), progress)
    from train.rendezvous import torch_config

    with torch_config("nccl" if cfg.workers.use_gpu else "gloo") as tc:
        trainer = _trainer(p, data, plan, sink, tc, canaries)
        # Ray Train's controller looks at its workers every 2 s by default, so every run, however
        # short, ended up to 2 s after its last step; 0.5 s costs one small RPC per worker
        # (propagated from the driver to the controller; a value the user set is kept)
        os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
        # Ray Train watches for nodes being preempted with an actor of its own (one more
        # process to start beside the workers, about 1 s of a run's start on 2 cores); a
        # cluster of one node has no other node to lose: off for this run (a value the user
        # set is kept)
        no_watcher = _WATCHER not in os.environ and sum(1 for n in ray.nodes() if n.get("Alive")) == 1
        if no_watcher:
            os.environ[_WATCHER] = "0"
        # one start try is at most start_timeout_s (so a short budget is not rounded up to 60 s)
        if _START_TRY_S not in os.environ and cfg.workers.start_timeout_s < 60:
            os.environ[_START_TRY_S] = f"{cfg.workers.start_timeout_s:g}"
        # Ray Train's fit() leaves its SIGINT handler installed (it aborts this run's
        # controller, then sys.exit(0)): a Ctrl-C after the run (the audit, an experiment's
        # next step) would exit 0 as if all went well. The handler is this run's only.
        main_thread = threading.current_thread() is threading.main_thread()
        sigint = signal.getsignal(signal.SIGINT) if main_thread else None
        t0 = time.perf_counter()
        with ProgressBar(sink, plan.worker.total_steps, progress):
            try:
                result = trainer.fit()
            except Exception as e:
                _raise_unschedulable(e, cfg)
                raise
            finally:
                if no_watcher:
                    os.environ.pop(_WATCHER, None)
                if main_thread and sigint is not None:
                    signal.signal(signal.SIGINT, sigint)
    timings["fit_s"] = time.perf_counter() - t0
    # the final model, with its tokenizer, then the summary: a reader that finds the
    # summary finds the model
    state = ray.get(sink.state.remote())
    lora = check_lora(cfg, state)
    final_dir = save_final(p, plan, result.checkpoint, tok)
    summary = _summary(p, tok, plan, dict(result.metrics or {}), state, gamma_delta, timings)
    if lora is not None:
        summary["lora"] = lora
    if canaries is not None:
        # a canary is one block, its own unit: the audit bounds the per-block guarantee
        block_eps = summary["unit"].get("block_epsilon", summary["epsilon"])
        summary["audit"] = run_audit(p, canaries, final_dir, block_eps, plan.budget.delta, progress)
    tmp_s = p.output / f".{SUMMARY}.tmp"
    tmp_s.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp_s, p.output / SUMMARY)
    if progress:
        line = f"trained {cfg.kind}: {summary['steps']} steps, loss {summary['final_loss']:.4f}"
        if summary.get("epsilon") is not None:
            line += f", epsilon {summary['epsilon']:.3f} (delta {summary['delta']:.3g})"
        elif "epsilon" in summary:
            line += ", no DP guarantee (dp.no_guarantee)"
        if "confidentiality" in summary:
            c = summary["confidentiality"]
            line += f", confidentiality ({c['epsilon']:.4f}, {c['delta']:.3g})"
        print(f"{line}; model in {final_dir}")
    return summary
