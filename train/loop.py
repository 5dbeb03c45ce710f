"""The training loop each Ray Train worker runs (``train_loop``), and its pieces.

A run is a list of phases per epoch: ``train`` (plain steps), ``private`` (DP-SGD), or for
CRT ``public`` (plain) then ``private`` (DP-SGD) on the same model. Batches are drawn
statelessly from (seed, phase, epoch, step): the position in the data is the global step,
so a resumed run draws exactly the batches an uninterrupted one would.

How a step draws its examples (per example, or per individual under ``dp.unit:
individual``) is :mod:`train.batches`; a rank whose share is empty trains on one example
with no loss targets (zero gradient), so every rank takes part in each all-reduce.

Kind ``mlm`` trains a masked LM: each step masks a seeded draw of the batch's target
tokens (BERT's 80/10/10 recipe, :func:`mlm_batch`) and the loss is over those positions,
unshifted.

DP-SGD's pieces (Opacus', or book-keeping clipping) are :mod:`train.dp.engine`. CRT's public
steps use the same parameters with the grad sample hooks off and an optimizer of their own
(``dp.optimizer_state``), so that the DP steps' noise never enters the public steps' moment
estimates.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time

import numpy as np

from train.batches import (MaskedLMLoss, Owners, batch_indices, individual_batch, make_batch, mlm_batch,
                           position)
from train.dp.engine import DPSetup, make_private
from train.models import is_lora, unwrap
from train.plan import Phase, WorkerPlan
from train.setup import ModelInit
from train.dp.budget import group_bound

ADAPTER = "adapter"


def param_digest(model) -> str:
    return _digest(model.state_dict())


def lr_lambda(warmup: int, total: int, phases=None, dp_scale: float = 1.0):
    """Step -> learning-rate factor: linear warmup, then a cosine down to 0.1. With
    ``dp_scale`` the DP-SGD steps of ``phases`` take that multiple (``dp.lr / optim.lr``:
    CRT's private steps at their own rate; the public steps have an optimizer of their own)."""
    def f(step: int) -> float:
        if warmup and step < warmup:
            r = (step + 1) / warmup
        else:
            frac = (step - warmup) / max(1, total - warmup)
            r = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        if dp_scale != 1.0 and step < total and phases[position(phases, step)[1]].dp:
            r *= dp_scale
        return r
    return f


# ---- the worker ------------------------------------------------------------------------

def _init_model(init: ModelInit):
    """The worker's model, in training mode: ``from_pretrained`` returns a model in eval
    mode, where Opacus' hooks record no activations (a DP run from a checkpoint then failed
    with "No activations detected for Linear") and dropout is off."""
    from train.models import (add_token_rows, build_model, load_checkpoint, mlm_preset_config, preset_config,
                              resize_for_new_vocabulary, with_lora)

    if init.checkpoint:
        model = load_checkpoint(init.checkpoint, init.mlm)
        if init.fresh_weights:
            model = build_model(model.config, init.seed, init.mlm)
        if init.resize_to:
            resize_for_new_vocabulary(model, init.resize_to, init.seed, **init.special)
        if init.grow_to:
            add_token_rows(model, init.grow_to)
        if init.lora is not None:
            model = with_lora(model, init.lora, init.seed)
        return model.train()
    config = (mlm_preset_config if init.mlm else preset_config)(init.preset, init.vocab_size, **init.special)
    return build_model(config, init.seed, init.mlm).train()


def train_step(model, dp: "DPSetup | None", opt, private: bool, x, y, bf16: bool = False,
               pad_id: int | None = None, groups=None) -> float:
    """One optimizer step on (x, y): DP-SGD when ``private`` (Opacus' clipping and noise),
    else a plain step on the same parameters (grad sample hooks off). Returns the loss.
    With ``pad_id`` the model is a masked LM: padding is left out of attention and the
    logits are not shifted (``y`` is aligned with ``x``). With ``groups`` (example i's
    individual, ``dp.unit: individual``) an individual's gradient is the mean of its
    examples' and is clipped as one."""
    import torch

    if private and dp is None:
        raise ValueError("a private step needs the DP pieces")
    fwd = model
    if dp is not None:
        dp.plain(not private)
        fwd = dp.module

    def forward():
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            if pad_id is not None:
                return fwd(input_ids=x, attention_mask=(x != pad_id).long()).logits
            return fwd(input_ids=x, use_cache=False).logits[:, :-1]

    if not private:
        loss = MaskedLMLoss()(forward(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())
    weight = None
    if groups is not None:
        groups = torch.as_tensor(groups if len(groups) else np.zeros(1, np.int64), device=x.device)
        weight = 1.0 / torch.bincount(groups).to(torch.float32)[groups]  # the mean over an individual's blocks
    if dp.bk is not None:
        # one backward of the per-example losses' sum (each example's gradient unscaled,
        # as the optimizer expects), parameters frozen; then the clipped sum in p.grad.
        # DDP's own all-reduce is off (no_sync): the DP optimizer reduces the noised sum
        sync = fwd.no_sync() if hasattr(fwd, "no_sync") else contextlib.nullcontext()
        with sync, dp.bk.capture():
            per = MaskedLMLoss("none")(forward(), y)
            (per if weight is None else per * weight).sum().backward()
        dp.bk.clip_and_sum(groups)
        value = float(per.detach().mean())
    elif groups is not None:  # hooks: per-example gradients (Opacus undoes the mean), summed per individual
        per = MaskedLMLoss("none")(forward(), y)
        (per * weight).mean().backward()
        dp.group_grad_samples(groups)
        value = float(per.detach().mean())
    else:
        loss = dp.criterion(forward(), y)
        loss.backward()
        value = loss.item() if dp.ghost else float(loss.detach())
    dp.optimizer.step()
    dp.optimizer.zero_grad(set_to_none=True)
    return value


class _Run:
    """One worker's training state: model, optimizers, schedule, noise, position."""

    def __init__(self, plan: WorkerPlan, rank: int, world: int, data: dict):
        import ray.train
        import torch
        from ray.train.torch import prepare_model

        self.plan, self.rank, self.world, self.data = plan, rank, world, data
        model = _init_model(plan.init)
        state = None
        ckpt = ray.train.get_checkpoint()
        if ckpt is not None:
            from safetensors.torch import load_file

            with ckpt.as_directory() as d:
                state = torch.load(os.path.join(d, "state.pt"), weights_only=False)
                if is_lora(model):
                    from peft import set_peft_model_state_dict

                    set_peft_model_state_dict(model, load_file(os.path.join(d, ADAPTER, "adapter_model.safetensors")))
                else:
                    model.load_state_dict(load_file(os.path.join(d, "model", "model.safetensors")))
        self.start = _lora_start(model)
        self.model = prepare_model(model)
        self.device = next(self.model.parameters()).device
        params = [p for p in self.model.parameters() if p.requires_grad]
        o = plan.optim
        optimizer = torch.optim.SGD if o.optimizer == "sgd" else torch.optim.AdamW
        self.opt = optimizer(params, lr=o.lr, weight_decay=o.weight_decay)
        self.noise = torch.Generator(device=self.device)
        self.noise.manual_seed(plan.seed * 7919 + rank)
        self.dp = self.owners = None
        if plan.dp is not None:
            d = plan.dp
            units = len(data[d.split])
            if d.individual_blocks is not None:
                self.owners = Owners(data[d.split].owner)
                units = len(self.owners)
            self.dp = make_private(self.model, self.opt, noise_multiplier=d.noise_multiplier,
                                   max_grad_norm=d.max_grad_norm, sample_rate=d.sample_rate,
                                   expected_batch_size=d.sample_rate * units / world,
                                   accountant=d.accountant, grad_sample_mode=d.grad_sample_mode,
                                   distributed=world > 1, generator=self.noise)
        scale = plan.dp.lr / o.lr if plan.dp is not None and plan.dp.lr is not None else 1.0
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(o.warmup_steps, plan.total_steps,
                                                                           plan.phases, scale))
        # CRT's public steps have an optimizer of their own on the same parameters unless
        # ``dp.optimizer_state: shared``. Sharing the DP steps' one, Adam's second moments
        # fill with the DP noise (per coordinate far larger than a true gradient) and shrink
        # every later public step about 100-fold (see DPConfig.optimizer_state).
        self.public_opt = self.public_sched = None
        if plan.dp is not None and plan.dp.optimizer_state == "separate" and any(not ph.dp for ph in plan.phases):
            self.public_opt = optimizer(params, lr=o.lr, weight_decay=o.weight_decay)
            self.public_sched = torch.optim.lr_scheduler.LambdaLR(self.public_opt,
                                                                  lr_lambda(o.warmup_steps, plan.total_steps))
        self.last_lr = o.lr
        self.step, self.tokens = 0, 0
        if state is not None:
            self.opt.load_state_dict(state["optimizer"])
            self.sched.load_state_dict(state["scheduler"])
            if self.public_opt is not None:
                if state.get("public_optimizer") is None:
                    raise ValueError("this checkpoint has no state for CRT's public optimizer (written before its "
                                     "public and private steps had optimizers of their own): start the run afresh")
                self.public_opt.load_state_dict(state["public_optimizer"])
                self.public_sched.load_state_dict(state["public_scheduler"])
            self.step, self.tokens = state["step"], state["tokens"]
            gens = state["noise_generator"]
            self.noise.set_state(gens[rank] if rank < len(gens) else gens[0])
            if self.dp is not None:
                self.dp.accountant.load_state_dict(state["accountant"])

    def dp_steps(self) -> int:
        return sum(h[2] for h in self.dp.accountant.history) if self.dp is not None else 0

    def record(self, phase: Phase, epoch: int, loss_sum: float, loss_n: int, tok_rate: float) -> dict:
        """The figures of the last window, the same on every rank (losses averaged)."""
        import torch

        if self.world > 1:
            import torch.distributed as dist

            t = torch.tensor([loss_sum], dtype=torch.float64)
            dist.all_reduce(t)
            loss_sum = t.item() / self.world
        rec = {"step": self.step, "epoch": epoch, "phase": phase.name, "loss": loss_sum / max(1, loss_n),
               "lr": self.last_lr, "tokens": self.tokens, "tokens_per_s": tok_rate}
        if self.dp is not None and self.dp_steps() and self.plan.dp.noise_multiplier > 0:
            eps = float(self.dp.accountant.get_epsilon(delta=self.plan.dp.delta))
            # the unit's figure: a record of up to k blocks is a group of k (train.dp.budget.group_bound)
            rec["epsilon"] = group_bound(eps, self.plan.dp.delta, self.plan.dp.group)[0] if math.isfinite(eps) else eps
            rec["dp_steps"] = self.dp_steps()
        return rec

    def report(self, rec: dict, checkpoint: bool) -> None:
        """``ray.train.report`` on every rank; rank 0 attaches the checkpoint: weights,
        optimizer, schedule, position, every rank's noise state, the accountant."""
        import tempfile

        import ray.train
        import torch
        from ray.train import Checkpoint

        gens = _gather_generator_states(self.noise, self.world) if checkpoint else None
        with tempfile.TemporaryDirectory() as d:
            out = None
            if checkpoint and self.rank == 0:
                # a LoRA run's checkpoint is its adapter: the frozen base is the run's
                # model.checkpoint (and the driver merges the two at the end)
                unwrap(self.model).save_pretrained(os.path.join(d, ADAPTER if is_lora(unwrap(self.model)) else "model"))
                public = self.public_opt is not None
                torch.save({"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict(),
                            "public_optimizer": self.public_opt.state_dict() if public else None,
                            "public_scheduler": self.public_sched.state_dict() if public else None,
                            "step": self.step, "tokens": self.tokens, "noise_generator": gens,
                            "accountant": self.dp.accountant.state_dict() if self.dp is not None else None},
                           os.path.join(d, "state.pt"))
                with open(os.path.join(d, "position.json"), "w") as f:
                    json.dump({**rec, "dp_steps": rec.get("dp_steps", 0)}, f)
                out = Checkpoint.from_directory(d)
            ray.train.report(rec, checkpoint=out)


def _rendezvous() -> dict:
    """How this worker's process group met its peers: the store's type and gloo's interface
    (``train.rendezvous``: a file store and loopback on one machine)."""
    import torch.distributed as dist

    store = None
    if dist.is_initialized():
        from torch.distributed.distributed_c10d import _get_default_store

        s = _get_default_store()
        while type(s).__name__ == "PrefixStore" and hasattr(s, "underlying_store"):
            s = s.underlying_store
        store = type(s).__name__
        if store == "Store":  # a store written in Python comes back as its base type
            from train.rendezvous import ACTOR_STORE_KEY

            store = "ActorStore" if s.check([ACTOR_STORE_KEY]) else store
    return {"store": store, "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}


def train_loop(config: dict) -> None:
    """Ray Train's ``train_loop_per_worker``. ``config`` holds the run's
    :class:`~train.plan.WorkerPlan` (``plan``), the blocks' object references per split
    (``splits``) and the metrics actor (``sink``)."""
    import ray.train
    import torch

    from train.data import from_refs

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    plan: WorkerPlan = config["plan"]
    torch.set_num_threads(plan.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    sink = config["sink"]
    sink.worker.remote({"rank": rank, "world": world, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                        "rendezvous": _rendezvous()})
    data = {name: from_refs(refs) for name, refs in config["splits"].items()}
    phases, total, bs, seed, mlm = plan.phases, plan.total_steps, plan.batch_size, plan.seed, plan.mlm
    dp_cap = plan.dp.steps_cap if plan.dp is not None else None
    run = _Run(plan, rank, world, data)
    t_last, tok_last, loss_sum, loss_n, last_loss = time.perf_counter(), run.tokens, 0.0, 0, float("nan")
    while run.step < total:
        epoch, pi, k = position(phases, run.step)
        ph = phases[pi]
        blocks = data[ph.split]
        groups = None
        if ph.dp and run.owners is not None:
            people = individual_batch(run.owners, ph, seed, epoch, k, pi, plan.dp.individual_blocks)
            mine = people[rank::world]
            chosen, share = _cat(people), _cat(mine)
            groups = np.repeat(np.arange(len(mine)), [len(b) for b in mine])
        else:
            chosen = batch_indices(ph, len(blocks), bs, seed, epoch, k, pi, plan.poisson)
            share = chosen[rank::world]
        if mlm:
            x, y = mlm_batch(blocks.ids, blocks.loss, share, mlm, seed, epoch, run.step, run.device)
        else:
            x, y = make_batch(blocks.ids, blocks.loss, share, run.device)
        if ph.dp and dp_cap is not None and run.dp_steps() >= dp_cap:
            raise RuntimeError("privacy budget spent: the run's DP steps are done (refusing to continue)")
        opt = run.opt if ph.dp or run.public_opt is None else run.public_opt
        last_loss = train_step(run.model, run.dp, opt, ph.dp, x, y, plan.bf16, mlm.pad_id if mlm else None,
                               groups)
        run.last_lr = opt.param_groups[0]["lr"]  # the rate this step took
        run.sched.step()
        if run.public_sched is not None:
            run.public_sched.step()
        run.step += 1
        run.tokens += int(blocks.loss[chosen].sum() if mlm else blocks.loss[chosen, 1:].sum())
        loss_sum, loss_n = loss_sum + last_loss, loss_n + 1
        checkpoint = run.step % plan.checkpoint_every == 0 or run.step == total
        if checkpoint or run.step % plan.report_every == 0:
            now = time.perf_counter()
            rec = run.record(ph, epoch, loss_sum, loss_n, (run.tokens - tok_last) / max(1e-9, now - t_last))
            t_last, tok_last, loss_sum, loss_n = now, run.tokens, 0.0, 0
            if rank == 0:
                sink.write.remote(rec)
            run.report(rec, checkpoint)
    final = {"rank": rank, "digest": param_digest(unwrap(run.model)), "last_loss": last_loss}
    if run.start is not None:
        final["lora"] = _lora_moved(unwrap(run.model), run.start)
    sink.final.remote(final)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _lora_start(model) -> dict | None:
    """A LoRA model's adapter weights and its frozen weights' digest before this attempt's
    steps (None without LoRA)."""
    from train.models import adapter_state

    if not is_lora(model):
        return None
    return {"adapter": adapter_state(model), "frozen": _frozen_digest(model)}


def _lora_moved(model, start: dict) -> dict:
    """How far the adapter moved, and whether the frozen base stayed as it was: the driver
    fails a run whose adapter did not move (Opacus issue #820: DP-LoRA runs that silently
    trained nothing)."""
    from train.models import adapter_state

    now = adapter_state(model)
    change = max(float((now[k].float() - v.float()).abs().max()) for k, v in start["adapter"].items())
    return {"adapter_max_change": change, "adapter_tensors": len(now),
            "base_unchanged": _frozen_digest(model) == start["frozen"]}


def _frozen_digest(model) -> str:
    """The digest of a LoRA model's weights other than its adapter's."""
    return _digest({k: v for k, v in model.state_dict().items() if "lora_" not in k})


def _digest(state: dict) -> str:
    h = hashlib.sha256()
    for k, v in sorted(state.items()):
        h.update(k.encode())
        h.update(v.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def _gather_generator_states(gen, world: int) -> list:
    """Every rank's noise generator state (rank 0 saves them all), so a resumed run adds
    the same noise an uninterrupted one would."""
    state = gen.get_state()
    if world == 1:
        return [state]
    import torch.distributed as dist

    out = [None] * world
    dist.all_gather_object(out, state)
    return out
