"""A finished run's outputs: the final model (a LoRA run's merged with its adapter, the
adapter beside it), and what the model was trained on and from which base
(``model/training.json``, read back as a fine-tuned run's ``summary['base']``)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from train.config import TrainConfig
    from train.plan import RunPlan
    from train.plan import Prepared


def check_lora(cfg: "TrainConfig", state: dict) -> dict | None:
    """A LoRA run's adapter must have moved and its base must not have: a TrainingFailed
    otherwise (Opacus issue #820: DP-LoRA runs that silently trained nothing)."""
    if cfg.model.lora is None:
        return None
    from privatize.errors import TrainingFailed

    rec = next((f["lora"] for f in state["finals"] if f["rank"] == 0 and "lora" in f), None)
    if rec is None:
        return None  # resumed after the last step: nothing ran in this attempt
    if rec["adapter_max_change"] == 0.0:
        raise TrainingFailed(f"model.lora: the adapter's {rec['adapter_tensors']} tensors did not move in the run's "
                             "steps (nothing trained: check target_modules, lr and, under DP, the clipping)")
    if not rec["base_unchanged"]:
        raise TrainingFailed("model.lora: the frozen base's weights changed (only the adapter may train)")
    return {**cfg.model.lora.model_dump(mode="json"), **rec, "adapter": ADAPTER_DIR}


ADAPTER_DIR = "adapter"


def save_final(p: "Prepared", plan: "RunPlan", checkpoint, tok) -> Path:
    """The final model with its tokenizer and ``training.json`` (what it was trained on,
    from which base), then (LoRA) the adapter beside it: written to temporary names and
    renamed. A LoRA run's model is the base with the adapter merged in (it loads with
    ``AutoModelForCausalLM``)."""
    final_dir, tmp = p.output / "model", Path(tempfile.mkdtemp(dir=p.output, prefix=".model-"))
    with checkpoint.as_directory() as d:
        if p.config.model.lora is None:
            shutil.copytree(Path(d) / "model", tmp, dirs_exist_ok=True)
        else:
            _merge_lora(plan, Path(d) / ADAPTER_DIR, tmp)
            adapter_tmp = p.output / f".{ADAPTER_DIR}.tmp"
            shutil.copytree(Path(d) / ADAPTER_DIR, adapter_tmp, dirs_exist_ok=True)
            if (p.output / ADAPTER_DIR).exists():
                shutil.rmtree(p.output / ADAPTER_DIR)
            os.replace(adapter_tmp, p.output / ADAPTER_DIR)
    tok.save_pretrained(tmp)
    (tmp / TRAINING_JSON).write_text(json.dumps(_provenance(p), indent=2) + "\n")
    if final_dir.exists():
        shutil.rmtree(final_dir)
    os.replace(tmp, final_dir)
    return final_dir


def _merge_lora(plan: "RunPlan", adapter: Path, dest: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from train.loop import _init_model

    model = _init_model(plan.worker.init)  # the base as the workers built it (grown rows, fresh adapter)
    set_peft_model_state_dict(model, load_file(adapter / "adapter_model.safetensors"))
    model.merge_and_unload().save_pretrained(dest)


TRAINING_JSON = "training.json"


def _provenance(p: "Prepared") -> dict:
    """What the model was trained on and from which base: kept in the model's folder, so a
    run that starts from it names its base and the base's data (``summary['base']``)."""
    cfg = p.config
    out = {"kind": cfg.kind, "trained_on": cfg.data.description or _named(Path(cfg.data.path)),
           "preset": None if cfg.model.checkpoint else cfg.model.preset}
    if cfg.model.checkpoint:
        out["base"] = base_of(cfg.model.checkpoint)
    return out


def _named(p: Path) -> str:
    """A folder's name without the server's layout around it: a run's ``model/``, a
    privatization's ``output/`` or ``shards/`` are named by the folder holding them (a run's
    or a job's id), so no server path is written into a model's provenance."""
    return next((q.name for q in (p, *p.parents) if q.name not in ("model", "output", "shards")), p.name)


def base_of(checkpoint: str) -> dict:
    """The base a run started from: its folder's ``training.json`` (kind, data, its own
    base), or, for a folder from elsewhere, its name and architecture."""
    ck = Path(checkpoint)
    # a run's model/ (runs/NAME/model), or a service training's (jobs/ID/output/model): named by
    # the run folder or the training's id
    name = _named(ck)
    info = ck / TRAINING_JSON
    if info.is_file():
        return {"checkpoint": name, **json.loads(info.read_text())}
    conf = json.loads((ck / "config.json").read_text()) if (ck / "config.json").is_file() else {}
    return {"checkpoint": name, "trained_on": "not recorded (a model from outside the product)",
            "architecture": (conf.get("architectures") or ["unknown"])[0]}
