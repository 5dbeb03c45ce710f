"""Llama-style causal language models from presets, or from any local Hugging Face
checkpoint directory; and BERT-style masked language models (kind ``mlm``: the
``refill`` stage's filler) from their own presets.

Input and output embeddings are untied (Opacus' ghost clipping refuses tied ones), and
dropout is zero, so a training step is a deterministic function of its batch and noise.
"""

from __future__ import annotations

from pathlib import Path

from privatize.errors import SpecError

# name -> (vocab, hidden, layers, heads, kv heads, intermediate, max positions)
PRESETS: dict[str, dict] = {
    # about 2.1M parameters at its 4,096-token vocabulary: tests on CPU
    "tiny": dict(vocab_size=4096, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=4, intermediate_size=512, max_position_embeddings=512),
    # about 25M
    "small": dict(vocab_size=8192, hidden_size=384, num_hidden_layers=8, num_attention_heads=6,
                  num_key_value_heads=6, intermediate_size=1536, max_position_embeddings=1024),
    # the Crypto-LLM paper's model: 551.3M parameters
    "paper-551m": dict(vocab_size=32000, hidden_size=1536, num_hidden_layers=16, num_attention_heads=12,
                       num_key_value_heads=12, intermediate_size=4096, max_position_embeddings=2048),
}


# name -> BERT sizes (hidden, layers, heads, intermediate, max positions) for kind mlm
MLM_PRESETS: dict[str, dict] = {
    # about 1.4M parameters at a 4,096-token vocabulary
    "tiny": dict(vocab_size=4096, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=512, max_position_embeddings=512),
    # about 17M at 8,192
    "small": dict(vocab_size=8192, hidden_size=384, num_hidden_layers=8, num_attention_heads=6,
                  intermediate_size=1536, max_position_embeddings=512),
}


def mlm_preset_config(name: str, vocab_size: int | None = None, **special):
    """A ``BertConfig`` for a masked-LM preset (dropout zero, as the causal presets)."""
    from transformers import BertConfig

    if name not in MLM_PRESETS:
        raise SpecError(f"model.preset: {name!r} has no masked-LM preset (known: {', '.join(MLM_PRESETS)})")
    kw = dict(MLM_PRESETS[name])
    if vocab_size is not None:
        kw["vocab_size"] = vocab_size
    return BertConfig(**kw, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=1,
                      **special)


def preset_config(name: str, vocab_size: int | None = None, **special):
    """A ``LlamaConfig`` for a preset; ``vocab_size`` overrides the preset's (a trained
    tokenizer's length), ``special`` sets bos/eos/pad token ids."""
    from transformers import LlamaConfig

    if name not in PRESETS:
        raise SpecError(f"model.preset: unknown preset {name!r} (known: {', '.join(PRESETS)})")
    kw = dict(PRESETS[name])
    if vocab_size is not None:
        kw["vocab_size"] = vocab_size
    return LlamaConfig(**kw, rms_norm_eps=1e-5, tie_word_embeddings=False, attention_dropout=0.0,
                       rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}, **special)


def _auto(mlm: bool):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    return AutoModelForMaskedLM if mlm else AutoModelForCausalLM


def build_model(config, seed: int, mlm: bool = False):
    """Fresh weights from ``config``, seeded (the same seed gives the same model). A causal
    model's embeddings are untied; a masked LM keeps BERT's tied output layer (it never
    trains with DP)."""
    import torch

    torch.manual_seed(seed)
    model = _auto(mlm).from_config(config)
    if not mlm:
        model.config.tie_word_embeddings = False
    return model


