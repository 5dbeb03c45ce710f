"""The ``refill`` stage (issue 21, paper 002): the candidate rules against hand-set
logits (Top-1, Top-K preferring words outside the allow list, never the hidden word),
the spec validator's errors, and a tiny masked LM trained with ``privatize train`` kind
``mlm`` filling every mask, deterministically, through a whole pipeline."""

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privatize import run
from privatize.ciphers.tokens import MASK_TOKEN
from privatize.errors import SpecError
from privatize.spec import parse_spec
from privatize.stages.mask import WORD, Mask, MaskSettings
from privatize.stages.refill import Refill, RefillSettings, Vocabulary

SENTENCES = ["the cat sat on the mat, and the dog sat on the log.", "a bird sang in the tree by the river.",
             "the cat and the dog ran to the river, then home."] * 5


@pytest.fixture(scope="module")
def random_filler(tmp_path_factory):
    """A real masked-LM folder with random weights (BERT, tiny preset) and a byte-level
    tokenizer trained on a few sentences: for the rules, which the weights do not enter."""
    from train.models import build_model, mlm_preset_config
    from train.tokenizer import special_ids, train_tokenizer

    tok = train_tokenizer(SENTENCES, 400, 1, 0)
    d = tmp_path_factory.mktemp("random-filler")
    build_model(mlm_preset_config("tiny", len(tok), **special_ids(tok)), 0, mlm=True).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _stage(path, **kw) -> Refill:
    st = Refill(RefillSettings(checkpoint=str(path), **kw))
    st.setup()
    return st


def _id(st: Refill, piece: str) -> int:
    return st._tok.convert_tokens_to_ids(piece)


def _logits(st: Refill, ranked: list[str]) -> np.ndarray:
    """Logits where ``ranked`` pieces come first, in that order, everything else far below."""
    x = np.full(len(st._tok), -50.0, np.float32)
    for r, piece in enumerate(ranked):
        i = _id(st, piece)
        assert isinstance(i, int) and i != st._tok.unk_token_id, piece
        x[i] = 10.0 - r
    return x


def _gap_state(hidden=None):
    return {"hidden": [hidden]}


def _counts():
    return {"top_choice_original": 0, "fills_on_allow_list": 0}


def test_vocabulary_knows_words_word_starts_and_the_allow_list(random_filler):
    st = _stage(random_filler, strategy="topk")
    v = Vocabulary(st._tok, frozenset({"cat"}))
    assert v.style == "bytelevel"
    cat, cat_inner, comma = _id(st, "Ġcat"), _id(st, "cat"), _id(st, ",")
    assert v.ok[cat] and v.starts[cat] and v.text[cat] == "cat" and v.allowed[cat]
    assert cat_inner is not None and v.ok[cat_inner] and not v.starts[cat_inner]
    assert not v.ok[comma]  # punctuation is no fill
    assert not v.ok[st._tok.mask_token_id] and not v.ok[st._tok.eos_token_id]
    assert not v.allowed[_id(st, "Ġdog")]


def test_top1_takes_the_best_whole_word(random_filler):
    st = _stage(random_filler, strategy="top1")
    rng = np.random.default_rng(0)
    # "," is no word and "cat" (no leading space) may be a piece of one: the best whole
    # word is "Ġdog", written with the space the gap had, or without at a line start
    got = st._choose(_logits(st, [",", "cat", "Ġdog", "Ġcat"]), _gap_state(), 0, 0, rng, _counts())
    assert got == _id(st, "Ġdog")
    state = st._prepare(f"{MASK_TOKEN}: the cat ({MASK_TOKEN}) sat on {MASK_TOKEN}.", None)
    for gap in range(3):
        state["fills"][gap].append(_id(st, "Ġdog"))
    text, spans = st._render(state)
    assert text == "dog: the cat (dog) sat on dog."
    assert [text[s["start"]:s["end"]] for s in spans] == ["dog"] * 3


