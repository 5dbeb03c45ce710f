"""Issue 34: a new attack is one file. This module defines a toy attack (what a model writes after
some prompts), registers it, and with no other edit an
evaluation config runs it on a real (tiny) model, ``evaluation.json`` holds its result
per model, and the report has its section; a config naming it badly is refused with the
field's path, before anything is written."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from pydantic import Field

from attacks import registry
from attacks.registry import Attack, AttackSettings, register_attack
from privatize.errors import SpecError

pytest.importorskip("torch")


class TopWord(Attack):
    """The toy: what the model writes after each prompt (three tokens)."""

    name = "top_word"
    title = "Top word (toy attack)"

    class Settings(AttackSettings):
        prompts: list[str] = Field(min_length=1, max_length=10)

    def prepare(self, settings, ctx):
        return [p.strip() for p in settings.prompts]

    def run(self, settings, model, inputs):
        gens = model.adapter.generate(inputs, samples=1, max_new_tokens=3, seed=0)
        return {"prompts": len(inputs), "first": {p: g[0] for p, g in zip(inputs, gens)}}

    def render(self, results):
        from attacks.report_format import esc

        return "".join(f'<p class="top-word">{esc(m)}: {len(r["first"])} prompt(s)</p>' for m, r in results.items())


@pytest.fixture
def registered():
    restore = registry.ATTACKS.snapshot()  # the papers' attacks, loaded; TopWord gone afterwards
    register_attack(TopWord)
    yield
    restore()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from train.models import build_model, preset_config
    from train.tokenizer import special_ids, train_tokenizer

    d = tmp_path_factory.mktemp("model")
    texts = [f"Ann posted parcel {i} from the depot on time." for i in range(100)]
    tok = train_tokenizer(texts, 300)
    build_model(preset_config("tiny", vocab_size=len(tok), **special_ids(tok)), seed=1).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_a_registered_attack_runs_from_the_config_into_the_json_and_the_report(registered, model_dir, tmp_path):
    from attacks.config import parse_config
    from attacks.run import run_evaluation

    cfg = parse_config({"models": [{"name": "tiny", "path": str(model_dir)}, {"name": "again", "path": str(model_dir)}],
                        "attacks": [{"kind": "top_word", "prompts": ["Ann posted", " parcel "]}],
                        "output": str(tmp_path / "ev")})
    ev = run_evaluation(cfg, progress=False)
    assert [sorted(m.attacks) for m in ev.models] == [["top_word"], ["top_word"]]
    saved = json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    got = [m["attacks"]["top_word"] for m in saved["models"]]
    assert got[0] == got[1] and got[0]["prompts"] == 2 and set(got[0]["first"]) == {"Ann posted", "parcel"}
    page = (tmp_path / "ev" / "report.html").read_text()
    assert '<h2 id="attack-top_word">Top word (toy attack)</h2>' in page
    assert page.count('class="top-word"') == 2


def test_a_bad_entry_is_refused_with_its_path_before_anything_runs(registered, tmp_path):
    """``attacks`` is a union discriminated by ``kind``: an error names the entry, its kind
    and the field (pydantic's path through the union), an unknown kind every registered one."""
    from attacks.config import parse_config

    base = {"models": [{"name": "m", "path": "x"}], "output": str(tmp_path / "ev")}
    names = ", ".join(f"'{n}'" for n in registry.attack_names())
    assert "'top_word'" in names
    for entry, want in (({"kind": "top_word"}, "config: attacks.0.top_word.prompts: Field required"),
                        ({"kind": "top_word", "prompts": ["a"], "colour": 1},
                         "config: attacks.0.top_word.colour: Extra inputs are not permitted"),
                        ({"kind": "nope"}, "config: attacks.0: Input tag 'nope' found using 'kind' does not match "
                                           f"any of the expected tags: {names}"),
                        ({"prompts": ["a"]}, "config: attacks.0: Unable to extract tag using discriminator 'kind'")):
        with pytest.raises(SpecError) as exc:
            parse_config({**base, "attacks": [entry]})
        assert str(exc.value) == want
    with pytest.raises(SpecError, match="each kind at most once"):
        parse_config({**base, "attacks": [{"kind": "top_word", "prompts": ["a"]}] * 2})
    assert not (tmp_path / "ev").exists()


def test_a_bad_field_of_a_papers_attack_names_the_entry_and_the_field():
    """A paper's attack in the list: its own field bounds and validators hold there as in its
    section, the path naming the entry (its index and kind) and the field; the service's 422
    takes that path as the field."""
    from attacks.config import parse_config
    from services.errors import config_error

    base = {"models": [{"name": "m", "path": "x"}], "mia": {"members": "a", "non_members": "b"}}
    with pytest.raises(SpecError) as exc:
        parse_config({**base, "attacks": [{"kind": "perplexity", "data": "d"},
                                          {"kind": "canaries", "key": "k", "digits": 12}]})
    assert str(exc.value) == "config: attacks.1.canaries.digits: Input should be less than or equal to 9"
    assert config_error(exc.value).extra["errors"][0]["loc"] == ["body", "config", "attacks", 1, "canaries", "digits"]
    with pytest.raises(SpecError) as exc:  # the settings' own validator, at the entry
        parse_config({**base, "attacks": [{"kind": "canaries", "key": "k", "digits": 8}]})
    assert str(exc.value).startswith("config: attacks.0.canaries: exact exposure scores all 10^8 candidates")
    with pytest.raises(SpecError) as exc:  # the same settings as a section: the section's path
        parse_config({**base, "canaries": {"key": "k", "digits": 12}})
    assert str(exc.value) == "config: canaries.digits: Input should be less than or equal to 9"


def test_the_union_and_the_json_schema_are_the_registrys():
    """Every registered attack is a member of the ``attacks`` union, its fields in the config's
    JSON schema; an attack registered later (a plugin) is in the union of the config parsed
    from then on, and gone with its registration."""
    from attacks.config import SECTIONS, AttackConfig, config_model, config_schema, parse_config

    def members(schema):
        return schema["$defs"]["AttackEntry"]["discriminator"]["mapping"]

    schema = config_schema()
    assert schema["properties"]["attacks"]["items"] == {"$ref": "#/$defs/AttackEntry"}
    assert set(members(schema)) == set(registry.attack_names()) and "top_word" not in members(schema)
    canaries = schema["$defs"]["CanariesEntry"]
    assert canaries["properties"]["kind"]["const"] == "canaries" and canaries["additionalProperties"] is False
    assert canaries["properties"]["digits"]["maximum"] == 9 and "key" in canaries["required"]
    only_papers = set(registry.attack_names()) == set(SECTIONS)  # no plugin installed here
    assert (config_model() is AttackConfig) == only_papers
    restore = registry.ATTACKS.snapshot()
    register_attack(TopWord)
    try:
        schema = config_schema()
        assert members(schema)["top_word"] == "#/$defs/TopWordEntry"
        top = schema["$defs"]["TopWordEntry"]
        assert set(top["properties"]) == {"kind", "prompts"} and top["required"] == ["kind", "prompts"]
        assert top["properties"]["prompts"]["maxItems"] == 10
        cfg = parse_config({"models": [{"name": "m", "path": "x"}],
                            "attacks": [{"kind": "top_word", "prompts": ["a"]}]})
        assert isinstance(cfg, AttackConfig) and type(cfg) is config_model() is not AttackConfig
        entry = cfg.attacks[0]
        assert isinstance(entry, TopWord.Settings) and entry.kind == "top_word" and entry.prompts == ["a"]
        assert parse_config(cfg.to_dict()) == cfg
    finally:
        restore()
    assert "top_word" not in members(config_schema()) and (config_model() is AttackConfig) == only_papers
    assert "top_word" not in members(AttackConfig.model_json_schema())  # the papers' alone, whenever imported


def test_the_sections_are_the_registrys_built_in_section_attacks():
    """The older named sections are derived from the registry: each built-in ``section``
    attack is a field of the config typed by its settings, nothing else is."""
    from attacks.config import SECTIONS, AttackConfig

    built_in = {n for n, a in registry.ATTACKS.items() if a.section and type(a).__module__.startswith("attacks.kinds.")}
    assert set(SECTIONS) == built_in and len(SECTIONS) == 8
    assert list(SECTIONS) == registry.in_order(SECTIONS)
    for name in SECTIONS:
        assert registry.attack(name).Settings in typing.get_args(AttackConfig.model_fields[name].annotation)
    assert set(AttackConfig.model_fields) - set(SECTIONS) == {"version", "models", "corpus_stats", "attacks",
                                                             "scoring", "output"}


def test_the_section_form_and_the_list_form_give_equal_configs(tmp_path):
    """The same attacks as sections and as ``attacks`` entries: the same settings (the
    entry *is* the attack's settings, with its kind), the same attacks run in the same order,
    and each form's ``to_dict()`` reads back to an equal config; the example config reads."""
    from attacks.config import load_config, parse_config
    from attacks.run import entries

    sections = {"canaries": {"key": "file:k.key", "digits": 4, "count": 5, "held_out": 5},
                "mia": {"members": "a.jsonl", "non_members": "b.jsonl", "limit": 50},
                "perplexity": {"data": "c.txt", "limit": 9}}
    base = {"models": [{"name": "m", "path": "x"}]}
    old = parse_config({**base, **sections})
    new = parse_config({**base, "attacks": [{"kind": k, **v} for k, v in reversed(sections.items())]})
    assert new.attacks and all(getattr(new, k) is None for k in sections) and not old.attacks
    for a in new.attacks:
        own = getattr(old, a.kind)
        assert isinstance(a, type(own)) and a.model_dump(exclude={"kind"}) == own.model_dump()
    run_old, run_new = entries(old), entries(new)
    assert [(e[1].name, e[2].model_dump(exclude={"kind"})) for e in run_old] == \
        [(e[1].name, e[2].model_dump(exclude={"kind"})) for e in run_new]
    assert [e[0] for e in run_new] == ["attacks.0", "attacks.2", "attacks.1"]  # perplexity, canaries, mia: by order
    for cfg in (old, new):
        assert parse_config(cfg.to_dict()) == cfg
        assert parse_config(json.loads(json.dumps(cfg.to_dict()))).to_dict() == cfg.to_dict()
    example = load_config(Path(__file__).parents[2] / "attacks" / "configs" / "example.yaml")
    assert example.canaries.digits == 4 and parse_config(example.to_dict()) == example


def test_the_papers_attacks_are_registered_and_run_from_the_list_too(model_dir, tmp_path):
    """A paper's attack is an entry of the registry like the toy: ``attacks: [{kind:
    perplexity, ...}]`` runs it as its older section does, into the same result keyed by
    the attack (typed: its ``Result``)."""
    from attacks.config import parse_config
    from attacks.run import run_evaluation

    assert {"perplexity", "canaries", "mia", "extraction", "reconstruction", "true_prefix", "cipher_outputs",
            "identifiers"} <= set(registry.attack_names())
    data = tmp_path / "held.txt"
    data.write_text("Ann posted parcel 7 from the depot on time.\nThe depot was closed.\n")
    base = {"models": [{"name": "tiny", "path": str(model_dir)}]}
    by_list = run_evaluation(parse_config({**base, "attacks": [{"kind": "perplexity", "data": str(data)}],
                                           "output": str(tmp_path / "a")}), progress=False)
    by_section = run_evaluation(parse_config({**base, "perplexity": {"data": str(data)},
                                              "output": str(tmp_path / "b")}), progress=False)
    assert by_list.models[0].perplexity == pytest.approx(by_section.models[0].perplexity) and \
        by_list.models[0].perplexity > 1
    assert list(by_list.models[0].attacks) == ["perplexity"] and by_list.models[0].attacks == by_section.models[0].attacks
    assert by_list.models[0].perplexity_data == "2 texts of " + str(data)
    saved = json.loads((tmp_path / "a" / "evaluation.json").read_text())["models"][0]
    assert saved["attacks"]["perplexity"]["perplexity"] == pytest.approx(by_list.models[0].perplexity)
    with pytest.raises(SpecError, match="each kind at most once"):
        parse_config({**base, "perplexity": {"data": str(data)}, "attacks": [{"kind": "perplexity", "data": "x"}]})


def test_perplexity_split_by_the_secrets_spans_through_an_evaluation(model_dir, tmp_path):
    """``perplexity.spans_column``: one record whose span covers its whole text, one with
    none. Oracle: outside the spans is the second text's own perplexity, on them the first's
    (each by the plain perplexity path), and the overall figure is the one without spans.
    The JSON keeps the split, the report shows it; a span past its text is refused."""
    from attacks.config import parse_config
    from attacks.model import ModelAdapter
    from attacks.run import run_evaluation

    texts = ["Ann posted parcel 7.", "The depot was closed on time."]
    data = tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"text": t, "spans": sp}) + "\n" for t, sp in
                            zip(texts, [[{"start": 0, "end": len(texts[0]), "entity_type": "X"}], None])))
    base = {"models": [{"name": "tiny", "path": str(model_dir)}]}
    ev = run_evaluation(parse_config({**base, "perplexity": {"data": str(data), "spans_column": "spans"},
                                      "output": str(tmp_path / "ev")}), progress=False)
    m = ev.models[0]
    adapter = ModelAdapter.load(str(model_dir))
    assert m.perplexity_spans.outside == pytest.approx(adapter.perplexity(texts[1:]), rel=1e-5)
    assert m.perplexity_spans.inside == pytest.approx(adapter.perplexity(texts[:1]), rel=1e-5)
    assert m.perplexity == pytest.approx(adapter.perplexity(texts), rel=1e-5)
    assert m.perplexity_spans.tokens == sum(len(x) for x in adapter.encode(texts)) - 2
    saved = json.loads((tmp_path / "ev" / "evaluation.json").read_text())["models"][0]["attacks"]["perplexity"]["spans"]
    assert saved["inside_tokens"] == m.perplexity_spans.inside_tokens > 0
    assert "outside the secrets" in (tmp_path / "ev" / "report.html").read_text()
    from attacks.cli import summary

    assert summary(ev, "")["models"][0]["perplexity_outside_secrets"] == m.perplexity_spans.outside
    data.write_text(json.dumps({"text": "short", "spans": [{"start": 2, "end": 9}]}) + "\n")
    with pytest.raises(SpecError, match=r"^perplexity.data: .*record 0: a span in spans lies outside its text"):
        run_evaluation(parse_config({**base, "perplexity": {"data": str(data), "spans_column": "spans"},
                                     "output": str(tmp_path / "bad")}), progress=False)
    assert not (tmp_path / "bad" / "evaluation.json").exists()


