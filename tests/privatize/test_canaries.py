"""``canaries``: secrets derived from an hmac key, inserted exactly ``count * repeats``
times whatever the batch size or runner, and found nowhere but in the output text."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import pickle
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from privatize import run
from privatize.corpus import make_corpus
from privatize.errors import KeyMaterialError, SpecError
from privatize.keys import load_key_file, new_key, write_key_file
from privatize.spec import load_spec, parse_spec
from privatize.stage import StageContext
from privatize.stages import build_stage, registered_kinds
from privatize.stages.canaries import (SEPARATOR, Canaries, CanariesSettings, KeyedStream, canary_secrets,
                                       canary_text, derive_secrets)
from tests.conftest import ROOT
from tests.secrets_scan import leaks

CANARIES = {"kind": "canaries", "key": "file:keys/canary.key", "count": 4, "repeats": 5, "held_out": 3}
SPEC = {"stages": [CANARIES, {"kind": "split"}], "output": {"num_shards": 3, "meta_keys": ["spans"]}}
N_DOCS = 30


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """An hmac key, an aes-siv key, and a Faker corpus of N_DOCS documents in two files
    (so the global order spans files)."""
    d = tmp_path_factory.mktemp("canaries")
    write_key_file(new_key("hmac"), d / "keys" / "canary.key")
    write_key_file(new_key("aes-siv"), d / "keys" / "siv.key")
    make_corpus(d / "all.jsonl", n_docs=N_DOCS, seed=3)
    lines = (d / "all.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (d / "corpus").mkdir()
    (d / "corpus" / "b.jsonl").write_text("".join(lines[N_DOCS // 2:]), encoding="utf-8")
    (d / "corpus" / "a.jsonl").write_text("".join(lines[:N_DOCS // 2]), encoding="utf-8")
    return d


def secrets_of(workdir, settings=CANARIES) -> tuple[list[str], list[str]]:
    key = load_key_file(workdir / "keys" / "canary.key").secret
    return canary_secrets(CanariesSettings(**settings), key)


def rows_of(out: Path) -> list[dict]:
    return [r for p in sorted((out / "shards").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def shard_hashes(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "shards").iterdir())}


def comparable(m: dict) -> dict:
    return {"counts": m["counts"], "key_ids": m["key_ids"], "shards": m["shards"],
            "stages": [{k: v for k, v in s.items() if k != "seconds"} for s in m["stages"]]}


# ---- secrets --------------------------------------------------------------------------

def test_derived_secrets_are_deterministic_distinct_fixed_width_and_keyed():
    key, other = b"k" * 32, b"o" * 32
    s = derive_secrets(key, 6, 20)
    assert s == derive_secrets(key, 6, 20)
    assert len(s) == len(set(s)) == 20
    assert all(len(x) == 6 and x.isdigit() for x in s)
    assert set(derive_secrets(other, 6, 20)).isdisjoint(s)
    assert set(derive_secrets(key, 6, 20, label="run-2")).isdisjoint(s)
    assert derive_secrets(key, 6, 30)[:20] == s  # prefix-stable: held-out ones never move the inserted
    assert derive_secrets(key, 6, 0) == []
    # every secret of a small space, each once, zero-padded
    assert sorted(derive_secrets(key, 1, 10)) == [str(d) for d in range(10)]
    assert any(x.startswith("0") for x in derive_secrets(key, 2, 100))
    # candidate 0 computed independently: HMAC-SHA256 of the framed domain, label and digits
    msg = b"".join(len(p).to_bytes(4, "big") + p for p in (b"privatize/canaries/v1/secret", b"", b"6"))
    c0 = hmac.new(key, msg + (0).to_bytes(8, "big"), hashlib.sha256).digest()
    assert s[0] == str(int.from_bytes(c0, "big") % 10 ** 6).zfill(6)
    with pytest.raises(ValueError, match="n must be 0..10"):
        derive_secrets(key, 1, 11)
    with pytest.raises(ValueError, match="non-empty bytes"):
        derive_secrets(b"", 6, 1)


def test_canary_secrets_split_inserted_from_held_out():
    settings = CanariesSettings(key="file:k.key", count=3, held_out=2, seed_label="x")
    inserted, held_out = canary_secrets(settings, b"k" * 32)
    assert inserted + held_out == derive_secrets(b"k" * 32, 6, 5, "x")
    assert len(inserted) == 3 and len(held_out) == 2
    assert canary_text("My ID is: {secret}.", "012345") == "My ID is: 012345."
    assert canary_text("{literal} {secret}", "7") == "{literal} 7"


def test_keyed_stream_samples_distinct_rows_reproducibly():
    a = KeyedStream(b"s" * 32).sample(1000, 200)
    assert a == KeyedStream(b"s" * 32).sample(1000, 200)
    assert len(set(a)) == 200 and all(0 <= x < 1000 for x in a)
    assert a != KeyedStream(b"t" * 32).sample(1000, 200)
    assert sorted(KeyedStream(b"s" * 32).sample(50, 50)) == list(range(50))
    stream = KeyedStream(b"u" * 32)
    draws = Counter(stream.below(3) for _ in range(3000))
    assert set(draws) == {0, 1, 2} and min(draws.values()) > 850


# ---- settings -------------------------------------------------------------------------

def test_defaults_are_the_crt_setting_and_the_example_spec_parses():
    assert registered_kinds()["canaries"] == (CanariesSettings, Canaries)
    s = parse_spec({"stages": [{"kind": "canaries", "key": "keystore:c1"}]}).stages[0]
    assert (s.format, s.digits, s.count, s.repeats, s.held_out, s.seed_label) == (
        "My ID is: {secret}", 6, 10, 20, 10, "")
    example = load_spec(ROOT / "privatize" / "specs" / "canaries.yaml")
    assert [x.kind for x in example.stages] == ["canaries"]
    assert example.key_refs() == ["file:keys/canary.key"]


@pytest.mark.parametrize("fields, path, message", [
    ({"format": "My ID"}, "stages.0.canaries.format", "must contain {secret} exactly once (found 0)"),
    ({"format": "{secret} and {secret}"}, "stages.0.canaries.format", "exactly once (found 2)"),
    ({"digits": 10}, "stages.0.canaries.digits", "less than or equal to 9"),
    ({"count": 1000, "repeats": 1001}, "stages.0.canaries", "count * repeats must be at most 1000000"),
    ({"digits": 1, "count": 8, "held_out": 3}, "stages.0.canaries", "count + held_out (11) exceeds the 10"),
    ({"key": "0123abcd"}, "stages.0.canaries.key", "a key reference is a URI"),
])
def test_bad_settings_are_one_line_spec_errors_naming_the_field(fields, path, message):
    with pytest.raises(SpecError) as e:
        parse_spec({"stages": [{**CANARIES, **fields}]})
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{path}: ") and message in text


def test_canaries_come_before_every_other_stage():
    with pytest.raises(SpecError, match=r"^stages\.1: canaries must come before every other stage"):
        parse_spec({"stages": [{"kind": "split"}, CANARIES]})
    ok = parse_spec({"stages": [CANARIES, {**CANARIES, "seed_label": "b"}, {"kind": "split"}, {"kind": "dedup"}]})
    assert [s.kind for s in ok.stages] == ["canaries", "canaries", "split", "dedup"]


# ---- runs -----------------------------------------------------------------------------

def check_insertions(workdir, rows: list[dict], manifest: dict) -> None:
    """Each inserted secret's sentence is its own segment exactly ``repeats`` times, in
    distinct documents; no held-out secret anywhere; the manifest counts them."""
    inserted, held_out = secrets_of(workdir)
    texts = [r["text"] for r in rows]
    for s in inserted:
        sentence = canary_text("My ID is: {secret}", s)
        assert sum(t.count(sentence) for t in texts) == CANARIES["repeats"], s
        hosts = [r["parent_id"] for r in rows if r["text"] == sentence]
        assert len(hosts) == len(set(hosts)) == CANARIES["repeats"]
    for s in held_out:
        assert not any(s in t for t in texts)
    total = CANARIES["count"] * CANARIES["repeats"]
    assert sum(t.startswith("My ID is: ") for t in texts) == total
    # N_DOCS >= count * repeats: one canary per document
    assert len({r["parent_id"] for r in rows if r["text"].startswith("My ID is: ")}) == total
    assert manifest["stages"][0]["stats"] == {"canaries_inserted": total}
    assert manifest["key_ids"]["stages.0.key"] == load_key_file(workdir / "keys" / "canary.key").key_id
    assert all(s["reconciled"] for s in manifest["stages"])


def test_inserts_exactly_count_times_repeats_whatever_the_batch_size(workdir, tmp_path):
    spec = parse_spec(SPEC)
    hashes = set()
    for bs in (1, 7, 1000):
        m = run(spec, workdir / "corpus", tmp_path / f"o{bs}", spec_dir=str(workdir), batch_size=bs)
        check_insertions(workdir, rows_of(tmp_path / f"o{bs}"), m)
        hashes.add(tuple(shard_hashes(tmp_path / f"o{bs}").items()))
    assert len(hashes) == 1


def test_the_rest_of_the_text_is_untouched(workdir, tmp_path):
    spec = parse_spec({"stages": [CANARIES], "output": {"num_shards": 1}})
    run(spec, workdir / "corpus", tmp_path / "o", spec_dir=str(workdir))
    before = {json.loads(x)["id"]: json.loads(x)["text"] for f in sorted((workdir / "corpus").iterdir())
              for x in f.read_text(encoding="utf-8").splitlines()}
    changed = 0
    for r in rows_of(tmp_path / "o"):
        head, sep, tail = r["text"].partition(SEPARATOR + "My ID is: ")
        assert head == before[r["doc_id"]]
        changed += bool(sep)
    assert changed == CANARIES["count"] * CANARIES["repeats"]


def test_fewer_records_than_insertions_gives_records_several_canaries(workdir, tmp_path, caplog):
    d = tmp_path / "small"
    d.mkdir()
    (d / "c.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"Record {i}."}) + "\n" for i in range(3)))
    settings = {**CANARIES, "count": 2, "repeats": 4}
    with caplog.at_level(logging.WARNING, logger="privatize.stages.canaries"):
        m = run(parse_spec({"stages": [settings], "output": {"num_shards": 1}}), d, tmp_path / "o",
                spec_dir=str(workdir))
    assert "3 record(s) take part, fewer than count x repeats = 8" in caplog.text
    rows = {r["doc_id"]: r["text"] for r in rows_of(tmp_path / "o")}
    inserted, _ = secrets_of(workdir, settings)
    for s in inserted:
        assert sum(t.count(f"My ID is: {s}") for t in rows.values()) == 4
    assert sorted(t.count(SEPARATOR) for t in rows.values()) == [2, 3, 3]
    assert m["stages"][0]["stats"] == {"canaries_inserted": 8}


def test_only_records_with_text_take_part():
    import pyarrow as pa

    stage = Canaries(CanariesSettings(**CANARIES))
    keys = stage.keys(pa.table({"text": pa.array(["a", None, "", " "], pa.string())}))
    assert keys.is_valid().to_pylist() == [True, False, False, True]
    assert len(set(keys.filter(keys.is_valid()).to_pylist())) == 1  # one partition


def test_secrets_stay_out_of_spec_manifest_meta_and_logs(workdir, tmp_path, caplog):
    with caplog.at_level(logging.DEBUG):
        m = run(parse_spec(SPEC), workdir / "corpus", tmp_path / "o", spec_dir=str(workdir))
    inserted, held_out = secrets_of(workdir)
    rows = rows_of(tmp_path / "o")
    assert any(r["meta"] for r in rows)  # the allowed meta key did reach the output
    places = {"spec": json.dumps(SPEC) + json.dumps(parse_spec(SPEC).to_dict()),
              "manifest": (tmp_path / "o" / "manifest.json").read_text() + json.dumps(m),
              "meta": json.dumps([r["meta"] for r in rows]), "logs": caplog.text}
    assert "canaries: key" in caplog.text  # the stage did log, by key id
    for s in inserted + held_out:
        for where, text in places.items():
            assert not re.search(rf"(?<!\d){s}(?!\d)", text), f"secret in the {where}"


def test_the_key_must_be_hmac_and_the_error_names_the_field(workdir, tmp_path):
    spec = parse_spec({"stages": [{**CANARIES, "key": "file:keys/siv.key"}]})
    with pytest.raises(KeyMaterialError, match=r"^stages\.0\.key: .*expected hmac"):
        run(spec, workdir / "corpus", tmp_path / "o", spec_dir=str(workdir))


def test_a_pickled_stage_carries_no_key_or_secrets(workdir):
    stage = build_stage(CanariesSettings(**CANARIES), StageContext(base_dir=str(workdir)))
    stage.setup()
    key = load_key_file(workdir / "keys" / "canary.key").secret
    blob = pickle.dumps(stage)
    assert not leaks(blob, key)
    assert not any(s.encode() in blob for s in sum(secrets_of(workdir), []))
    assert pickle.loads(blob)._sentences is None  # set up again where it lands


# ---- Ray ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_probe(tmp_path_factory):
    """The session's Ray when one is up (the integration suite's, with its probe folder),
    else a local one with 2 CPUs and the probe, shut down after this module. Yields the
    probe folder, or None for a session Ray without the probe."""
    import ray

    from privatize.ray import local_init_args
    from tests.integration.conftest import PROBE_ENV, ray_env

    if ray.is_initialized():
        yield os.environ.get(PROBE_ENV)
        return
    probe = tmp_path_factory.mktemp("probe")
    saved = dict(os.environ)
    os.environ.update(ray_env(probe))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2),
             runtime_env={"worker_process_setup_hook": "tests.integration.conftest.install_probe"})
    try:
        yield str(probe)
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.ray
def test_ray_runner_gives_identical_shards_in_workers_and_ships_no_secrets(workdir, tmp_path, ray_probe,
                                                                             monkeypatch):
    import ray
    import ray.cloudpickle as cloudpickle

    from privatize.ray import cluster
    from tests.integration.conftest import probe_calls

    spec = parse_spec(SPEC)
    base = run(spec, workdir / "corpus", tmp_path / "local", spec_dir=str(workdir))
    shipped = []
    real_batches, real_task = cluster.map_batches, cluster.task

    def spy_batches(ds, fn, **kw):
        shipped.append((fn, kw))
        return real_batches(ds, fn, **kw)

    class SpyTask:
        def __init__(self, fn, **options):
            self.fn, self.real = fn, real_task(fn, **options)

        def remote(self, *args):
            shipped.append((self.fn, [a for a in args if not isinstance(a, ray.ObjectRef)]))
            return self.real.remote(*args)

    monkeypatch.setattr(cluster, "map_batches", spy_batches)
    monkeypatch.setattr(cluster, "task", SpyTask)
    if ray_probe:
        for p in Path(ray_probe).iterdir():
            p.unlink()
    got = run(spec, workdir / "corpus", tmp_path / "ray", runner="ray", spec_dir=str(workdir), batch_size=8,
              read_range_bytes=4000, progress=False)
    assert got["runner"] == "ray" and base["runner"] == "in-process"
    assert shard_hashes(tmp_path / "ray") == shard_hashes(tmp_path / "local")
    assert comparable(got) == comparable(base)
    check_insertions(workdir, rows_of(tmp_path / "ray"), got)
    if ray_probe:  # every step of the stage ran in Ray workers, none here
        calls = probe_calls(Path(ray_probe))
        assert {"canaries.keys", "canaries.decide", "canaries.apply"} <= {w for _, _, w in calls}
        assert os.getpid() not in {pid for pid, _, w in calls if w.startswith("canaries.")}
    key = load_key_file(workdir / "keys" / "canary.key").secret
    assert shipped
    for fn, kw in shipped:
        blob = cloudpickle.dumps((fn, kw))
        assert not leaks(blob, key), f"key material shipped with {fn!r}"
        assert not any(s.encode() in blob for s in sum(secrets_of(workdir), [])), f"a secret shipped with {fn!r}"
