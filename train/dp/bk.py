"""Book-keeping clipping (``grad_sample_mode: bk``): DP-SGD's per-example clipping in one
backward pass, with no per-example gradient materialised unless that is the cheaper way
to its norm (Bu et al., "Differentially Private Optimization on Large Model at Small
Cost", 2023: the idea, not their code).

Opacus' ``hooks`` mode builds every example's gradient (one more example-by-example
product per layer), and its ``ghost`` mode avoids that but runs a second backward pass
with the loss re-weighted by the clipping factors. Book-keeping runs the one backward with
the parameters frozen, so autograd computes only the gradients with respect to the
activations, and keeps what a layer's weight gradient is made of: its input ``a`` and the
gradient ``g`` at its output. From them, per layer:

* each example's gradient norm: for a linear layer either the ghost norm
  ``sum((a a^T) * (g g^T))`` (T x T per example) or the norm of ``g^T a`` (d_out x d_in),
  whichever costs less; for an embedding the ghost norm with ``[id_t == id_s]`` in place
  of ``a a^T``; for a norm layer's scale and bias the per-example gradients themselves
  (one vector each);
* after every layer's norms are in: the clipping factor of each example,
  ``min(1, C / (norm + 1e-6))`` (Opacus' formula), and the clipped sum
  ``(c g)^T a``: the one weight-gradient product the plain backward would have done.

The result goes to ``p.grad`` as the sum over examples of the clipped per-example
gradients, which is what Opacus' ``DPOptimizerFastGradientClipping`` (and its
distributed variant) expects: it adds the noise, scales by the expected batch size and
steps, and its accountant hook counts the step. Supported layers: ``nn.Linear``,
``nn.Embedding``, ``nn.LayerNorm`` and Llama's ``RMSNorm``; a model with another kind of
trainable layer is refused when the pieces are built.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

SUPPORTED = (nn.Linear, nn.Embedding, nn.LayerNorm, LlamaRMSNorm)
_ROUNDING = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}
"""Relative rounding of one element of a product in that precision (a unit in the last
place): the margin the clipping factor leaves for norms computed in it."""


@dataclass
class _Record:
    """What one call of a layer left for the clipping: its input and output gradient."""

    module: nn.Module
    a: torch.Tensor
    g: torch.Tensor | None = None


@dataclass
class BookKeeping:
    """Per-example clipping by book-keeping for the trainable layers of ``model``."""

    model: nn.Module
    max_grad_norm: float
    records: list[_Record] = field(default_factory=list)
    fuse: bool = True
    """Linear layers of one shape clipped together (:class:`_Stack`): a few batched
    products for all of them instead of a dozen small operations each."""
    _active: bool = False

    def __post_init__(self) -> None:
        self.layers: list[nn.Module] = []
        bad = set()
        for name, module in self.model.named_modules():
            own = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if not own:
                continue
            if not isinstance(module, SUPPORTED):
                bad.add(f"{name} ({type(module).__name__})")
                continue
            self.layers.append(module)
        if bad:
            raise ValueError("grad_sample_mode bk supports Linear, Embedding, LayerNorm and RMSNorm layers; "
                             f"this model also trains {', '.join(sorted(bad))}: use hooks or ghost")
        self.params = [p for m in self.layers for p in m.parameters(recurse=False) if p.requires_grad]
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("grad_sample_mode bk needs untied weights (a parameter two layers share gets "
                             "one gradient from two places): use hooks or ghost")
        self.trainable = {id(p) for p in self.params}
        for module in self.layers:  # after the checks: a refused model keeps no hook of ours
            module.register_forward_hook(self._forward_hook)

    # ---- capture ---------------------------------------------------------------------

    def _forward_hook(self, module: nn.Module, inputs: tuple, output: torch.Tensor):
        if not self._active:
            return None
        with torch.no_grad():
            a = inputs[0]
            if isinstance(module, (LlamaRMSNorm, nn.LayerNorm)):
                a = _normalised(module, a)  # what the scale multiplies
        rec = _Record(module, a.detach())
        self.records.append(rec)
        if isinstance(module, nn.Embedding) or not output.requires_grad:
            # no trainable layer before this one (an embedding; a LoRA adapter's first
            # matrix behind a frozen base): its output needs no gradient from upstream, so
            # the graph starts here
            output = output.detach().requires_grad_(True)

        def keep(grad: torch.Tensor) -> None:
            rec.g = grad.detach()

        output.register_hook(keep)
        return output

    @contextlib.contextmanager
    def capture(self):
        """Forward and backward inside: the layers' parameters frozen (autograd computes
        activation gradients only) and their inputs and output gradients recorded."""
        self.records.clear()
        frozen = [p for p in self.params if p.requires_grad]
        for p in frozen:
            p.requires_grad_(False)
        self._active = True
        try:
            yield self
        finally:
            self._active = False
            for p in frozen:
                p.requires_grad_(True)

    # ---- clip ------------------------------------------------------------------------

    def clip_and_sum(self, groups: torch.Tensor | None = None) -> torch.Tensor:
        """Set each parameter's ``grad`` to the sum over examples of its clipped
        per-example gradient; returns the per-example norms before clipping. With
        ``groups`` (example i's group, ``dp.unit: individual``) a group's gradient, the sum
        of its examples', is clipped as one and the norms are the groups'."""
        recs = [r for r in self.records if r.g is not None]
        if not recs:
            raise RuntimeError("bk: no layer saw a gradient (was backward run inside capture()?)")
        if len({id(r.module) for r in self.records}) != len(self.records):
            # an example's gradient is then a sum over calls: its norm is not the sum of theirs
            raise RuntimeError("bk: a layer ran more than once in one step (shared weights or activation "
                               "checkpointing): use hooks or ghost")
        grouped = _Grouping(groups) if groups is not None else None
        batch = recs[0].g.shape[0] if grouped is None else grouped.n
        sq = torch.zeros(batch, dtype=torch.float32, device=recs[0].g.device)
        margin = max((_ROUNDING.get(r.g.dtype, 0.0) for r in recs), default=0.0)
        stacks, single = ([], recs) if grouped is not None or not self.fuse else _stacks(recs, self.trainable)
        for st in stacks:
            sq += st.norm_sq()
        for r in single:
            sq += _norm_sq(r if grouped is None else grouped.record(r), self.trainable)
        norms = sq.sqrt()
        # products in bf16/fp16 (autocast) round each element by up to one unit in the last
        # place: the factor assumes the norm that much larger, so a clipped example's true
        # norm stays within max_grad_norm (the accountant's sensitivity); float32: exact
        factor = (self.max_grad_norm / (norms * (1.0 + margin) + 1e-6)).clamp(max=1.0)
        if grouped is not None:
            factor = factor[groups]  # each example clipped by its group's factor
        for p in self.params:
            p.grad = None
        for st in stacks:
            for p, grad in st.clipped_sums(factor):
                p.grad = grad
        for r in single:
            for p, grad in _clipped_sum(r, factor, self.trainable):
                p.grad = grad if p.grad is None else p.grad + grad
        for p in self.params:  # a layer no example used (an embedding row is per row, not per layer)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self.records.clear()
        return norms


_STACK_BYTES = 256 * 2 ** 20
"""At most this many bytes of inputs and output gradients stacked at once."""


def _stacks(recs: list[_Record], trainable: set[int]) -> tuple[list["_Stack"], list[_Record]]:
    """The records of Linear layers that train their weight and no bias, in stacks of the
    same shapes and precisions (at most :data:`_STACK_BYTES` each), and the rest."""
    by_key: dict[tuple, list[_Record]] = {}
    rest = []
    for r in recs:
        m = r.module
        if type(m) is nn.Linear and _on(m.weight, trainable) and not _on(m.bias, trainable):
            key = (tuple(r.a.shape), r.a.dtype, tuple(r.g.shape), r.g.dtype, m.weight.dtype, r.g.device)
            by_key.setdefault(key, []).append(r)
        else:
            rest.append(r)
    stacks = []
    for rs in by_key.values():
        if len(rs) == 1:
            rest.extend(rs)
            continue
        each = rs[0].a.numel() * rs[0].a.element_size() + rs[0].g.numel() * rs[0].g.element_size()
        n = max(1, _STACK_BYTES // max(1, each))
        stacks.extend(_Stack(rs[i:i + n]) for i in range(0, len(rs), n))
    return stacks, rest


class _Stack:
    """Linear layers of one shape (LoRA's adapters: every layer's ``q/k/v/o`` A matrices
    alike, and their B matrices) clipped as one: inputs (L, B, T, d_in) and output
    gradients (L, B, T, d_out) stacked, each example's squared norm over all L weights
    from one batched product, and the L clipped sums from another. Same products, same
    precisions as :func:`_norm_sq` and :func:`_clipped_sum` one record at a time."""

    def __init__(self, recs: list[_Record]):
        self.weights = [r.module.weight for r in recs]
        g = torch.stack([_flat3(r.g) for r in recs])
        self.a = torch.stack([_flat3(r.a) for r in recs]).to(g.dtype)
        self.g = g
        for r in recs:  # the stacks hold them now
            r.a = r.g = None

    def norm_sq(self) -> torch.Tensor:
        n, b, t, d_in = self.a.shape
        d_out = self.g.shape[-1]
        sq = _weight_norm_sq(self.a.reshape(n * b, t, d_in), self.g.reshape(n * b, t, d_out))
        return sq.reshape(n, b).sum(0)

    def clipped_sums(self, factor: torch.Tensor):
        n, b, t, d_in = self.a.shape
        cg = self.g * factor.to(self.g.dtype)[None, :, None, None]
        grads = torch.bmm(cg.reshape(n, b * t, -1).transpose(1, 2), self.a.reshape(n, b * t, d_in))
        self.a = self.g = None
        for w, grad in zip(self.weights, grads.to(self.weights[0].dtype).unbind(0)):
            yield w, grad


class _Grouping:
    """Examples laid out per group: a group's gradient for any of the supported layers is
    that of one example whose positions are its members' positions one after another
    (each layer's weight gradient is a sum over positions), so the group's members are
    placed side by side along the time axis, padded with zero gradients to the largest
    group, and the per-example norms of the result are the groups' norms."""

    def __init__(self, groups: torch.Tensor):
        self.n = int(groups.max()) + 1
        order = torch.argsort(groups, stable=True)
        sizes = torch.bincount(groups, minlength=self.n)
        self.m = int(sizes.max())
        starts = torch.cumsum(sizes, 0) - sizes
        slot = torch.empty_like(groups)
        slot[order] = torch.arange(len(groups), device=groups.device) - starts[groups[order]]
        self.index = groups * self.m + slot

    def _place(self, t: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((self.n * self.m, *t.shape[1:]), dtype=t.dtype, device=t.device)
        out[self.index] = t
        return out.reshape(self.n, self.m * t.shape[1], *t.shape[2:])

    def record(self, r: _Record) -> _Record:
        if isinstance(r.module, nn.Embedding):
            a = r.a.reshape(r.a.shape[0], -1)
        else:
            a = _flat3(r.a)
        return _Record(r.module, self._place(a), self._place(_flat3(r.g)))


def _normalised(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if isinstance(module, LlamaRMSNorm):
        xf = x.to(torch.float32)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)).to(x.dtype)
    return nn.functional.layer_norm(x, module.normalized_shape, None, None, module.eps)


def _flat3(t: torch.Tensor) -> torch.Tensor:
    """(B, ..., d) as (B, T, d)."""
    return t.reshape(t.shape[0], -1, t.shape[-1])


def _on(p, trainable: set[int]) -> bool:
    return p is not None and id(p) in trainable


def _norm_sq(r: _Record, trainable: set[int]) -> torch.Tensor:
    """Each example's squared gradient norm over the layer's trainable parameters
    (float32). The products run in the output gradient's precision (bf16 under autocast,
    as the plain backward's weight gradient: a float32 product of the same size costs a
    GPU about ten times more), the squares and sums in float32."""
    m = r.module
    g = _flat3(r.g)
    dt = g.dtype
    out = torch.zeros(g.shape[0], dtype=torch.float32, device=g.device)
    if isinstance(m, nn.Embedding):
        if _on(m.weight, trainable):
            ids = r.a.reshape(g.shape[0], -1)
            same = ids[:, :, None] == ids[:, None, :]
            out += (torch.bmm(g, g.transpose(1, 2)).float() * same).sum((1, 2))
        return out
    if isinstance(m, nn.Linear):
        if _on(m.weight, trainable):
            out += _weight_norm_sq(_flat3(r.a).to(dt), g)
        if _on(m.bias, trainable):
            out += g.float().sum(1).pow(2).sum(1)
        return out
    # a norm layer: its per-example gradients are vectors
    g = g.float()
    if _on(m.weight, trainable):
        out += (g * _flat3(r.a).float()).sum(1).pow(2).sum(1)
    if _on(getattr(m, "bias", None), trainable):
        out += g.sum(1).pow(2).sum(1)
    return out


def _weight_norm_sq(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Each example's squared norm of a Linear weight's gradient ``g^T a`` from its input
    ``a`` (N, T, d_in) and output gradient ``g`` (N, T, d_out), in their precision, summed
    in float32: the ghost norm ``sum((a a^T) * (g g^T))`` or the materialised product,
    whichever costs less."""
    t, d_in, d_out = a.shape[1], a.shape[2], g.shape[2]
    if t * t * (d_in + d_out) < t * d_in * d_out:  # ghost norm
        return (torch.bmm(a, a.transpose(1, 2)).float() * torch.bmm(g, g.transpose(1, 2)).float()).sum((1, 2))
    return torch.bmm(g.transpose(1, 2), a).float().pow(2).sum((1, 2))


def _clipped_sum(r: _Record, factor: torch.Tensor, trainable: set[int]):
    """(parameter, sum over examples of its clipped gradient) for one record."""
    m = r.module
    g = _flat3(r.g)
    cg = g * factor.to(g.dtype)[:, None, None]
    if isinstance(m, nn.Embedding):
        if _on(m.weight, trainable):
            grad = torch.zeros_like(m.weight)
            grad.index_add_(0, r.a.reshape(-1), cg.reshape(-1, cg.shape[-1]).to(grad.dtype))
            yield m.weight, grad
        return
    if isinstance(m, nn.Linear):
        if _on(m.weight, trainable):
            a = _flat3(r.a)
            # in the output gradient's precision (bf16 under autocast), as the plain backward
            a = a.to(cg.dtype)
            yield m.weight, (cg.reshape(-1, cg.shape[-1]).t() @ a.reshape(-1, a.shape[-1])).to(m.weight.dtype)
        if _on(m.bias, trainable):
            yield m.bias, cg.sum((0, 1)).to(m.bias.dtype)
        return
    if _on(m.weight, trainable):
        yield m.weight, (cg * _flat3(r.a)).sum((0, 1)).to(m.weight.dtype)
    if _on(getattr(m, "bias", None), trainable):
        yield m.bias, cg.sum((0, 1)).to(m.bias.dtype)