def test_each_papers_attack_is_found_in_its_own_module():
    """Issue 49: every module of ``attacks.kinds`` (but its shared ``_`` parts) is one of the
    papers' attacks, registered under the module's name with its settings, its typed result
    and its part of the report (card rows or a section); nothing lists them."""
    import pkgutil

    import attacks.kinds

    modules = {m.name for m in pkgutil.iter_modules(attacks.kinds.__path__) if not m.name.startswith("_")}
    assert modules == {"perplexity", "canaries", "mia", "extraction", "reconstruction", "true_prefix",
                       "cipher_outputs", "identifiers"}
    assert registry.ATTACKS.packages == ("attacks.kinds",) and not registry.ATTACKS.modules
    for name in modules:
        a = registry.attack(name)
        assert type(a).__module__ == f"attacks.kinds.{name}" and a.Settings.__module__ == f"attacks.kinds.{name}"
        assert a.section and a.Result is not None
        assert type(a).card is not Attack.card or type(a).render is not Attack.render  # its own report part
    assert registry.in_order(modules) == ["perplexity", "canaries", "mia", "reconstruction", "true_prefix",
                                          "extraction", "cipher_outputs", "identifiers"]


def test_without_the_registration_the_kind_is_unknown(tmp_path):
    from attacks.config import parse_config

    with pytest.raises(SpecError, match="^config: attacks.0: Input tag 'top_word' found using 'kind' does not match any "
                                        "of the expected tags: 'canaries', "):
        parse_config({"models": [{"name": "m", "path": "x"}], "attacks": [{"kind": "top_word", "prompts": ["a"]}]})


