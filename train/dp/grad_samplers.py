"""Per-example gradients (and their norms, for ghost clipping) of Llama's RMSNorm weight,
registered with Opacus.

Opacus has no grad sampler for ``LlamaRMSNorm`` and falls back to functorch, which
re-runs the layer per example. RMSNorm's output is ``w * x_hat`` with
``x_hat = x / sqrt(mean(x^2) + eps)``, so the gradient of example n is
``sum_t dL/dy[n, t] * x_hat[n, t]``: one product of tensors the hooks already hold.
Importing this module registers both samplers (``train.loop`` does).
"""

from __future__ import annotations

import torch
from opacus.grad_sample import register_grad_sampler
from opacus.grad_sample.utils import register_norm_sampler
from transformers.models.llama.modeling_llama import LlamaRMSNorm


def _normalised(layer: LlamaRMSNorm, x: torch.Tensor, dtype) -> torch.Tensor:
    x = x.to(torch.float32)
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + layer.variance_epsilon)).to(dtype)


@register_grad_sampler(LlamaRMSNorm)
def rms_norm_grad_sample(layer: LlamaRMSNorm, activations, backprops: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    x_hat = _normalised(layer, activations[0], backprops.dtype)
    return {layer.weight: torch.einsum("n...i,n...i->ni", backprops, x_hat)}


@register_norm_sampler(LlamaRMSNorm)
def rms_norm_norm_sample(layer: LlamaRMSNorm, activations, backprops: torch.Tensor) -> dict:
    if not layer.weight.requires_grad:
        return {}
    g = rms_norm_grad_sample(layer, activations, backprops)[layer.weight]
    return {layer.weight: g.norm(2, dim=1)}
