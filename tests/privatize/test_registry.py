"""Issue 49, part 2: one registry idiom. Stages, redaction styles, training kinds, attacks
and the service's job kinds are each a :class:`privatize.registry.Registry`: one name rule,
one duplicate rule, one error for an unknown name, and discovery of built-ins (the modules
of a package) and plugins (entry points) on the first lookup."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint

import pytest

from privatize.registry import Registry, UnknownName


def _all():
    from attacks.registry import ATTACKS
    from privatize.redaction.styles.base import STYLES
    from privatize.stage import STAGES
    from services.jobkinds import KINDS as JOB_KINDS
    from train.kinds import KINDS as TRAIN_KINDS

    return {"stage kind": STAGES, "style": STYLES, "training kind": TRAIN_KINDS, "attack": ATTACKS,
            "job kind": JOB_KINDS}


def test_every_kind_of_plugin_is_one_registry_with_its_built_ins_discovered():
    regs = _all()
    assert all(isinstance(r, Registry) for r in regs.values())
    # the built-ins, found without a hand-kept list: the modules of their package, their
    # own module, or this package's entry points (job kinds)
    assert {"split", "redact", "dedup", "encrypt_text", "canaries", "synthesize"} <= set(regs["stage kind"].names())
    assert {"general", "chat", "clinical", "legal"} <= set(regs["style"].names())
    assert {"pretrain", "continue", "dp", "crt", "mlm"} <= set(regs["training kind"].names())
    assert {"perplexity", "canaries", "mia", "extraction"} <= set(regs["attack"].names())
    assert {"privatize", "train", "evaluate"} <= set(regs["job kind"].names())
    for what, reg in regs.items():
        with pytest.raises(UnknownName, match=rf"^unknown {what} 'no-such' \(registered: ") as exc:
            reg.get("no-such")
        assert isinstance(exc.value, LookupError) and isinstance(exc.value, ValueError)


def test_names_and_duplicates_follow_one_rule():
    reg: Registry[str] = Registry("widget", reserved=("auto",))

    class A: ...

    class B: ...

    reg.add("good-name_1", "a", A)
    reg.add("good-name_1", "a again", A)  # the same class again (a module imported twice) replaces it
    assert reg.get("good-name_1") == "a again"
    with pytest.raises(ValueError, match=r"^widget 'good-name_1' is registered already \(by .*\.A\)$"):
        reg.add("good-name_1", "b", B)
    reg.add("good-name_1", "b", B, force=True)
    for bad in ("Bad", "1st", "", "a" * 33, "has space", None):
        with pytest.raises(ValueError, match="lowercase letters, digits"):
            reg.add(bad, "x", A)
    with pytest.raises(ValueError, match="reserved"):
        reg.add("auto", "x", A)
    restore = reg.snapshot()
    reg.add("temporary", "t", A)
    restore()
    assert reg.names() == ["good-name_1"]


def test_a_plugin_is_found_through_its_entry_point(monkeypatch, tmp_path):
    """A package's metadata naming a module under the registry's group is enough: the
    module is imported on the first lookup and registers itself."""
    import tests.privatize.test_registry as here

    here.WIDGETS = Registry("widget", group="toy.widgets")
    (tmp_path / "toy_widgets.py").write_text(
        "import tests.privatize.test_registry as host\n"
        "class Toy: ...\n"
        "host.WIDGETS.add('toy', 'from the plugin', Toy)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "toy_widgets", raising=False)
    calls = []

    def fake_entry_points(group):
        calls.append(group)
        return [EntryPoint("toy", "toy_widgets", group)] if group == "toy.widgets" else []

    monkeypatch.setattr("importlib.metadata.entry_points", fake_entry_points)
    assert "toy_widgets" not in sys.modules
    assert here.WIDGETS.names() == ["toy"] and here.WIDGETS.get("toy") == "from the plugin"
    assert calls == ["toy.widgets"] and "toy_widgets" in sys.modules