def test_scoring_device_auto_scores_where_it_can_and_cuda_without_one_is_refused_first(model_dir, tmp_path):
    """``scoring.device``: auto scores on this machine's device (the CPU here, and the same
    perplexity as cpu); cuda on a machine without CUDA is refused before anything is written."""
    import torch

    from attacks.config import parse_config
    from attacks.run import run_evaluation

    data = tmp_path / "held.txt"
    data.write_text("Ann posted parcel 7 from the depot on time.\n")
    base = {"models": [{"name": "tiny", "path": str(model_dir)}], "perplexity": {"data": str(data)}}
    cpu = run_evaluation(parse_config({**base, "output": str(tmp_path / "cpu")}), progress=False)
    auto = run_evaluation(parse_config({**base, "scoring": {"device": "auto"}, "output": str(tmp_path / "auto")}),
                          progress=False)
    assert auto.models[0].perplexity == pytest.approx(cpu.models[0].perplexity, rel=1e-3 if torch.cuda.is_available()
                                                      else 1e-12)
    assert ("the models were scored on cuda" in auto.notes) == torch.cuda.is_available()
    with pytest.raises(SpecError, match="scoring.device: Input should be 'cpu', 'cuda' or 'auto'"):
        parse_config({**base, "scoring": {"device": "tpu"}})
    if not torch.cuda.is_available():
        with pytest.raises(SpecError, match="^scoring.device: cuda asked, but this machine has no CUDA device"):
            run_evaluation(parse_config({**base, "scoring": {"device": "cuda"}, "output": str(tmp_path / "gpu")}),
                           progress=False)
        assert not (tmp_path / "gpu").exists()
