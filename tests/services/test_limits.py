"""Resource settings are bounded twice: absolutely on the settings models (pydantic
bounds on every number that sizes memory, CPU or time), and per tenant by the service's
quotas (``PRIVATIZE_PIPELINE_*``, ``PRIVATIZE_TRAIN_*``). A spec over either answers 422
naming the field path, stores nothing and runs nothing; the connection stays usable.

In process: FastAPI's TestClient on SQLite with a Ray address nothing answers on, so no
job could run even if one were admitted."""

from __future__ import annotations

import copy
import math

import pytest
from pydantic import BaseModel

from privatize.errors import SpecError
from privatize.spec import OutputSettings, PipelineSpec, parse_spec
from privatize.stages.dedup import DedupSettings
from privatize.stages.redact import RedactSettings
from services.errors import SpecInvalid
from services.limits import check_pipeline_limits
from services.settings import Settings
from services.specs import validate_spec

SPLIT = {"kind": "split"}
BASE = {"stages": [SPLIT, {"kind": "dedup"}, {"kind": "split_private"}], "output": {"num_shards": 4}}


def _spec(**stage1) -> dict:
    d = copy.deepcopy(BASE)
    d["stages"][1].update(stage1)
    return d


def _with_output(**out) -> dict:
    d = copy.deepcopy(BASE)
    d["output"].update(out)
    return d


def _redact(batch_size: int) -> dict:
    return {"stages": [SPLIT, {"kind": "redact", "batch_size": batch_size}, {"kind": "split_private"}]}


def _stages(n: int) -> dict:
    return {"stages": [SPLIT] + [{"kind": "redact"}] * (n - 2) + [{"kind": "split_private"}]}


# (spec, the field path the refusal names): over the models' own bounds
OVER_MODEL_BOUNDS = [
    (_spec(method="bloom", bloom_capacity=3e10, bloom_fp_rate=1e-9), "stages.1.dedup.bloom_capacity"),
    (_spec(method="bloom", bloom_capacity=1e15), "stages.1.dedup.bloom_capacity"),
    (_spec(method="bloom", bloom_fp_rate=1e-13), "stages.1.dedup.bloom_fp_rate"),
    (_spec(min_length=10**7), "stages.1.dedup.min_length"),
    (_with_output(num_shards=4097), "output.num_shards"),
    (_with_output(meta_keys=[f"k{i}" for i in range(65)]), "output.meta_keys"),
    (_redact(10_001), "stages.1.redact.batch_size"),
    (_stages(33), "stages"),
]

# over the service's default quotas, within the models' bounds
OVER_QUOTAS = [
    (_spec(method="bloom", bloom_capacity=10**10, bloom_fp_rate=1e-9), "stages.1.bloom_capacity"),
    (_spec(method="bloom", bloom_capacity=400_000_000), "stages.1.bloom_capacity"),  # 1.3 GiB at 1e-6
    (_with_output(num_shards=257), "output.num_shards"),
    (_redact(1001), "stages.1.batch_size"),
    (_stages(17), "stages"),
]


@pytest.mark.parametrize("data,path", OVER_MODEL_BOUNDS)
def test_every_number_is_bounded_on_the_settings_models(data, path):
    with pytest.raises(SpecError) as ei:
        parse_spec(data)
    assert path in [".".join(loc) for loc, _ in ei.value.field_errors], ei.value


@pytest.mark.parametrize("data,path", OVER_QUOTAS)
def test_quotas_name_the_field(data, path):
    with pytest.raises(SpecInvalid) as ei:
        check_pipeline_limits(Settings(), validate_spec(data))
    assert [e["path"] for e in ei.value.extra["errors"]] == [path]
    assert ei.value.message.startswith(f"{path}: ") and "on this service" in ei.value.message


def test_bloom_quota_is_computed_from_capacity_and_fp_rate_over_the_whole_job():
    s = Settings(pipeline_max_bloom_bytes=64 << 20)
    one = validate_spec(_spec(method="bloom", bloom_capacity=10_000_000, bloom_fp_rate=1e-6))
    need = one.stages[1].bloom_memory_bytes()
    assert 30 << 20 < need < 40 << 20  # 64 filters of 156250 items, 20 hash functions' worth of bits
    expected = 64 * math.ceil(-math.ceil(10_000_000 / 64) * math.log(1e-6) / math.log(2) ** 2 / 8)
    assert abs(need - expected) <= 64
    check_pipeline_limits(s, one)  # 34 MiB: within
    check_pipeline_limits(s, validate_spec(_spec()))  # sha1: no filter at all
    two = copy.deepcopy(_spec(method="bloom", bloom_capacity=10_000_000, bloom_fp_rate=1e-6))
    two["stages"].insert(2, {"kind": "dedup", "method": "bloom", "unit": "segment", "bloom_capacity": 10_000_000})
    with pytest.raises(SpecInvalid) as ei:  # two such stages: 69 MiB for the job
        check_pipeline_limits(s, validate_spec(two))
    assert [e["path"] for e in ei.value.extra["errors"]] == ["stages.1.bloom_capacity", "stages.2.bloom_capacity"]
    assert "for the job" in ei.value.message
    # raising the quota admits it
    check_pipeline_limits(Settings(pipeline_max_bloom_bytes=1 << 30), validate_spec(two))


def _le(model: type[BaseModel], field: str):
    for m in model.model_fields[field].metadata:
        if getattr(m, "le", None) is not None:
            return m.le
    return None


