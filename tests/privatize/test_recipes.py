"""The packaged recipes as data (``privatize.recipes``): the CRT recipe's stages come from
``privatize/specs/crt.yaml`` and a caller changes only the redact stage."""

from __future__ import annotations

import pytest
import yaml

from privatize.recipes import SPECS, crt_split, crt_stages, packaged_spec


def test_crt_stages_are_the_yaml_files_with_only_the_redact_stage_replaced():
    on_disk = yaml.safe_load((SPECS / "crt.yaml").read_text())["stages"]
    assert [s["kind"] for s in on_disk] == ["split", "redact", "dedup", "split_private"]
    got = crt_stages(operator="mask", miss_share=0.1, miss_seed=0)
    assert got[1] == {"kind": "redact", "operator": "mask", "miss_share": 0.1, "miss_seed": 0}
    assert [s for i, s in enumerate(got) if i != 1] == [s for i, s in enumerate(on_disk) if i != 1]
    assert got[2] == {"kind": "dedup", "method": "sha1", "unit": "segment", "action": "mask", "skip_clean": True}
    got[2]["skip_clean"] = False  # a copy: the next caller still gets the file's recipe
    assert crt_stages(operator="mask")[2]["skip_clean"] is True
    # the split alone: what the raw and held-out text are cut by (the main job, crt_paper)
    assert crt_split() == {"kind": "split", "unit": "sentence", "doc_style": True} == on_disk[0]


def test_crt_stages_parse_as_a_spec_with_canaries_before_them():
    pytest.importorskip("presidio_analyzer")
    import privatize.stages.canaries  # noqa: F401
    import privatize.stages.redact  # noqa: F401
    from privatize.spec import parse_spec

    spec = parse_spec({"version": 1, "stages": [{"kind": "canaries", "key": "file:canary.key", "digits": 6},
                                                *crt_stages(operator="mask")]})
    assert [s.kind for s in spec.stages] == ["canaries", "split", "redact", "dedup", "split_private"]


def test_an_unknown_packaged_spec_names_the_known_ones():
    with pytest.raises(KeyError, match="no packaged spec 'nope' \\(known: canaries, cipher, crt, public\\)"):
        packaged_spec("nope")
