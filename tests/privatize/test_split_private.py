import pyarrow as pa
import pytest

from privatize.errors import SpecError
from privatize.stages.split_private import SplitPrivate, SplitPrivateSettings


def test_routes_by_recorded_flags_never_by_text():
    b = pa.table({"doc_id": ["a", "b", "c", "d"],
                  "text": ["<MASK> here", "clean", "clean too", "also clean"],
                  "dedup_hit": [False, True, False, None], "pi_hit": [False, False, True, False]})
    out = SplitPrivate(SplitPrivateSettings()).process_batch(b)
    # "a" contains the mask token in its text but no stage flagged it: public
    assert out["private"].to_pylist() == [False, True, True, False]
    only = SplitPrivate(SplitPrivateSettings(flags=["pi_hit"])).process_batch(b)
    assert only["private"].to_pylist() == [False, False, True, False]
    with pytest.raises(SpecError, match="pi_c_hit"):
        SplitPrivate(SplitPrivateSettings(flags=["pi_c_hit"])).process_batch(b)
