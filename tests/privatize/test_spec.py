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
])
def test_errors_name_the_field_path(data, path):
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert str(e.value).startswith(path), str(e.value)


@pytest.mark.parametrize("stages, msg", [
    ([{"kind": "encrypt_text", "key": KEY}, {"kind": "dedup", "unit": "document"}], "stages.1: dedup after encrypt_text"),
    ([{"kind": "dedup", "unit": "segment"}], "stages.0: dedup with unit 'segment' needs a split"),
    ([{"kind": "split_private"}], "stages.0: split_private needs a dedup or redact"),
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
