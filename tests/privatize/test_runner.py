import hashlib
import hmac
import json
import os
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privatize.ciphers.vigenere import Vigenere
from privatize.errors import InputError, OutputError, RecordError
from privatize.keys import load_key_file, new_key, write_key_file
from privatize.output import shard_of, verify
from privatize import run
from privatize.spec import parse_spec


@pytest.fixture()
def keys(tmp_path):
    d = tmp_path / "keys"
    write_key_file(new_key("vigenere", length=10), d / "text.key")
    write_key_file(new_key("hmac"), d / "p.key")
    return d


def _spec(**output):
    return parse_spec({"stages": [{"kind": "encrypt_text", "key": "file:keys/text.key"}],
                       "output": {"num_shards": 4, **output}})


def _corpus(path, n=25, extra=""):
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Doc {i}: Alice met Bob.", "individual_id": f"p{i % 4}",
                                        "source": "crm", "ssn": "078-05-1120"}) + "\n" for i in range(n)) + extra,
                    encoding="utf-8")
    return path


def _rows(out):
    return [r for p in sorted((out / "shards").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_output_decrypts_to_input_and_layout_is_deterministic(tmp_path, keys):
    corpus = _corpus(tmp_path / "c.jsonl")
    hashes = set()
    for bs in (1, 7, 1000):
        out = tmp_path / f"out{bs}"
        m = run(_spec(), corpus, out, spec_dir=str(tmp_path), batch_size=bs)
        hashes.add(tuple(s["sha256"] for s in m["shards"]))
        assert verify(out) == []
    assert len(hashes) == 1
    v = Vigenere.from_key(load_key_file(keys / "text.key"))
    rows = _rows(tmp_path / "out7")
    assert sorted(v.decrypt(r["text"]) for r in rows) == sorted(f"Doc {i}: Alice met Bob." for i in range(25))
    # fixed file names, rows sorted by doc_id within each shard
    names = sorted(p.name for p in (tmp_path / "out7" / "shards").iterdir())
    assert names == [f"part-{i:05d}-of-00004.parquet" for i in range(4)]
    for p in (tmp_path / "out7" / "shards").iterdir():
        ids = pq.read_table(p)["doc_id"].to_pylist()
        assert ids == sorted(ids)


def _blake2b_shard(doc_id: str, n: int) -> int:
    # the documented layout, computed here one id at a time
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little") % n


def test_each_row_sits_in_the_shard_of_its_doc_id_hash(tmp_path, keys):
    corpus = _corpus(tmp_path / "c.jsonl")
    run(_spec(), corpus, tmp_path / "out", spec_dir=str(tmp_path))
    placed = 0
    for i, p in enumerate(sorted((tmp_path / "out" / "shards").iterdir())):
        for doc_id in pq.read_table(p)["doc_id"].to_pylist():
            assert _blake2b_shard(doc_id, 4) == i, doc_id
            placed += 1
    assert placed == 25


def test_shard_of_arrow_ids_slices_and_lists_agree_with_the_formula():
    ids = ["a", "doc-1#0", "Zoë 東京", "", "x" * 300] + [f"d{k}" for k in range(200)]
    want = [_blake2b_shard(d, 7) for d in ids]
    assert shard_of(ids, 7).tolist() == want
    arr = pa.array(ids)
    assert shard_of(arr, 7).tolist() == want
    assert shard_of(arr.slice(3, 50), 7).tolist() == want[3:53]  # an array with an offset
    chunked = pa.chunked_array([arr.slice(0, 10), arr.slice(10)])
    assert shard_of(chunked, 7).tolist() == want
    assert shard_of(pa.array(ids, pa.large_string()), 7).tolist() == want
    assert shard_of([], 7).tolist() == [] and shard_of(pa.array([], pa.string()), 7).tolist() == []


def test_meta_allow_list_and_individual_pseudonyms(tmp_path, keys):
    corpus = _corpus(tmp_path / "c.jsonl", n=6)
    run(_spec(meta_keys=["source"], pseudonym_key="file:keys/p.key"), corpus, tmp_path / "o",
                 spec_dir=str(tmp_path))
    rows = {r["doc_id"]: r for r in _rows(tmp_path / "o")}
    key = load_key_file(keys / "p.key").secret
    assert rows["d5"]["individual_id"] == hmac.new(key, b"p1", hashlib.sha256).hexdigest()[:32]
    assert json.loads(rows["d5"]["meta"]) == {"source": "crm"}  # ssn is not on the allow-list
    run(_spec(), corpus, tmp_path / "o2", spec_dir=str(tmp_path))
    rows = _rows(tmp_path / "o2")
    assert all(r["individual_id"] is None and r["meta"] is None for r in rows)
    blob = b"".join(p.read_bytes() for p in (tmp_path / "o2").rglob("*") if p.is_file())
    assert b"078-05-1120" not in blob and b'"p1"' not in blob


def test_quarantine_outside_output_mode_0600_and_counted(tmp_path, keys):
    corpus = _corpus(tmp_path / "c.jsonl", n=5, extra='{"id": "d1", "text": "dup id"}\n{bad json\n')
    m = run(_spec(), corpus, tmp_path / "o", spec_dir=str(tmp_path))
    q = tmp_path / "o.quarantine.jsonl"
    assert m["quarantine"] == {"path": str(q), "records": 2}
    assert stat.S_IMODE(os.stat(q).st_mode) == 0o600
    reasons = [json.loads(line)["reason"] for line in q.read_text().splitlines()]
    assert reasons[0].startswith("duplicate doc_id") and reasons[1].startswith("invalid JSON")
    assert m["counts"] == {"input_records": 7, "read_quarantined": 2, "output_records": 5, "quarantined": 2,
                           "dropped": 0}
    st = m["stages"][0]
    assert st["records_in"] == 5 and st["records_out"] == 5 and st["reconciled"]
    assert st["stats"]["chars_encrypted"] == sum(len(f"Doc {i}: Alice met Bob.") for i in range(5))
    assert not any((tmp_path / "o").rglob("*quarantine*"))


def test_strict_makes_record_problems_errors_and_writes_nothing(tmp_path, keys):
    corpus = _corpus(tmp_path / "c.jsonl", n=3, extra="{bad json\n")
    with pytest.raises(RecordError, match=r"c.jsonl:4: invalid JSON"):
        run(_spec(), corpus, tmp_path / "o", spec_dir=str(tmp_path), strict=True)
    assert not (tmp_path / "o").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".o")] == []


