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


# ---- issue 53, item 3: every training and evaluation setting that sizes a worker has a quota ---

_TRAIN = {"kind": "pretrain", "data": {"seq_len": 32}, "optim": {"batch_size": 4, "max_steps": 4}}
_DP = {**_TRAIN, "kind": "dp", "dp": {"noise_multiplier": 1.0}}
_LORA = {**_TRAIN, "kind": "continue", "model": {"preset": None, "checkpoint": "training:0123456789abcdef",
                                                  "lora": {"r": 8}}}
_EVAL = {"models": [{"name": "m", "training_id": "0123456789abcdef"}],
         "perplexity": {"data": {"corpus_id": "2222222222222222"}, "limit": 20}}
_CANARIES = {"key": "keystore:k", "digits": 3, "count": 2, "held_out": 2}


def _set(base: dict, path: str, value) -> dict:
    out = copy.deepcopy(base)
    node = out
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return out


# (config, field path, value within the config's own bound but over the service's quota)
TRAIN_OVER_QUOTAS = [
    (_DP, "dp.batch_size", 4096),                   # was bounded only by the config's 4096, not the 256 of optim
    (_set(_DP, "audit", {}), "audit.canaries", 100_000),  # had no quota at all
    (_set(_TRAIN, "workers.threads_per_worker", 4), "workers.cpus_per_worker", 0.0001),  # 4 threads on 1/10^4 CPU
    (_TRAIN, "workers.cpus_per_worker", 0.5),       # one thread (the least) on half a CPU
    (_set(_TRAIN, "workers.threads_per_worker", 4), "workers.cpus_per_worker", 2),
    (_TRAIN, "tokenizer.max_entity_tokens", 100_000),
    (_LORA, "model.lora.r", 1024),
]
EVAL_OVER_QUOTAS = [
    (_EVAL, "scoring.batch_tokens", 1 << 22),       # a batch's logits: 4M tokens x the vocabulary
    (_set(_EVAL, "canaries", _CANARIES), "canaries.count", 1000),
    (_set(_EVAL, "canaries", _CANARIES), "canaries.held_out", 1000),
]


def _train_refusal(config, settings=None) -> list[tuple[str, str]]:
    from services.trainings import check_limits, validate_config

    with pytest.raises(SpecInvalid) as ei:
        check_limits(settings or Settings(), validate_config(config))
    return [(e["path"], e["message"]) for e in ei.value.extra["errors"]]


@pytest.mark.parametrize("config,path,value", TRAIN_OVER_QUOTAS)
def test_training_settings_that_size_a_worker_answer_422_over_http(api, config, path, value):
    client, _, _, engine = api
    r = client.post("/v1/trainings", json={"job_id": "nonexistent", "config": _set(config, path, value)})
    assert r.status_code == 422, r.text
    assert [e["path"] for e in r.json()["errors"]] == [path], r.json()
    assert r.json()["detail"].startswith(f"{path}: ") and "on this service" in r.json()["detail"]
    assert _jobs(engine) == 0


@pytest.mark.parametrize("config,path,value", EVAL_OVER_QUOTAS)
def test_evaluation_settings_that_size_a_worker_answer_422_over_http(api, config, path, value):
    client, _, _, engine = api
    r = client.post("/v1/evaluations", json={"config": _set(config, path, value)})
    assert r.status_code == 422, r.text
    assert [e["path"] for e in r.json()["errors"]] == [path], r.json()
    assert "on this service" in r.json()["detail"]
    assert _jobs(engine) == 0


