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


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())