def test_topk_never_picks_an_allow_list_word_when_another_candidate_exists(random_filler, tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("the\ncat\nsat\non\nmat\nand\ndog\nlog\nsang\nbird\n")
    st = _stage(random_filler, strategy="topk", k=10, word_list=str(allow))
    listed = ["Ġthe", "Ġcat", "Ġsat", "Ġon", "Ġmat", "Ġand", "Ġdog", "Ġlog", "Ġbird"]
    # nine listed words first, one unlisted word tenth: always the unlisted one
    logits = _logits(st, listed + ["Ġriver"])
    for seed in range(40):
        c = _counts()
        assert st._choose(logits, _gap_state(), 0, 0, np.random.default_rng(seed), c) == _id(st, "Ġriver")
        assert c["fills_on_allow_list"] == 0
    # the unlisted word eleventh (outside the top 10) and all ten on the list: one of
    # the ten, drawn, so more than one of them over seeds
    logits = _logits(st, listed + ["Ġsang", "Ġriver"])
    picks = {st._choose(logits, _gap_state(), 0, 0, np.random.default_rng(seed), _counts()) for seed in range(40)}
    assert picks <= {_id(st, p) for p in listed + ["Ġsang"]} and len(picks) > 3


def test_the_hidden_word_is_never_written_back(random_filler):
    st = _stage(random_filler, strategy="top1")
    logits = _logits(st, ["Ġcat", "Ġdog"])
    c = _counts()
    assert st._choose(logits, _gap_state({"cat"}), 0, 0, np.random.default_rng(0), c) == _id(st, "Ġdog")
    assert c["top_choice_original"] == 1  # the model's first choice was the hidden word: counted
    allowed = _stage(random_filler, strategy="top1", forbid_original=False)
    assert allowed._choose(logits, _gap_state({"cat"}), 0, 0, np.random.default_rng(0), _counts()) == _id(st, "Ġcat")


def test_spec_validator_errors(random_filler, tmp_path):
    mask = {"kind": "mask", "technique": "vocab_threshold"}
    with pytest.raises(SpecError, match=r"stages\.0: refill fills the masks of a mask stage"):
        parse_spec({"stages": [{"kind": "refill", "checkpoint": str(random_filler)}]})
    with pytest.raises(SpecError, match=r"stages\.1.*checkpoint .*nowhere.* is not a Hugging Face model folder"):
        parse_spec({"stages": [mask, {"kind": "refill", "checkpoint": str(tmp_path / "nowhere")}]})
    causal = tmp_path / "causal"
    causal.mkdir()
    (causal / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(SpecError, match="is a LlamaForCausalLM, not a masked language model"):
        parse_spec({"stages": [mask, {"kind": "refill", "checkpoint": str(causal)}]})
    with pytest.raises(SpecError, match="refill after encrypt_text"):
        parse_spec({"stages": [mask, {"kind": "encrypt_text", "key": "file:k.key"},
                               {"kind": "refill", "checkpoint": str(random_filler)}]})
    with pytest.raises(SpecError, match="settings of strategy topk"):
        parse_spec({"stages": [mask, {"kind": "refill", "checkpoint": str(random_filler), "strategy": "top1",
                                      "k": 5}]})
    ok = parse_spec({"stages": [mask, {"kind": "refill", "checkpoint": str(random_filler)}]})
    assert ok.stages[1].strategy == "topk" and ok.stages[1].k == 10 and ok.stages[1].forbid_original


# ---- with a trained filler ---------------------------------------------------------

def _masked(texts):
    batch = Mask(MaskSettings(technique="vocab_threshold", vocab_size=3000)).process_batch(
        pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts}))
    return batch.drop_columns([c for c in batch.column_names if c.startswith("_stat.")])


@pytest.fixture(scope="module")
def wiki_masked(wikitext_docs):
    texts = [json.loads(x)["text"] for x in open(wikitext_docs["test"], encoding="utf-8")][:24]
    return _masked(texts)