def load_checkpoint(path: str, mlm: bool = False):
    """A causal (or masked) LM from a local Hugging Face directory; a clear error when it
    is not one."""
    p = Path(path)
    if not (p / "config.json").is_file():
        raise SpecError(f"model.checkpoint: {path} is not a Hugging Face model folder (no config.json)")
    try:
        model = _auto(mlm).from_pretrained(p)
    except (OSError, ValueError) as exc:
        raise SpecError(f"model.checkpoint: {path}: cannot load ({str(exc).splitlines()[0]})") from None
    if mlm:
        return model
    if model.config.tie_word_embeddings:
        model.config.tie_word_embeddings = False
        model.lm_head.weight = type(model.lm_head.weight)(model.lm_head.weight.detach().clone())
    return model


def resize_for_new_vocabulary(model, vocab_size: int, seed: int, **special) -> None:
    """Re-initialise the input embeddings and the output layer for a new vocabulary (the
    paper's stage 2 with a separate tokenizer): every other weight is kept."""
    import torch

    torch.manual_seed(seed)
    hidden = model.config.hidden_size
    old = model.get_input_embeddings()
    emb = torch.nn.Embedding(vocab_size, hidden, dtype=old.weight.dtype)
    head = torch.nn.Linear(hidden, vocab_size, bias=False, dtype=old.weight.dtype)
    std = getattr(model.config, "initializer_range", 0.02)
    torch.nn.init.normal_(emb.weight, std=std)
    torch.nn.init.normal_(head.weight, std=std)
    model.set_input_embeddings(emb)
    model.set_output_embeddings(head)
    model.config.vocab_size = vocab_size
    for k, v in special.items():
        setattr(model.config, k, v)


def add_token_rows(model, vocab_size: int) -> None:
    """Grow the input embeddings and the output layer to ``vocab_size`` rows for tokens added
    to the checkpoint's tokenizer (entity tokens its text never had). Each new row is the
    mean of the old rows (Hewitt, "Initializing new word embeddings for pretrained language
    models", 2021): every existing row is kept, so the logits of the existing tokens are
    unchanged before training, and a new token starts where the model's average token is."""
    import torch

    old_in, old_out = model.get_input_embeddings(), model.get_output_embeddings()
    n = old_in.weight.shape[0]
    if vocab_size < n:
        raise ValueError(f"add_token_rows: {vocab_size} is fewer rows than the model's {n}")
    if vocab_size == n:
        return
    with torch.no_grad():
        emb = torch.nn.Embedding(vocab_size, old_in.weight.shape[1], dtype=old_in.weight.dtype,
                                 padding_idx=old_in.padding_idx)
        emb.weight[:n] = old_in.weight
        emb.weight[n:] = old_in.weight.mean(0)
        head = torch.nn.Linear(old_out.in_features, vocab_size, bias=old_out.bias is not None,
                               dtype=old_out.weight.dtype)
        head.weight[:n] = old_out.weight
        head.weight[n:] = old_out.weight.mean(0)
        if old_out.bias is not None:
            head.bias[:n] = old_out.bias
            head.bias[n:] = old_out.bias.mean()
    model.set_input_embeddings(emb)
    model.set_output_embeddings(head)
    model.config.vocab_size = vocab_size


def with_lora(model, lora, seed: int):
    """``model`` with low-rank adapters (``peft``) on ``lora.target_modules``; only the
    adapters require gradients. A SpecError when no module matches."""
    import torch
    from peft import LoraConfig, get_peft_model

    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    missing = [t for t in lora.target_modules if t not in names and not any(
        n.endswith("." + t) for n, _ in model.named_modules())]
    if missing:
        raise SpecError(f"model.lora.target_modules: {', '.join(missing)} not in the model (its linear layers: "
                        f"{', '.join(sorted(_linear_names(model)))})")
    torch.manual_seed(seed)
    return get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                            target_modules=list(lora.target_modules), bias="none"))


def _linear_names(model) -> set[str]:
    import torch

    return {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def adapter_state(model) -> dict:
    """The adapter's weights of a ``peft`` model (name -> tensor, detached copies)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def unwrap(model):
    """The Hugging Face model inside Opacus' and DDP's wrappers."""
    while hasattr(model, "_module") or hasattr(model, "module"):
        model = getattr(model, "_module", None) or model.module
    return model