def test_file_level_error_in_a_later_file_leaves_no_output(tmp_path, keys):
    d = tmp_path / "in"
    d.mkdir()
    _corpus(d / "a.jsonl", n=3)
    (d / "b.jsonl").write_text("")
    with pytest.raises(InputError, match="b.jsonl: file is empty"):
        run(_spec(), d, tmp_path / "o", spec_dir=str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "in", "keys"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["in", "keys"]


def test_overwrite_replaces_atomically(tmp_path, keys):
    corpus = _corpus(tmp_path / "c.jsonl", n=3)
    run(_spec(), corpus, tmp_path / "o", spec_dir=str(tmp_path))
    with pytest.raises(OutputError, match="exists"):
        run(_spec(), corpus, tmp_path / "o", spec_dir=str(tmp_path))
    run(_spec(), _corpus(corpus, n=4), tmp_path / "o", spec_dir=str(tmp_path), overwrite=True)
    assert len(_rows(tmp_path / "o")) == 4 and verify(tmp_path / "o") == []


def test_verify_finds_missing_extra_and_changed_files(tmp_path, keys):
    out = tmp_path / "o"
    run(_spec(), _corpus(tmp_path / "c.jsonl"), out, spec_dir=str(tmp_path))
    (out / "shards" / "extra.parquet").write_bytes(b"x")
    assert any("not listed" in p for p in verify(out))
    (out / "shards" / "extra.parquet").unlink()
    (out / "shards" / "part-00000-of-00004.parquet").unlink()
    assert any("missing" in p for p in verify(out))
    (out / "manifest.json").unlink()
    assert verify(out) == [f"{out / 'manifest.json'}: missing"]