def test_a_trained_filler_fills_every_mask_and_nothing_else(tiny_filler, wiki_masked):
    out = Refill(RefillSettings(checkpoint=str(tiny_filler), strategy="topk")).process_batch(wiki_masked)
    masked, filled = wiki_masked["text"].to_pylist(), out["text"].to_pylist()
    hidden = wiki_masked["_mask.originals"].to_pylist()
    n = sum(t.count(MASK_TOKEN) for t in masked)
    assert n > 100  # the test has work to do
    assert out["_stat.masks_filled"].to_pylist() == [t.count(MASK_TOKEN) for t in masked]
    assert "_mask.originals" not in out.column_names  # the hidden words go no further
    for m, f, spans, orig in zip(masked, filled, out["refill_spans"].to_pylist(), hidden):
        assert MASK_TOKEN not in f
        assert len(spans) == m.count(MASK_TOKEN)
        # putting <MASK> back over each fill gives the masked text: nothing else changed
        back, pos = [], 0
        for sp in spans:
            back += [f[pos:sp["start"]], MASK_TOKEN]
            pos = sp["end"]
        assert "".join(back) + f[pos:] == m
        for sp, o in zip(spans, orig):
            word = f[sp["start"]:sp["end"]]
            assert WORD.fullmatch(word), word  # a whole word, not punctuation or a piece
            assert word.lower() not in {w.lower() for w in re.findall(r"\w+", o)}  # never the hidden word


def test_refill_is_deterministic_at_a_seed_whatever_the_batches(tiny_filler, wiki_masked):
    stage = Refill(RefillSettings(checkpoint=str(tiny_filler), strategy="topk", seed=7))
    whole = stage.process_batch(wiki_masked)["text"].to_pylist()
    assert stage.process_batch(wiki_masked)["text"].to_pylist() == whole
    one_by_one = [stage.process_batch(wiki_masked.slice(i, 1))["text"][0].as_py() for i in range(len(wiki_masked))]
    assert one_by_one == whole
    other = Refill(RefillSettings(checkpoint=str(tiny_filler), strategy="topk", seed=8)).process_batch(wiki_masked)
    assert other["text"].to_pylist() != whole  # the seed draws the Top-K choice


def test_mask_then_refill_pipeline(tiny_filler, wikitext_docs, tmp_path):
    spec = parse_spec({"stages": [{"kind": "mask", "technique": "allow_list"},
                                  {"kind": "refill", "checkpoint": str(tiny_filler), "strategy": "top1"}]})
    corpus = tmp_path / "corpus.jsonl"
    with open(wikitext_docs["test"], encoding="utf-8") as src:
        corpus.write_text("".join(next(src) for _ in range(30)))
    m = run(spec, corpus, tmp_path / "out")
    stats = {s["kind"]: s["stats"] for s in m["stages"]}
    assert stats["refill"]["masks_filled"] == stats["mask"]["masks"] > 0
    assert stats["refill"]["original_known"] == stats["mask"]["masks"]
    assert stats["refill"]["fills_on_allow_list"] == 0  # top1 has no allow list to prefer against
    table = pq.read_table(sorted((tmp_path / "out" / "shards").glob("*.parquet"))[0])
    assert "refill_spans" in table.column_names and not any(c.startswith("_") for c in table.column_names)
    assert not any(MASK_TOKEN in t for t in table["text"].to_pylist())


def test_two_tokens_per_mask_fill_two_words_left_to_right(tiny_filler, wiki_masked):
    out = Refill(RefillSettings(checkpoint=str(tiny_filler), strategy="top1", tokens_per_mask=2)).process_batch(
        wiki_masked.slice(0, 4))
    fills = [t[s["start"]:s["end"]] for t, sp in zip(out["text"].to_pylist(), out["refill_spans"].to_pylist())
             for s in sp]
    assert len(fills) == sum(t.count(MASK_TOKEN) for t in wiki_masked.slice(0, 4)["text"].to_pylist()) > 5
    assert all(re.fullmatch(r"[^\W_]+ [^\W_]+", f) for f in fills), fills


def test_a_stored_spec_parses_again(random_filler):
    """What the runners store (every field written) is what they parse again on Ray."""
    for strategy in ("top1", "topk"):
        spec = parse_spec({"stages": [{"kind": "mask", "technique": "allow_list"},
                                      {"kind": "refill", "checkpoint": str(random_filler), "strategy": strategy}]})
        assert parse_spec(json.loads(json.dumps(spec.to_dict()))).to_dict() == spec.to_dict()
