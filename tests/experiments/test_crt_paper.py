"""``experiments.crt_paper``: the CRT report's inputs follow the recipe each model was
trained on (the review of session 49: every CRT model was charged one claimed delta_2)."""

import json

import pytest

from experiments.crt_paper import CRT_INPUTS, crt_inputs


def _manifest(tmp_path, stages, quality=None):
    m = {"spec": {"version": 1, "stages": stages}} | ({"quality": quality} if quality else {})
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    return tmp_path


def test_a_calibrated_split_leaves_gamma_and_delta_2_to_its_manifest(tmp_path):
    data = _manifest(tmp_path, [{"kind": "redact", "miss_share": 0.1}],
                     {"gamma": 0.136, "delta_2": 0.0163, "source": "calibrated pi_c ..., with the redact stage's "
                                                                   "miss_share 0.1 of pi's hits left in the clear"})
    assert crt_inputs(data) is None  # the training reads the manifest's quality, measured


def test_a_manifest_without_gamma_is_claimed_and_a_stale_one_refused(tmp_path):
    got = crt_inputs(_manifest(tmp_path, [{"kind": "redact"}], {"gamma": None, "delta_2": 0.0163, "source": "x"}))
    assert got == CRT_INPUTS  # the training would find no measured gamma
    with pytest.raises(SystemExit, match="predates the miss_share"):
        crt_inputs(_manifest(tmp_path, [{"kind": "redact", "miss_share": 0.1}],
                             {"gamma": 0.05, "delta_2": 0.0163, "source": "calibrated pi_c"}))


def test_the_papers_routing_claims_customersims_figures_widened_by_the_miss_share(tmp_path):
    plain = crt_inputs(_manifest(tmp_path, [{"kind": "split"}, {"kind": "redact"}]))
    assert plain == CRT_INPUTS
    missed = crt_inputs(_manifest(tmp_path, [{"kind": "redact", "miss_share": 0.1}]))
    # a secret stays readable when pi misses it or the recipe leaves its hit: 1 - 0.9618 * 0.9
    assert missed["gamma"] == pytest.approx(0.13438, abs=1e-6)
    assert missed["delta_2"] == CRT_INPUTS["delta_2"] and "miss_share 0.1" in missed["source"]


def test_a_model_name_may_name_the_operator_of_its_recipe():
    from experiments.crt_paper import split_operator

    assert split_operator("crtm-e3-g0.1_booking-surrogate") == ("crtm-e3-g0.1_booking", "surrogate")
    assert split_operator("redacted-g0.1") == ("redacted-g0.1", "mask")
    assert split_operator("crt-e3-g0.1-encrypt") == ("crt-e3-g0.1-encrypt", "mask")  # then refused as unknown
    with pytest.raises(ValueError, match="trains on the raw text"):
        split_operator("plain-surrogate")
