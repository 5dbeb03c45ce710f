import json

import pytest

from privatize.errors import SpecError
from privatize.spec import load_spec, parse_spec

KEY = "file:keys/text.key"


def _spec(*stages, **extra):
    return {"version": 1, "stages": list(stages), **extra}


def test_yaml_and_json_give_the_same_spec_and_hash(tmp_path):
    data = _spec({"kind": "split"}, {"kind": "dedup", "method": "sha1"}, {"kind": "encrypt_text", "key": KEY})
    (tmp_path / "s.json").write_text(json.dumps(data))
    (tmp_path / "s.yaml").write_text(
        "version: 1\nstages:\n  - kind: split\n  - kind: dedup\n    method: sha1\n"
        f"  - kind: encrypt_text\n    key: {KEY}\n")
    a, b = load_spec(tmp_path / "s.json"), load_spec(tmp_path / "s.yaml")
    assert a == b and a.sha256() == b.sha256()
    assert [s.kind for s in a.stages] == ["split", "dedup", "encrypt_text"]
    assert a.key_refs() == [KEY]


@pytest.mark.parametrize("data, path", [
    (_spec({"kind": "split", "unit": "chapter"}), "stages.0.split.unit"),
    (_spec({"kind": "encrypt_text"}), "stages.0.encrypt_text.key"),
    (_spec({"kind": "encrypt_text", "key": "s3cr3t"}), "stages.0.encrypt_text.key"),
    (_spec({"kind": "split", "typo": 1}), "stages.0.split.typo"),
    (_spec({"kind": "nonsense"}), "stages.0"),
    (_spec(), "stages"),
    (_spec({"kind": "split"}, output={"num_shards": 0}), "output.num_shards"),
    (_spec({"kind": "split"}, extra=True), "extra"),
    (_spec({"kind": "split"}, quality={"gamma": 1.5, "delta_2": 0.0}), "quality.gamma"),
    (_spec({"kind": "split"}, quality={"gamma": 0.1}), "quality.delta_2"),
])
def test_errors_name_the_field_path(data, path):
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert str(e.value).startswith(path), str(e.value)


@pytest.mark.parametrize("stages, msg", [
    ([{"kind": "encrypt_text", "key": KEY}, {"kind": "dedup", "unit": "document"}], "stages.1: dedup after encrypt_text"),
    ([{"kind": "dedup", "unit": "segment"}], "stages.0: dedup with unit 'segment' needs a split"),
    ([{"kind": "split_private"}], "stages.0: split_private needs a dedup, redact or mask"),
    ([{"kind": "split"}, {"kind": "split"}], "stages.1: split appears twice"),
])
def test_orders_that_cannot_work_are_refused(stages, msg):
    with pytest.raises(SpecError) as e:
        parse_spec(_spec(*stages))
    assert msg in str(e.value)


def test_load_spec_reports_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("version: 1\nstages: [\n  - kind: split\n")
    with pytest.raises(SpecError, match=r"bad.yaml:\d+: not valid YAML"):
        load_spec(p)
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "missing.yaml")


# ---- order rules are declared by each stage -------------------------------------------

def test_a_new_stage_declares_its_order_rules_in_its_own_module(monkeypatch):
    from typing import Literal

    from privatize import stage as stage_mod
    from privatize.settings import AfterOneOf, Once, StageSettings
    from privatize.spec import check_stage_order
    from privatize.stages.split import SplitSettings

    class ProbeSettings(StageSettings):
        kind: Literal["probe"] = "probe"
        strict: bool = True
        order_rules = (Once("probe appears twice"),
                       AfterOneOf("split", "probe needs a split stage before it", when={"strict": True}))

    stage_mod.STAGES.load()
    for attr in ("_entries", "_owners"):  # the registration is undone after
        monkeypatch.setattr(stage_mod.STAGES, attr, dict(getattr(stage_mod.STAGES, attr)))
    stage_mod.register_stage("probe", ProbeSettings, force=True)(type("Probe", (stage_mod.Stage,), {}))
    check_stage_order([SplitSettings(), ProbeSettings()])
    check_stage_order([ProbeSettings(strict=False)])
    with pytest.raises(ValueError, match=r"^stages\.0: probe needs a split stage before it$"):
        check_stage_order([ProbeSettings()])
    with pytest.raises(ValueError, match=r"^stages\.2: probe appears twice$"):
        check_stage_order([SplitSettings(), ProbeSettings(), ProbeSettings(strict=False)])


_PROBE_MODULE = '''
import json
from typing import Literal

from privatize.settings import Before, StageSettings
from privatize.stage import Stage, register_stage


class ProbeSettings(StageSettings):
    kind: Literal["probe"] = "probe"
    order_rules = (Before("dedup", "probe must come before dedup"),)


@register_stage("probe", ProbeSettings, force=True)
class Probe(Stage):
    def process_batch(self, batch):
        return batch


from privatize.errors import SpecError  # noqa: E402  (after the registration, as a stage module would be)
from privatize.spec import parse_spec  # noqa: E402

ok = parse_spec({"stages": [{"kind": "probe"}, {"kind": "dedup", "unit": "document"}]})
out = {"ok": [s.kind for s in ok.stages]}
try:
    parse_spec({"stages": [{"kind": "dedup", "unit": "document"}, {"kind": "probe"}]})
except SpecError as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
'''


