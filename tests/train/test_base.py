"""Public base models (issue 37): the public corpus is the public text only (by default the
stories shipped with the package, issue 54), cached, and the base configs run as given or on a
GPU."""

from __future__ import annotations

import json

import pytest

from privatize.errors import InputError
from train.base import DESCRIPTION, FOLDER_DESCRIPTION, base_config, described, public_corpus
from train.wikitext import paragraphs


def test_by_default_the_public_corpus_is_the_shipped_stories_and_says_so(tmp_path):
    out = public_corpus(tmp_path / "pub")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 75 and len({r["doc_id"] for r in rows}) == 75
    assert all(r["doc_id"].startswith("gutenberg-") and len(r["text"]) > 5000 for r in rows)
    assert described(out) == DESCRIPTION
    mtime = out.stat().st_mtime_ns
    assert public_corpus(tmp_path / "pub") == out and out.stat().st_mtime_ns == mtime  # the cache


@pytest.mark.data
def test_the_shipped_stories_are_squalitys_train_and_dev_stories(shared_data, tmp_path):
    rows = [json.loads(x) for x in public_corpus(tmp_path / "pub").read_text().splitlines()]
    stories = [json.loads(x)["document"] for f in ("train", "dev")
               for x in open(shared_data / "squality_gutenberg" / f"{f}.jsonl", encoding="utf-8")]
    assert [r["text"] for r in rows] == stories


@pytest.mark.data
def test_the_public_corpus_is_wikitext_and_the_train_and_dev_stories_and_is_cached(shared_data, tmp_path):
    out = public_corpus(tmp_path / "pub", shared_data)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    wiki = paragraphs(shared_data / "wikitext2_tokenized" / "valid.txt") + paragraphs(
        shared_data / "wikitext2_tokenized" / "test.txt")
    stories = [json.loads(x)["document"] for f in ("train", "dev")
               for x in open(shared_data / "squality_gutenberg" / f"{f}.jsonl", encoding="utf-8")]
    assert [r["text"] for r in rows] == wiki + stories
    held_out = {json.loads(x)["document"] for x in open(shared_data / "squality_gutenberg" / "test.jsonl",
                                                        encoding="utf-8")}
    assert not held_out & {r["text"] for r in rows}  # SQuALITY's test stories stay out
    assert len({r["doc_id"] for r in rows}) == len(rows)
    mtime = out.stat().st_mtime_ns
    assert public_corpus(tmp_path / "pub", shared_data) == out and out.stat().st_mtime_ns == mtime  # the cache
    assert json.loads((tmp_path / "pub" / "sources.json").read_text())["records"] == len(rows)
    assert described(out) == FOLDER_DESCRIPTION


def test_missing_public_data_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"public data: .*wikitext2_tokenized/valid.txt.* not found \(--public-data"):
        public_corpus(tmp_path / "pub", tmp_path / "nowhere")
    assert not (tmp_path / "pub").exists()


def test_the_base_configs(tmp_path):
    tiny = base_config("tiny", tmp_path / "public.jsonl", tmp_path / "run")
    assert tiny.kind == "pretrain" and tiny.model.preset == "tiny" and not tiny.workers.use_gpu
    assert tiny.data.description == DESCRIPTION and tiny.data.path == str(tmp_path / "public.jsonl")
    other = base_config("tiny", tmp_path / "public.jsonl", tmp_path / "run", description=FOLDER_DESCRIPTION)
    assert other.data.description == FOLDER_DESCRIPTION
    small = base_config("small", tmp_path / "p.jsonl", tmp_path / "r", gpu=False, max_steps=5)
    assert small.model.preset == "small" and not small.workers.use_gpu and small.workers.precision == "fp32"
    assert small.optim.max_steps == 5
    assert base_config("small", tmp_path / "p.jsonl", tmp_path / "r", gpu=True).workers.precision == "bf16"
    with pytest.raises(InputError, match="no base config base-huge.yaml"):
        base_config("huge", tmp_path / "p.jsonl", tmp_path / "r")
