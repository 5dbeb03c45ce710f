"""DP-SGD's pieces around a worker's model and optimizer: Opacus' own, as
``PrivacyEngine.make_private`` assembles them (a grad sample module, the DP optimizer
class for the clipping and distribution, the accountant's step hook, ghost clipping's loss
wrapper), or book-keeping clipping (:mod:`train.dp.bk`) handing its clipped sum to Opacus'
optimizer."""

from __future__ import annotations

from train.batches import MaskedLMLoss
from train.models import unwrap


def make_private(model, optimizer, *, noise_multiplier: float, max_grad_norm: float, sample_rate: float,
                 expected_batch_size: float, accountant: str = "prv", grad_sample_mode: str = "hooks",
                 distributed: bool = False, generator=None) -> "DPSetup":
    """Opacus' DP-SGD pieces around ``model`` and ``optimizer``, in the manner of Opacus'
    ``PrivacyEngine.make_private``: every setting by keyword. ``expected_batch_size`` is this
    worker's expected share of a Poisson batch (the sum of clipped gradients is divided by it);
    ``grad_sample_mode`` is Opacus' ``hooks`` or ``ghost``, or ``bk`` (book-keeping,
    ``train.dp.bk``)."""
    return DPSetup(model, optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                   sample_rate=sample_rate, expected_batch_size=expected_batch_size, accountant=accountant,
                   grad_sample_mode=grad_sample_mode, distributed=distributed, generator=generator)


class DPSetup:
    """Opacus' DP-SGD pieces around ``model`` (see the module docstring); made by
    :func:`make_private`."""

    def __init__(self, model, optimizer, *, noise_multiplier: float, max_grad_norm: float, sample_rate: float,
                 expected_batch_size: float, accountant: str, grad_sample_mode: str, distributed: bool, generator):
        import train.dp.grad_samplers  # noqa: F401  (RMSNorm's per-example gradients, without functorch)
        from opacus.accountants import create_accountant
        from opacus.grad_sample.utils import wrap_model
        from opacus.optimizers import get_optimizer_class
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        mode = grad_sample_mode
        self.bk = None
        if mode == "bk":  # book-keeping: our clipping, Opacus' optimizer for noise and accounting
            from train.dp.bk import BookKeeping

            self.module = model
            self.bk = BookKeeping(unwrap(model), max_grad_norm)
        else:
            kw = {"max_grad_norm": max_grad_norm} if mode == "ghost" else {}
            self.module = wrap_model(model, grad_sample_mode=mode, batch_first=True, loss_reduction="mean", **kw)
        cls = get_optimizer_class(clipping="flat", distributed=distributed,
                                  grad_sample_mode="ghost" if mode == "bk" else mode)
        if mode == "bk":
            cls = _book_keeping_optimizer(cls)
        self.optimizer = cls(optimizer=optimizer, noise_multiplier=noise_multiplier,
                             max_grad_norm=max_grad_norm, expected_batch_size=expected_batch_size,
                             loss_reduction="mean", generator=generator)
        self.accountant = create_accountant(mechanism=accountant)
        self.optimizer.attach_step_hook(self.accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
        self.criterion = (DPLossFastGradientClipping(self.module, self.optimizer, MaskedLMLoss(), "mean")
                          if mode == "ghost" else MaskedLMLoss())
        self.ghost = mode == "ghost"

    def group_grad_samples(self, groups) -> None:
        """Hooks mode, ``dp.unit: individual``: each parameter's per-example gradients
        summed per individual (``groups[i]``: example i's individual), so the optimizer
        clips each individual's gradient."""
        import torch

        n = int(groups.max()) + 1
        for p in self.optimizer.params:
            gs = getattr(p, "grad_sample", None)
            if isinstance(gs, torch.Tensor):
                p.grad_sample = torch.zeros((n, *gs.shape[1:]), dtype=gs.dtype, device=gs.device).index_add_(
                    0, groups, gs)

    def plain(self, on: bool) -> None:
        """Hooks off for a public (plain) step, on again for DP steps (book-keeping's
        hooks record only inside its capture)."""
        if self.bk is None:
            (self.module.disable_hooks if on else self.module.enable_hooks)()


def _book_keeping_optimizer(cls: type) -> type:
    """Opacus' fast-gradient-clipping optimizer (``cls``) as book-keeping drives it, with
    two per-parameter loops made cheaper: the first accumulation keeps the clipped sum
    book-keeping wrote to ``p.grad`` (written afresh each step, nothing else holds it;
    stacked layers' grads are views of one tensor) where Opacus deep-copies it, and the
    division by the expected batch size is one multi-tensor operation. The noise, its generator and the accounting are Opacus'.
    (On a LoRA model's 64 adapter matrices the deep copies alone took 1.9 ms a step.)"""
    import torch

    class BookKeepingOptimizer(cls):
        def accumulate(self):
            # a step about to be skipped (gradient accumulation) leaves summed_grad for the
            # next: then it must not be p.grad, which a zero_grad may zero in place
            keep = not self._check_skip_next_step(pop_next=False)
            for p in self.params:
                if p.summed_grad is None:
                    p.summed_grad = p.grad.data if keep else p.grad.data.clone()
                else:
                    p.summed_grad.add_(p.grad.data)

        def scale_grad(self):
            if self.loss_reduction == "mean":
                torch._foreach_div_([p.grad for p in self.params],
                                    float(self.expected_batch_size * self.accumulated_iterations))

    BookKeepingOptimizer.__name__ = BookKeepingOptimizer.__qualname__ = f"BookKeeping{cls.__name__}"
    return BookKeepingOptimizer

