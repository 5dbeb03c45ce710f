"""The calibrated pi_c through the service's spec check (issue 50): a model file on the
server is refused from a tenant with the field's path, the policy words and the shipped
model's domains are taken."""

from __future__ import annotations

import pytest

import privatize.stages.redact  # noqa: F401 - registers the stage before specs are parsed
from services.errors import SpecInvalid
from services.specs import validate_spec


def _spec(pi_c) -> dict:
    return {"version": 1, "stages": [{"kind": "split", "doc_style": True},
                                     {"kind": "redact", "operator": "mask", "pi_c": pi_c},
                                     {"kind": "split_private"}]}


def test_a_calibration_file_on_the_server_is_refused_with_its_path():
    with pytest.raises(SpecInvalid) as e:
        validate_spec(_spec({"policy": "calibrated", "calibration": "/etc/passwd"}))
    paths = [err["path"] for err in e.value.extra["errors"]]
    assert paths == ["stages.1.redact.pi_c.calibration"]
    assert "/etc/passwd" not in str(e.value)  # the refusal names the field, never reads or echoes the file


@pytest.mark.parametrize("pi_c", ["strict", "calibrated", {"domain": "clinical"}, {"digits": False}])
def test_policy_words_and_domains_are_taken(pi_c):
    spec = validate_spec(_spec(pi_c))
    assert spec.stages[1].pi_c.policy == ("strict" if pi_c in ("strict", {"digits": False}) else "calibrated")


def test_an_unknown_domain_is_a_field_error():
    with pytest.raises(SpecInvalid) as e:
        validate_spec(_spec({"domain": "astrology"}))
    assert "no calibration" in str(e.value.extra["errors"]) and "stages" in str(e.value.extra["errors"])
