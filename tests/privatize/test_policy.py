"""The policy markers (``privatize.policy``) are found wherever a settings model holds them: a
nested model, an optional one, and the items of a list of models (a plugin's ``sources:
[{path: ...}]``), which a review found were skipped: a marked field there reached the work
unchecked."""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel

from privatize.policy import DataSource, Quota, ServerPath, marked, marked_fields, marked_values


class Source(BaseModel):
    path: Annotated[str, ServerPath(why="a file")]
    label: str = ""


class Settings(BaseModel):
    data: Annotated[str, DataSource()]
    sources: list[Source] = []
    extra: Optional[Source] = None
    size: Annotated[int, Quota("eval_max_examples")] = 1


def test_markers_in_nested_models_and_list_items_by_path():
    raw = {"data": "corpus", "sources": [{"path": "/a"}, {"path": "/b", "label": "x"}], "extra": {"path": "/c"},
           "size": 5}
    found = [(".".join(p), v) for p, v, _ in marked(raw, Settings, (ServerPath,))]
    assert found == [("sources.0.path", "/a"), ("sources.1.path", "/b"), ("extra.path", "/c")]
    assert [(".".join(p), v) for p, v, _ in marked(raw, Settings, (DataSource,))] == [("data", "corpus")]
    assert [".".join(p) for p, v, _ in marked({"data": "x", "sources": "not a list"}, Settings, (ServerPath,))] == []
    obj = Settings.model_validate(raw)
    assert [(".".join(p), v) for p, v, _, _ in marked_values(obj, (ServerPath,))] == [
        ("sources.0.path", "/a"), ("sources.1.path", "/b"), ("extra.path", "/c")]
    # the declared fields: each marked field once, wherever it may appear
    assert sorted(".".join(p) for p, _ in marked_fields(Settings, (ServerPath, DataSource, Quota))) == [
        "data", "extra.path", "size", "sources.path"]