def test_parse_spec_enforces_a_registered_stages_own_rule(tmp_path):
    """A stage module registered before the spec is built (as built-in stages and plugins
    are) gets its kind in the spec and its declared rule checked; spec.py names neither."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import privatize.spec

    assert "probe" not in Path(privatize.spec.__file__).read_text()
    (tmp_path / "probe_stage.py").write_text(_PROBE_MODULE)
    root = Path(privatize.spec.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(tmp_path / "probe_stage.py")], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"ok": ["probe", "dedup"], "refused": "stages.1: probe must come before dedup"}


def test_every_built_in_rule_lives_on_its_settings_class():
    from privatize.stages import registered_kinds

    declared = {k: len(s.order_rules) for k, (s, _) in registered_kinds().items()}
    assert declared == {"split": 2, "dedup": 5, "redact": 1, "split_private": 1, "encrypt_text": 1, "canaries": 1,
                        "mask": 1, "refill": 2, "identifiers": 1, "synthesize": 3}


# ---- key references: one walk over the model ------------------------------------------

def test_the_key_walk_finds_every_key_ref_with_its_field_path():
    from typing import Literal

    from pydantic import BaseModel

    from privatize.settings import KeyRef, StageSettings
    from privatize.spec import InputSettings, OutputSettings, PipelineSpec, key_references
    from privatize.stages.encrypt_text import EncryptTextSettings
    from privatize.stages.redact import RedactSettings
    from privatize.stages.split import SplitSettings

    class Operator(BaseModel):
        name: str = "encrypt"  # a string, not a key reference
        key: KeyRef | None = None

    class NestedSettings(StageSettings):
        kind: Literal["nested"] = "nested"
        operators: list[Operator] = []
        by_entity: dict[str, KeyRef] = {}

    nested = NestedSettings(operators=[Operator(key="keystore:op0"), Operator(), Operator(key="file:op2.key")],
                            by_entity={"PERSON": "keystore:person"})
    spec = PipelineSpec.model_construct(
        input=InputSettings(), output=OutputSettings(pseudonym_key="keystore:hmac"),
        stages=[SplitSettings(), RedactSettings(operator="encrypt", key="keystore:siv"), nested,
                EncryptTextSettings(key="file:text.key")])
    expected = [("stages.1.key", "keystore:siv"), ("stages.2.operators.0.key", "keystore:op0"),
                ("stages.2.operators.2.key", "file:op2.key"), ("stages.2.by_entity.PERSON", "keystore:person"),
                ("stages.3.key", "file:text.key"), ("output.pseudonym_key", "keystore:hmac")]
    assert key_references(spec) == expected
    assert spec.key_refs() == [ref for _, ref in expected]


def test_key_refs_of_a_parsed_spec():
    s = parse_spec(_spec({"kind": "split"}, {"kind": "redact", "operator": "encrypt", "key": "keystore:siv"},
                         {"kind": "encrypt_text", "key": KEY}, output={"pseudonym_key": "file:p.key"}))
    assert s.key_refs() == ["keystore:siv", KEY, "file:p.key"]
    assert parse_spec(_spec({"kind": "split"})).key_refs() == []


def test_every_key_like_field_of_a_stage_is_a_key_ref():
    """The walk finds key references by type: a stage field named like a key but typed
    ``str`` would escape the service's check of which keys a tenant may use."""
    from typing import get_args

    from pydantic import BaseModel

    from privatize.settings import field_holds_key_ref, field_holds_secret_ref
    from privatize.spec import OutputSettings
    from privatize.stages import registered_kinds

    def models_in(tp):
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            yield tp
        for a in get_args(tp):
            yield from models_in(a)

    todo, seen = [OutputSettings, *(s for s, _ in registered_kinds().values())], set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            if name == "key" or name.endswith("_key"):  # key material, or another credential (an API key)
                assert field_holds_key_ref(field) or field_holds_secret_ref(field), \
                    f"{model.__name__}.{name} is neither a KeyRef nor a SecretRef"
            todo.extend(models_in(field.annotation))
    assert len(seen) > len(registered_kinds())  # nested settings (redact's pi_c) were visited


def test_a_failed_parse_carries_its_field_errors():
    with pytest.raises(SpecError) as e:
        parse_spec(_spec({"kind": "split"}, {"kind": "encrypt_text", "key": KEY}, {"kind": "dedup"}))
    assert e.value.field_errors == [(["stages", "2"], "dedup after encrypt_text finds nothing (ciphertext depends on "
                                                     "position); put dedup before the cipher")]
    with pytest.raises(SpecError) as e:
        parse_spec(_spec({"kind": "split", "unit": "word"}))
    assert [loc for loc, _ in e.value.field_errors] == [["stages", "0", "split", "unit"]]


def test_measured_quality_reaches_the_manifest_and_leaves_other_specs_as_they_were(tmp_path):
    """``quality`` (gamma, delta_2 measured on gold data) is copied into the manifest,
    where a CRT training takes it by default; a spec without it keeps its old form."""
    from privatize import run

    plain = parse_spec(_spec({"kind": "split"}))
    assert "quality" not in plain.to_dict()
    spec = parse_spec(_spec({"kind": "split"}, quality={"gamma": 0.0382, "delta_2": 0.0033, "source": "customersim"}))
    assert spec.sha256() != plain.sha256()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(json.dumps({"id": "1", "text": "One. Two."}) + "\n")
    m = run(spec, tmp_path / "in", tmp_path / "out")
    assert m["quality"] == {"gamma": 0.0382, "delta_2": 0.0033, "source": "customersim"}
    assert "quality" not in run(plain, tmp_path / "in", tmp_path / "out2")
