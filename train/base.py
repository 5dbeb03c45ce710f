"""Public base models: ``tiny`` and ``small`` pre-trained on public text only, the base a
data owner fine-tunes (``continue``, ``dp``, ``crt``, with or without LoRA) as users do.

The text, by default: the 75 Project Gutenberg stories of SQuALITY's train and dev splits
(public domain) that ship with the package (``privatize/data/gutenberg``, see
``privatize/data/README.md``). ``--public-data DIR`` names a larger folder laid out as the
project's development data instead: WikiText-2 valid and test (turned back into plain
paragraphs by :mod:`train.wikitext`; CC BY-SA 3.0, so never shipped) and the same stories.
SQuALITY's test stories are left out either way: they are the base's own held-out text. The
tokenizer is trained on the same text and keeps the product's special tokens
(``<|endoftext|>``, ``<pad>``, ``<MASK>``); entity tokens a private corpus brings are added when a run fine-tunes the base
(``train.run._add_entity_tokens``). One command each::

    privatize base tiny --output runs/base-tiny          # CPU, about 2 minutes
    privatize base small --output runs/base-small --gpu  # one GPU

The result is an ordinary run folder: ``OUTPUT/model`` is a Hugging Face checkpoint with
its tokenizer and ``training.json`` (what it was trained on), which every other kind takes
as ``model.checkpoint``. Through the service, upload ``OUTPUT/../public-text/public.jsonl``
as a corpus, privatize it (``privatize/specs/public.yaml``: document dedup), and submit
the same config as a training: its id is the base as ``training:<id>``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
from pathlib import Path

from privatize.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "train" / "configs"
DESCRIPTION = "public text: 75 Project Gutenberg stories (SQuALITY train+dev, public domain), shipped"
"""What the default base is trained on (the package's own stories)."""
FOLDER_DESCRIPTION = ("public text: WikiText-2 valid+test (CC BY-SA 3.0) and SQuALITY Gutenberg stories train+dev "
                      "(public domain)")
"""What a base from a ``--public-data`` folder is trained on."""
PUBLIC_FILE = "public.jsonl"


def shipped_stories() -> Path:
    from privatize.corpus import DEMO_DATA

    return DEMO_DATA / "gutenberg" / "stories.jsonl.gz"


def described(corpus: Path) -> str:
    """What a :func:`public_corpus` file holds (its ``sources.json``)."""
    stamp = Path(corpus).parent / "sources.json"
    return json.loads(stamp.read_text())["description"] if stamp.is_file() else f"public text: {corpus}"


def public_corpus(dest: Path, data: Path | None = None) -> Path:
    """The public text as one JSONL (``doc_id``, ``text``) at ``dest/public.jsonl``: the
    shipped stories, or with ``data`` a folder's WikiText-2 and stories; kept when it is
    already there from the same sources (a cache), else written to a temporary name and
    renamed. Returns the file."""
    from privatize.corpus import read_jsonl
    from train.wikitext import paragraphs

    if data is None:
        sources, description = [shipped_stories()], DESCRIPTION
    else:
        wiki, stories = Path(data) / "wikitext2_tokenized", Path(data) / "squality_gutenberg"
        sources = [wiki / "valid.txt", wiki / "test.txt", stories / "train.jsonl", stories / "dev.jsonl"]
        description = FOLDER_DESCRIPTION
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise InputError(f"public data: {', '.join(missing)} not found (--public-data names the folder holding "
                         "wikitext2_tokenized and squality_gutenberg; without it the shipped stories are used)")
    key = hashlib.sha256("".join(f"{s.name}:{s.stat().st_size};" for s in sources).encode()).hexdigest()[:16]
    out, stamp = dest / PUBLIC_FILE, dest / "sources.json"
    if out.is_file() and stamp.is_file() and json.loads(stamp.read_text()).get("key") == key:
        return out
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".{PUBLIC_FILE}.tmp"
    if data is None:
        rows = ((r["doc_id"], r["text"]) for r in read_jsonl(sources[0]))
    else:
        wiki_text = itertools.chain.from_iterable(paragraphs(src) for src in sources[:2])
        rows = itertools.chain(((f"wiki-{i}", p) for i, p in enumerate(wiki_text)),
                               ((f"story-{json.loads(x)['metadata']['passage_id']}", json.loads(x)["document"])
                                for src in sources[2:] for x in open(src, encoding="utf-8")))
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for doc_id, text in rows:
            fh.write(json.dumps({"doc_id": doc_id, "text": text}) + "\n")
            n += 1
    os.replace(tmp, out)
    stamp.write_text(json.dumps({"key": key, "records": n, "description": description,
                                 "sources": [str(s) for s in sources]}, indent=2) + "\n")
    return out


def base_config(preset: str, corpus: Path, output: Path, gpu: bool = False, max_steps: int | None = None,
                description: str | None = None):
    """``train/configs/base-<preset>.yaml`` on ``corpus``, writing to ``output``;
    ``description`` (what the corpus is, :func:`described`) replaces the config's."""
    from train.config import load_config

    path = CONFIGS / f"base-{preset}.yaml"
    if not path.is_file():
        raise InputError(f"preset: no base config {path.name} (known: tiny, small)")
    cfg = load_config(path).with_paths(data=str(corpus), output=str(output))
    upd = {}
    if description is not None and description != cfg.data.description:
        upd["data"] = cfg.data.model_copy(update={"description": description})
    if gpu != cfg.workers.use_gpu:
        upd["workers"] = cfg.workers.model_copy(update={"use_gpu": gpu, "precision": "bf16" if gpu else "fp32"})
    if max_steps is not None:
        upd["optim"] = cfg.optim.model_copy(update={"max_steps": max_steps})
    return cfg.model_copy(update=upd) if upd else cfg


def _base(args: argparse.Namespace) -> int:
    from train.run import run_training

    out = Path(args.output)
    corpus = public_corpus(Path(args.corpus) if args.corpus else out.parent / "public-text", args.public_data)
    trained_on = described(corpus)
    summary = run_training(base_config(args.preset, corpus, out, args.gpu, args.max_steps, trained_on),
                           address=args.ray or None)
    print(json.dumps({"status": "ok", "model": str(out / "model"), "trained_on": trained_on,
                      **{k: summary[k] for k in ("steps", "final_loss", "tokens", "seconds")}}))
    return 0


def register(sub) -> None:
    b = sub.add_parser("base", help="pre-train a public base model (tiny or small) on public text only")
    b.add_argument("preset", choices=["tiny", "small"])
    b.add_argument("--output", required=True, help="run folder; the base is OUTPUT/model")
    b.add_argument("--public-data", type=Path, default=None,
                   help="a folder holding wikitext2_tokenized and squality_gutenberg (default: the 75 Project "
                        "Gutenberg stories shipped with the package)")
    b.add_argument("--corpus", help="where the public JSONL is written (a cache; default: OUTPUT/../public-text)")
    b.add_argument("--gpu", action="store_true", help="train on a GPU (bf16)")
    b.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (a quick try)")
    b.add_argument("--ray", metavar="ADDRESS", default=None, help="a Ray cluster address")
    b.set_defaults(func=_base)