def test_service_quotas_stay_within_the_models_bounds():
    from train.config import DataConfig, OptimConfig, TokenizerConfig, TrainConfig, WorkersConfig

    pairs = [("pipeline_max_shards", _le(OutputSettings, "num_shards")),
             ("pipeline_max_redact_batch_size", _le(RedactSettings, "batch_size")),
             ("train_max_workers", _le(WorkersConfig, "num_workers")),
             ("train_max_cpus_per_worker", _le(WorkersConfig, "cpus_per_worker")),
             ("train_max_steps", _le(OptimConfig, "max_steps")),
             ("train_max_epochs", _le(OptimConfig, "epochs")),
             ("train_max_batch_size", _le(OptimConfig, "batch_size")),
             ("train_max_seq_len", _le(DataConfig, "seq_len")),
             ("train_max_vocab_size", _le(TokenizerConfig, "vocab_size")),
             ("train_max_failures", _le(TrainConfig, "max_failures"))]
    stages_bound = next(m.max_length for m in PipelineSpec.model_fields["stages"].metadata
                        if getattr(m, "max_length", None) is not None)
    pairs.append(("pipeline_max_stages", stages_bound))
    top = DedupSettings(method="bloom", bloom_capacity=_le(DedupSettings, "bloom_capacity"),
                        bloom_fp_rate=1e-12).bloom_memory_bytes()
    pairs.append(("pipeline_max_bloom_bytes", top))
    for name, bound in pairs:
        assert bound is not None, name
        assert Settings.model_fields[name].default <= bound, (name, bound)
        # a quota can be raised at most to the model's bound (beyond it the model refuses
        # first); Bloom memory is summed over a job's stages, so one stage's top is the floor
        if name != "pipeline_max_bloom_bytes":
            assert _le(Settings, name) == bound, (name, _le(Settings, name), bound)
        else:
            assert _le(Settings, name) >= bound


# ---- over HTTP: 422 naming the field, nothing stored, the connection usable -----------------

def _stored(settings) -> list[str]:
    root = settings.data_path / "storage"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".spool" not in p.parts)


def _jobs(engine) -> int:
    from sqlalchemy import text

    with engine.connect() as c:
        return c.execute(text("select count(*) from jobs")).scalar_one()


def test_specs_over_a_limit_answer_422_and_store_nothing(api):
    client, corpus_id, settings, engine = api
    before = _stored(settings)
    for data, path in OVER_MODEL_BOUNDS + OVER_QUOTAS:
        r = client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": data})
        assert r.status_code == 422, (path, r.text)
        body = r.json()
        assert path in [e["path"] for e in body["errors"]], (path, body)
        assert path in body["detail"]
    # a training config over the service's quota: refused before the job it names is looked up
    r = client.post("/v1/trainings", json={"job_id": "nonexistent", "config": {
        "kind": "pretrain", "optim": {"max_steps": 200_000}, "workers": {"num_workers": 3}}})
    assert r.status_code == 422, r.text
    assert sorted(e["path"] for e in r.json()["errors"]) == ["optim.max_steps", "workers.num_workers"]
    assert _jobs(engine) == 0
    assert _stored(settings) == before  # the corpus only: no spec, no key bundle, no output
    assert client.get("/v1/jobs").json() == []  # the same connection still answers
    # within every quota the same tenant's job is admitted (it stays queued: no Ray here)
    r = client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": _spec(method="bloom",
                                                                          bloom_capacity=1_000_000)})
    assert r.status_code == 201, r.text
    assert _jobs(engine) == 1


def test_nul_bytes_in_parameters_answer_422_naming_them(api):
    """Hypothesis found ``GET /v1/jobs?corpus_id=<NUL>`` answering 500 on PostgreSQL (which
    refuses NUL in text): every query or path parameter is checked before any query."""
    client, corpus_id, _settings, _engine = api
    for url, name in (("/v1/jobs?corpus_id=ab%00cd", "corpus_id"), ("/v1/jobs?kind=x%00", "kind"),
                      ("/v1/corpora/ab%00cd", "corpus_id"), ("/v1/audit?action=a%00", "action")):
        r = client.get(url)
        assert r.status_code == 422, (url, r.status_code, r.text)
        assert name in r.json()["detail"]
    r = client.get(f"/v1/jobs?corpus_id={corpus_id}")  # a real id still lists
    assert r.status_code == 200 and r.json() == []
    assert client.get("/v1/jobs?corpus_id=%ED%A0%80").status_code == 200  # invalid UTF-8: decoded to U+FFFD


def test_dp_configs_the_red_team_sent_answer_422_at_the_field(api):
    """Issue 36: sigma 0.06 ran a worker at 4.4 GB, target epsilon 1000 planned for 200 s in
    5 GB, poisson: false changed the sampler but not the accounting; all were admitted."""
    client, _, _, engine = api
    for dp, path in (({"noise_multiplier": 0.06}, "dp.noise_multiplier"),
                     ({"target_epsilon": 1000}, "dp.target_epsilon"),
                     ({"noise_multiplier": 1.0, "delta": 0.999}, "dp.delta"),
                     ({"noise_multiplier": 1.0, "poisson": False}, "dp"),
                     ({"noise_multiplier": 0.0, "no_guarantee": True}, "dp.no_guarantee")):
        r = client.post("/v1/trainings", json={"job_id": "j", "config": {"kind": "dp", "dp": dp}})
        assert r.status_code == 422, r.text
        assert path in [e["path"] for e in r.json()["errors"]], r.json()
    assert _jobs(engine) == 0
