"""Paper 003's masked prediction of identifiers (issue 22, the PPMLM side): a tiny BERT
built from the ``tiny`` masked-LM preset with a tokenizer trained here, asked about
records whose spans are masked, against (1) a plain forward pass per span computed here,
one question at a time, and (2) a model whose output bias makes one token win
everywhere, so what it predicts is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attacks.identifiers import Record, low_cost_mia, loss_mia, privacy
from experiments.mlm_identifiers import MaskedLMAdapter, masked_utility, mlm_leaks
from privatize.stages.identifiers import IdentifiersSettings

SENTENCES = ["the cat sat on the mat, and the dog sat on the log.", "a bird sang in the tree by the river.",
             "the cat and the dog ran to the river, then home."] * 5
TEXTS = ["the cat sat on the mat, and the dog sat on the log.",
         "a bird sang in the tree by the river, the cat sat.",
         "the dog ran to the river, then home to the cat and the bird.",
         "cat cat cat on the log."]
ST = IdentifiersSettings(direct="none", max_n=2)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny forward passes: one torch thread (two contend with whatever else runs on a
    small machine, and the answers do not depend on it)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tok():
    from train.tokenizer import train_tokenizer

    return train_tokenizer(SENTENCES, 400, 1, 0)


def _model(tok, boost: dict[str, float] | None = None):
    """A randomly initialised tiny BERT; ``boost`` adds to the output bias of some tokens."""
    from train.models import build_model, mlm_preset_config
    from train.tokenizer import special_ids

    model = build_model(mlm_preset_config("tiny", len(tok), **special_ids(tok)), 0, mlm=True).eval()
    with torch.no_grad():
        for piece, v in (boost or {}).items():
            i = tok.convert_tokens_to_ids(piece)
            assert i is not None and i != tok.unk_token_id, piece
            model.cls.predictions.bias[i] += v
    return model


def _spans(text: str, words: list[str]) -> list[dict]:
    """Every occurrence of each of ``words`` in ``text``, as identifier spans."""
    out = []
    for w in words:
        at = text.find(w)
        while at >= 0:
            out.append({"start": at, "end": at + len(w), "kind": "indirect", "term": w})
            at = text.find(w, at + 1)
    return out


def _records(words: list[str]) -> list[Record]:
    return [Record(str(i), f"p{i % 2}", t, _spans(t, words)) for i, t in enumerate(TEXTS)]


def _expected(model, tok, record: Record) -> set[int]:
    """By hand: the whole record between end-of-text tokens (it fits one window), every
    token overlapping the span masked, one full forward pass per span; predicted when the
    argmax at each masked position is the original token."""
    enc = tok(record.text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [tok.eos_token_id] + enc["input_ids"] + [tok.eos_token_id]
    rows, where = [], []
    for sp in record.spans:
        at = [k + 1 for k, (a, b) in enumerate(enc["offset_mapping"]) if a < sp["end"] and b > sp["start"]]
        x = list(ids)
        for p in at:
            x[p] = tok.mask_token_id
        rows.append(x)
        where.append(at)
    with torch.no_grad():  # one row per span, all the same length: no padding
        logits = model(input_ids=torch.tensor(rows)).logits
    return {j for j, at in enumerate(where) if at and all(int(logits[j, p].argmax()) == ids[p] for p in at)}


WORDS = ["the", "cat", "dog", "sat", "the cat", "the river", "on the log", "bird"]


def test_predicted_spans_match_a_forward_pass_per_span(tok):
    # a few words' output bias raised to the size of the context's effect, so the top
    # choice changes from position to position: some spans predicted, some not
    model = _model(tok, {"Ġthe": 1.0, "Ġcat": 1.0, "Ġdog": 1.0, "Ġsat": 1.0, "the": 1.0})
    records = _records(WORDS)
    want = {r.doc_id: _expected(model, tok, r) for r in records}
    n_spans = sum(len(r.spans) for r in records)
    n_hit = sum(len(v) for v in want.values())
    assert 0 < n_hit < n_spans, (n_hit, n_spans)  # the check is not trivial either way
    # tight batches (one window per forward pass) and the default: the same answer
    for batch_tokens in (16384, 20):
        found = mlm_leaks(MaskedLMAdapter(model, tok, batch_tokens=batch_tokens), records, loss=False)
        assert found.predicted == want
        assert found.regurgitated == {"direct": set(), "indirect": set()}  # no generation in a masked LM
    # the output layer over every position (the path of a non-BERT masked LM): the same
    full = MaskedLMAdapter(model, tok)
    full._split = None
    assert mlm_leaks(full, records, loss=False).predicted == want
    # what reached the model: one window per distinct question, each the whole record
    # with exactly the span's tokens masked and every other token as it is
    seen: list[tuple] = []
    hook = model.get_input_embeddings().register_forward_hook(
        lambda _m, args, _out: seen.extend(tuple(x for x in row if x != tok.pad_token_id) for row in args[0].tolist()))
    try:
        mlm_leaks(MaskedLMAdapter(model, tok), records, loss=False)
    finally:
        hook.remove()
    assert sorted(seen) == sorted({row for r in records for row in _masked_rows(tok, r)})


def _masked_rows(tok, record: Record) -> list[tuple]:
    enc = tok(record.text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [tok.eos_token_id] + enc["input_ids"] + [tok.eos_token_id]
    out = []
    for sp in record.spans:
        at = {k + 1 for k, (a, b) in enumerate(enc["offset_mapping"]) if a < sp["end"] and b > sp["start"]}
        out.append(tuple(tok.mask_token_id if k in at else x for k, x in enumerate(ids)))
    return out


def test_a_forced_top_choice_is_predicted_exactly_where_it_is_the_original(tok):
    model = _model(tok, {"Ġcat": 100.0})  # " cat" wins at every position
    records = _records(["cat", "cat cat", "the cat", "dog", "bird"])
    found = mlm_leaks(MaskedLMAdapter(model, tok), records)
    for r in records:
        # a span is predicted exactly when every token it covers is " cat" (a leading
        # space: "cat" at the very start of a text would be another token)
        want = {j for j, sp in enumerate(r.spans)
                if all(tok.convert_ids_to_tokens(i) == "Ġcat" for i in _covered(tok, r.text, sp))}
        assert found.predicted[r.doc_id] == want
    # by construction: record 3 ("cat cat cat on the log.") has spans cat@0, cat@4,
    # cat@8, "cat cat"@0, "cat cat"@4: the first "cat" opens the text (no space: not
    # " cat"), so the spans that cover it are not predicted; "the cat" never is
    assert found.predicted["0"] == {0} and found.predicted["3"] == {1, 2, 4}
    # the paper's metrics over these answers: the distinct terms predicted are "cat" and
    # "cat cat" of 5; members p0 (records 0 and 2: "cat" predicted) and nobody else
    p = privacy(records, found, ST)
    assert (p["indirect"]["identifiers"], p["indirect"]["predicted"], p["indirect"]["regurgitated"]) == (5, 2, 0)
    assert math.isclose(p["indirect"]["privacy"], 0.6)
    mia = low_cost_mia(records, found, members={"p0"})
    assert (mia["precision"], mia["recall"]) == (0.5, 1.0)  # p1's records 1 and 3 too have " cat" predicted
    # the loss per record: the mean over 15% of its tokens masked at seed 0
    for r, s in zip(records, MaskedLMAdapter(model, tok).masked_scores([r.text for r in records])):
        assert found.tokens[r.doc_id] == len(s.nll) > 0 and math.isclose(found.loss[r.doc_id], s.nll.mean())
    assert 0 <= loss_mia(records, found, {"p0"}).auc <= 1


def _covered(tok, text: str, sp: dict) -> list[int]:
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return [i for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if a < sp["end"] and b > sp["start"]]


def test_masked_utility_is_the_share_of_masked_tokens_the_forced_token_matches(tok):
    model = _model(tok, {"Ġcat": 100.0})
    m = MaskedLMAdapter(model, tok)
    texts = TEXTS * 3
    scores = m.masked_scores(texts, probability=0.5, seed=3)
    again = MaskedLMAdapter(_model(tok), tok).masked_scores(texts, probability=0.5, seed=3)
    cat = cats = 0
    for t, s, s2 in zip(texts, scores, again):
        ids = tok(t, add_special_tokens=False)["input_ids"]
        assert np.array_equal(s.positions, s2.positions)  # the draw depends on the text and seed, not the model
        is_cat = np.array([tok.convert_ids_to_tokens(ids[int(p)]) == "Ġcat" for p in s.positions], bool)
        assert np.array_equal(s.correct, is_cat)
        assert (s.nll[is_cat] < 1e-3).all() and (s.nll[~is_cat] > 50).all()
        cat, cats = cat + int(is_cat.sum()), cats + len(is_cat)
    assert 0 < cat < cats
    u = masked_utility(m, texts, probability=0.5, seed=3)
    assert u["masked_tokens"] == cats and math.isclose(u["accuracy"], cat / cats)
    assert u["perplexity"] > 1e10  # the non-cat tokens cost ~100 nats each
    # different seeds draw different positions
    other = m.masked_scores(texts, probability=0.5, seed=4)
    assert any(not np.array_equal(a.positions, b.positions) for a, b in zip(scores, other))


def test_windows_longer_texts_and_loads_a_folder(tok, tmp_path):
    """A text longer than the window: each span asked in a window of ``max_length``
    tokens around it (the expectation: the same window cut by hand); and the adapter
    loads a saved folder."""
    model = _model(tok, {"Ġthe": 1.0, "Ġcat": 1.0, "Ġdog": 1.0, "Ġsat": 1.0})
    text = " ".join(TEXTS * 2)
    rec = Record("long", "p0", text, _spans(text, ["cat", "dog", "the river"]))
    width = 16
    found = mlm_leaks(MaskedLMAdapter(model, tok, max_length=width), [rec], loss=False).predicted["long"]
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [tok.eos_token_id] + enc["input_ids"] + [tok.eos_token_id]
    assert len(ids) > 3 * width
    want = set()
    for j, sp in enumerate(rec.spans):
        at = [k + 1 for k, (a, b) in enumerate(enc["offset_mapping"]) if a < sp["end"] and b > sp["start"]]
        start = max(0, min(at[0] - (width - len(at)) // 2, len(ids) - width))
        x = ids[start:start + width]
        assert all(0 <= p - start < width for p in at)
        for p in at:
            x[p - start] = tok.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([x])).logits[0]
        if all(int(logits[p - start].argmax()) == ids[p] for p in at):
            want.add(j)
    assert found == want and 0 < len(want) < len(rec.spans)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = MaskedLMAdapter.load(tmp_path, max_length=width)
    assert mlm_leaks(loaded, [rec], loss=False).predicted["long"] == want


def test_the_evaluation_refuses_unknown_methods_and_tables_masked_rows(tmp_path):
    from experiments.identifier_eval import IdentifierPlan, checks, evaluate, mlm_markdown

    with pytest.raises(ValueError, match="unknown mlmx"):
        evaluate(IdentifierPlan(corpus=tmp_path / "none.jsonl", base_corpus=tmp_path / "none.jsonl", work=tmp_path,
                                methods=("mlm", "mlmx")), progress=False)

    def row(privacy_indirect: float, recall: float) -> dict:
        kinds = {k: {"identifiers": 4, "privacy": privacy_indirect if k == "indirect" else 1.0}
                 for k in ("direct", "indirect", "all")}
        return {"privacy": kinds, "utility": {"accuracy": 0.25, "perplexity": 12.0},
                "low_cost_mia": {"precision": 1.0, "recall": recall, "f1": 0.5},
                "loss_mia": {"auc": 0.5, "tpr_at_1pct_fpr": 0.0}}

    result = {"models": {}, "mlm_models": {"mlm": row(0.5, 0.8), "ppmlm": row(0.75, 0.1)}}
    c = checks(result)
    assert c["ppmlm_indirect_privacy_higher"] and not c["ppmlm_direct_privacy_higher"]
    assert c["ppmlm_low_cost_mia_recall_lower"] and not any(k.startswith("ppclm") for k in c)
    table = mlm_markdown(result)
    assert "| PPMLM | 0.250 | 12.0 | 1.000 | 1.000 | 0.750 | 1.00 / 0.10 / 0.50 |" in table
