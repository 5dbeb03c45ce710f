import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from privatize.errors import SpecError
from privatize import run
from privatize.spec import parse_spec
from privatize.stages.split_private import SplitPrivate, SplitPrivateSettings


def _batch():
    return pa.table({"doc_id": ["a", "b", "c", "d", "e"],
                     "text": ["<MASK> here", "clean", "clean too", "also clean", "<MASK>"],
                     "dedup_hit": [False, True, False, None, False],
                     "pi_hit": [False, False, True, False, False],
                     "pi_c_hit": [False, False, False, True, None]})


def test_routes_by_recorded_flags_never_by_text():
    out = SplitPrivate(SplitPrivateSettings()).process_batch(_batch())
    # "a" and "e" hold the mask token in their text but no stage flagged them: public
    assert out["private"].to_pylist() == [False, True, True, True, False]
    assert out["_stat.private"].to_pylist() == [0, 1, 1, 1, 0]
    assert out["_stat.public"].to_pylist() == [1, 0, 0, 0, 1]


@pytest.mark.parametrize("flags, expected", [
    (["pi_hit"], [False, False, True, False, False]),
    (["dedup_hit"], [False, True, False, False, False]),  # a null flag counts as false
    (["dedup_hit", "pi_c_hit"], [False, True, False, True, False]),
])
def test_chosen_flags_only(flags, expected):
    out = SplitPrivate(SplitPrivateSettings(flags=flags)).process_batch(_batch())
    assert out["private"].to_pylist() == expected


def test_default_uses_the_flags_present():
    b = _batch().drop_columns(["pi_hit", "pi_c_hit"])
    assert SplitPrivate(SplitPrivateSettings()).process_batch(b)["private"].to_pylist() == \
        [False, True, False, False, False]


def test_missing_flags_are_clear_errors():
    b = _batch().drop_columns(["pi_c_hit"])
    with pytest.raises(SpecError, match=r"\['pi_c_hit'\] not recorded"):
        SplitPrivate(SplitPrivateSettings(flags=["pi_c_hit"])).process_batch(b)
    with pytest.raises(SpecError, match="put dedup or redact before"):
        SplitPrivate(SplitPrivateSettings()).process_batch(b.drop_columns(["dedup_hit", "pi_hit"]))
    with pytest.raises(ValidationError):
        SplitPrivateSettings(flags=[])
    with pytest.raises(ValidationError):
        SplitPrivateSettings(flags=["masked"])


def test_through_the_runner(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                         for i, t in enumerate(["Same here. Fresh one.", "Same here. A <MASK> literal."])))
    spec = parse_spec({"stages": [{"kind": "split"}, {"kind": "dedup"}, {"kind": "split_private"}],
                       "output": {"num_shards": 1}})
    m = run(spec, p, tmp_path / "o")
    rows = {r["doc_id"]: r for r in pq.read_table(tmp_path / "o" / "shards" / "part-00000-of-00001.parquet").to_pylist()}
    assert {d: r["private"] for d, r in rows.items()} == {"0#0": False, "0#1": False, "1#0": True, "1#1": False}
    assert m["stages"][2]["stats"] == {"private": 1, "public": 3}