def test_the_quotas_come_from_the_settings_and_within_them_configs_pass():
    from services.evaluations import check_limits as eval_limits, validate_config as eval_config
    from services.trainings import check_limits, validate_config

    # dp.batch_size shares optim.batch_size's quota, the service's batch limit
    dp = _set(_DP, "dp.batch_size", 300)
    assert _train_refusal(dp) == [("dp.batch_size", "at most 256 on this service (asked for 300)")]
    check_limits(Settings(train_max_batch_size=300), validate_config(dp))
    check_limits(Settings(), validate_config(_set(_DP, "dp.batch_size", 256)))
    # the CPUs of a worker: at least one per thread, at most the service's
    assert _train_refusal(_set(_set(_TRAIN, "workers.threads_per_worker", 4), "workers.cpus_per_worker", 0.0001)) \
        == [("workers.cpus_per_worker", "at least 4 on this service (asked for 0.0001): one CPU for each of the "
                                        "worker's 4 thread(s) (workers.threads_per_worker; default: 1 below one CPU)")]
    for cpus, threads in ((1, None), (2, None), (4, 4), (3.5, 2)):
        cfg = _set(_TRAIN, "workers.cpus_per_worker", cpus)
        check_limits(Settings(), validate_config(_set(cfg, "workers.threads_per_worker", threads) if threads else cfg))
    assert [p for p, _ in _train_refusal(_set(_TRAIN, "workers.cpus_per_worker", 8))] == ["workers.cpus_per_worker"]
    # audit canaries and the LoRA rank: their own settings
    audit = _set(_set(_DP, "audit", {}), "audit.canaries", 20_000)
    assert [p for p, _ in _train_refusal(audit)] == ["audit.canaries"]
    check_limits(Settings(train_max_audit_canaries=20_000), validate_config(audit))
    lora = _set(_LORA, "model.lora.r", 128)
    assert [p for p, _ in _train_refusal(lora)] == ["model.lora.r"]
    check_limits(Settings(train_max_lora_rank=128), validate_config(lora))
    # conditional quotas hold only where they apply: max_blocks_per_individual for unit individual
    check_limits(Settings(), validate_config(_set(_DP, "dp.max_blocks_per_individual", 300)))
    # evaluations: batch tokens, canaries
    big = _set(_EVAL, "scoring.batch_tokens", 1 << 17)
    with pytest.raises(SpecInvalid):
        eval_limits(Settings(), eval_config(big))
    eval_limits(Settings(eval_max_batch_tokens=1 << 17), eval_config(big))
    eval_limits(Settings(), eval_config(_set(_EVAL, "canaries", {**_CANARIES, "count": 100, "held_out": 100})))
    extrapolated = _set(_EVAL, "canaries", {**_CANARIES, "digits": 9, "method": "extrapolated", "sample": 10_000})
    eval_limits(Settings(), eval_config(extrapolated))  # digits: exact's quota only


def _bound(field) -> float | None:
    for m in field.metadata:
        for attr in ("le", "max_length"):
            if getattr(m, attr, None) is not None:
                return getattr(m, attr)
    return None


def test_every_quota_is_declared_on_a_field_and_stays_within_its_bound():
    """The quotas of trainings and evaluations are ``Quota`` markers on the config fields,
    as the stages' are: every ``train_max_*`` and ``eval_max_*`` number the service has is
    declared on a field, and its default is within that field's own bound."""
    from attacks.config import AttackConfig
    from privatize.adapt_job import AdaptConfig
    from privatize.policy import Quota, _models, marked_fields
    from train.config import TrainConfig

    declared: dict[str, list] = {}
    for model in (TrainConfig, AttackConfig, AdaptConfig):
        for path, m in marked_fields(model, (Quota,)):
            declared.setdefault(m.setting, []).append((model, path))
    for name, info in Settings.model_fields.items():
        if name.startswith(("train_max_", "eval_max_", "detector_max_")):
            assert name in declared, f"{name} is declared on no config field"
    for setting, where in declared.items():
        for model, path in where:
            holder = model
            for part in path[:-1]:
                holder = _models(holder.model_fields[part].annotation)[0]
            bound = _bound(holder.model_fields[path[-1]])
            assert bound is not None, path
            assert Settings.model_fields[setting].default <= bound, (setting, path, bound)
