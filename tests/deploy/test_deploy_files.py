"""The deployment files, checked statically (no Docker engine or Kubernetes here): they
parse, every ``PRIVATIZE_*`` variable is a real setting, image and ports agree across
the Dockerfile, docker-compose.yml, the KubeRay manifests and Prometheus, probes name
real routes, the dashboard's metrics exist, and no secret is written in them."""

from __future__ import annotations

import json
import re
import shlex
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "k8s"
PROMETHEUS = DEPLOY / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "privatize.json"
SECRETS_EXAMPLE = K8S / "secrets.example.yaml"
IMAGE = "privatize:latest"
# compose services that run the privatize image
PRIVATIZE_SERVICES = ("api", "ray-head", "ray-worker", "privatize")
SERVERS = ("api", "ray-head", "ray-worker")  # need the master key
EXPECTED_FILES = [COMPOSE, DOCKERFILE, PROMETHEUS, DASHBOARD, K8S / "raycluster.yaml", K8S / "rayjob.yaml",
                  K8S / "api.yaml", SECRETS_EXAMPLE, DEPLOY / "grafana" / "provisioning" / "datasources",
                  DEPLOY / "grafana" / "provisioning" / "dashboards"]
RAY_METRICS = ("ray_node_cpu_utilization", "ray_node_mem_used", "ray_object_store_memory", "ray_tasks", "ray_actors")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|KEY|CREDENTIAL", re.I)
REQUIRED_SUBST = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:\?[^}]*\}")
PLACEHOLDER = "REPLACE_ME"


# ---- loading -------------------------------------------------------------------------

def yaml_files() -> list[Path]:
    return [COMPOSE] + sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml"))


@cache
def docs(path: Path) -> tuple:
    return tuple(d for d in yaml.safe_load_all(path.read_text()) if d is not None)


def compose() -> dict:
    return docs(COMPOSE)[0]


def services() -> dict:
    return compose()["services"]


def k8s_docs(include_example: bool = False) -> list[dict]:
    return [d for p in sorted(K8S.glob("*.y*ml")) if include_example or p != SECRETS_EXAMPLE for d in docs(p)]


def k8s_kind(kind: str) -> list[dict]:
    return [d for d in k8s_docs() if d.get("kind") == kind]


def walk(obj):
    """Every dict in a nested structure."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def containers(obj) -> list[dict]:
    """Every container (init containers included) in a manifest."""
    return [c for d in walk(obj) for key in ("containers", "initContainers") for c in d.get(key) or []]


def env_dict(env) -> dict[str, str]:
    """A compose ``environment`` (mapping or list of K=V) as a dict."""
    if env is None:
        return {}
    if isinstance(env, dict):
        return {k: "" if v is None else str(v) for k, v in env.items()}
    return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)


def argv(cmd) -> list[str]:
    return shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd or []]


def flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def dockerfile_lines() -> list[str]:
    """Instructions, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.strip().startswith("#"):
            continue
        cur += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            if cur.strip():
                out.append(cur.strip())
            cur = ""
    return out


def dockerfile_env() -> dict[str, str]:
    env = {}
    for line in dockerfile_lines():
        if line.upper().startswith("ENV "):
            for tok in shlex.split(line[4:]):
                k, _, v = tok.partition("=")
                env[k] = v
    return env


def exposed_ports() -> set[int]:
    ports = set()
    for line in dockerfile_lines():
        if line.upper().startswith("EXPOSE "):
            ports |= {int(p.split("/")[0]) for p in line.split()[1:]}
    return ports


def compose_container_port(spec) -> int:
    if isinstance(spec, dict):
        return int(spec["target"])
    return int(str(spec).split("/")[0].rsplit(":", 1)[-1])


def raycluster() -> dict:
    (rc,) = k8s_kind("RayCluster")
    return rc


def ray_clusters() -> list[tuple[str, dict]]:
    """(name, RayCluster spec) of the RayCluster and the RayJob's own cluster."""
    out = [(raycluster()["metadata"]["name"], raycluster()["spec"])]
    out += [(j["metadata"]["name"], j["spec"]["rayClusterSpec"]) for j in k8s_kind("RayJob")
            if "rayClusterSpec" in j["spec"]]
    return out


def api_deployment() -> dict:
    (dep,) = [d for d in k8s_kind("Deployment") if d["metadata"]["name"] == "privatize-api"]
    return dep


def api_container() -> dict:
    (c,) = [c for c in api_deployment()["spec"]["template"]["spec"]["containers"] if c["name"] == "api"]
    return c


def k8s_env(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c.get("env") or []}


def settings_env_names() -> set[str]:
    from services.settings import ClientSettings, Settings, WorkerSettings

    return {"PRIVATIZE_" + name.upper() for cls in (Settings, WorkerSettings, ClientSettings)
            for name in cls.model_fields}


def deploy_texts() -> dict[Path, str]:
    return {p: p.read_text() for p in [COMPOSE, DOCKERFILE, *yaml_files()[1:]]}


# ---- the files parse ----------------------------------------------------------------

def test_files_exist_and_every_yaml_parses():
    for p in EXPECTED_FILES:
        assert p.exists(), p
    for p in yaml_files():
        loaded = docs(p)
        assert loaded and all(isinstance(d, dict) for d in loaded), f"{p}: empty or not a mapping"
    for p in (ROOT / "deploy" / "grafana" / "provisioning").rglob("*.y*ml"):
        assert docs(p)[0]["apiVersion"] == 1, p
    for d in k8s_docs(include_example=True):
        assert {"apiVersion", "kind", "metadata"} <= d.keys(), d.get("kind")


def test_grafana_dashboard_parses_and_uses_the_prometheus_variable():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["schemaVersion"] >= 36 and dash["title"] and dash["uid"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    panels = [p for p in walk(dash["panels"]) if p.get("type") not in (None, "row") and "targets" in p]
    assert panels
    for p in panels:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
        assert p["targets"] and all(t.get("expr") for t in p["targets"]), p["title"]
    ids = [p["id"] for p in walk(dash["panels"]) if "gridPos" in p]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    provider = docs(DEPLOY / "grafana" / "provisioning" / "dashboards" / "privatize.yml")[0]["providers"][0]
    mounts = [v for v in services()["grafana"]["volumes"] if v.startswith("./deploy/grafana/privatize.json:")]
    assert mounts and mounts[0].split(":")[1].startswith(provider["options"]["path"] + "/")


# ---- settings, image, ports ----------------------------------------------------------

def test_every_privatize_variable_is_a_setting():
    known = settings_env_names()
    assert "PRIVATIZE_RAY_ADDRESS" in known and "PRIVATIZE_MASTER_KEY_FILE" in known
    named: dict[str, str] = {}
    for name, svc in services().items():
        named |= {k: f"compose {name}" for k in env_dict(svc.get("environment"))}
    for d in k8s_docs():
        named |= {e["name"]: f"{d['kind']} {d['metadata']['name']}" for c in containers(d) for e in c.get("env") or []}
    named |= {k: "Dockerfile" for k in dockerfile_env()}
    # and anywhere in the text (comments, commands)
    for p, text in deploy_texts().items():
        named |= {m: str(p.relative_to(ROOT)) for m in re.findall(r"\bPRIVATIZE_[A-Z0-9_]*[A-Z0-9]", text)}
    used = {k: v for k, v in named.items() if k.startswith("PRIVATIZE_")}
    assert {"PRIVATIZE_DATABASE_URL", "PRIVATIZE_RAY_ADDRESS", "PRIVATIZE_MASTER_KEY_FILE"} <= used.keys()
    unknown = {k: v for k, v in used.items() if k not in known}
    assert not unknown, f"not a field of Settings/WorkerSettings/ClientSettings: {unknown}"


def test_one_privatize_image_everywhere():
    for name in PRIVATIZE_SERVICES:
        svc = services()[name]
        assert svc["image"] == IMAGE, name
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILE, name
    images = {svc["image"] for svc in services().values() if "image" in svc and "privatize" in svc["image"]}
    assert images == {IMAGE}
    k8s_images = {c["image"] for d in k8s_docs() for c in containers(d)}
    assert k8s_images == {IMAGE}, k8s_images
    # the Deployment, the RayCluster's head and workers, the RayJob's cluster
    assert len(containers(api_deployment())) >= 2
    for _, spec in ray_clusters():
        assert containers(spec["headGroupSpec"]) and all(containers(g) for g in spec["workerGroupSpecs"])


def test_the_dockerfile_exposes_every_port_the_deployments_use():
    exposed = exposed_ports()
    assert {8000, 8265, 6379, 8080} <= exposed
    used: dict[int, str] = {}
    for name in PRIVATIZE_SERVICES:
        svc = services()[name]
        used |= {compose_container_port(p): f"compose {name} ports" for p in svc.get("ports") or []}
        args = argv(svc.get("command"))
        for f in ("--port", "--dashboard-port", "--metrics-export-port"):
            if flag(args, f):
                used[int(flag(args, f))] = f"compose {name} {f}"
    for d in k8s_docs():
        used |= {int(p["containerPort"]): f"{d['kind']} {d['metadata']['name']}"
                 for c in containers(d) for p in c.get("ports") or []}
        for params in (x["rayStartParams"] for x in walk(d) if "rayStartParams" in x):
            used |= {int(v): f"{d['kind']} rayStartParams {k}" for k, v in params.items()
                     if k in ("port", "dashboard-port", "metrics-export-port")}
    missing = {p: where for p, where in used.items() if p not in exposed}
    assert not missing, f"ports used but not EXPOSEd in deploy/Dockerfile: {missing}"


def test_the_api_port_agrees_everywhere():
    from services.settings import Settings

    svc = services()["api"]
    port = int(flag(argv(svc["command"]), "--port") or Settings.model_fields["port"].default)
    assert argv(svc["command"])[:2] == ["privatize", "serve"] and flag(argv(svc["command"]), "--host") == "0.0.0.0"
    assert [compose_container_port(p) for p in svc["ports"]] == [port]
    assert f"127.0.0.1:{port}/readyz" in " ".join(svc["healthcheck"]["test"])
    # Kubernetes
    c = api_container()
    k_port = int(flag(argv(c["command"]), "--port") or Settings.model_fields["port"].default)
    assert k_port == port
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": port}
    (service,) = [d for d in k8s_kind("Service") if d["metadata"]["name"] == "privatize-api"]
    assert service["spec"]["selector"].items() <= api_deployment()["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] in (["http"], [port])
    for ann in (api_deployment()["spec"]["template"]["metadata"]["annotations"], service["metadata"]["annotations"]):
        assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == port
    # the image's default command serves the API on all interfaces
    (cmd,) = [json.loads(line[4:]) for line in dockerfile_lines() if line.upper().startswith("CMD ")]
    assert cmd[:2] == ["privatize", "serve"] and flag(cmd, "--host") == "0.0.0.0"
    assert not [line for line in dockerfile_lines() if line.upper().startswith("ENTRYPOINT")]
    assert "USER 1000" in dockerfile_lines() or "USER privatize" in dockerfile_lines()


def test_the_ray_address_is_the_heads_dashboard():
    # compose
    head = argv(services()["ray-head"]["command"])
    assert head[:3] == ["ray", "start", "--head"] and "--block" in head
    assert flag(head, "--dashboard-host") == "0.0.0.0"
    url = urlsplit(env_dict(services()["api"]["environment"])["PRIVATIZE_RAY_ADDRESS"])
    assert (url.scheme, url.hostname, url.port) == ("http", "ray-head", int(flag(head, "--dashboard-port")))
    worker = argv(services()["ray-worker"]["command"])
    assert worker[:2] == ["ray", "start"] and "--block" in worker
    assert flag(worker, "--address") == f"ray-head:{flag(head, '--port')}"
    # Kubernetes: KubeRay's head Service is `<cluster name>-head-svc`
    name, spec = ray_clusters()[0]
    params = spec["headGroupSpec"]["rayStartParams"]
    dash_port = int(params.get("dashboard-port", 8265))
    assert params["dashboard-host"] == "0.0.0.0"
    head_ports = {p["name"]: p["containerPort"] for p in containers(spec["headGroupSpec"])[0]["ports"]}
    assert head_ports["dashboard"] == dash_port and head_ports["gcs-server"] == int(params.get("port", 6379))
    url = urlsplit(k8s_env(api_container())["PRIVATIZE_RAY_ADDRESS"]["value"])
    assert (url.scheme, url.hostname, url.port) == ("http", f"{name}-head-svc", dash_port)


def test_prometheus_scrapes_the_ports_the_services_export():
    head = argv(services()["ray-head"]["command"])
    worker = argv(services()["ray-worker"]["command"])
    api_port = int(flag(argv(services()["api"]["command"]), "--port"))
    expected = {("api", api_port), ("ray-head", int(flag(head, "--metrics-export-port"))),
                ("ray-worker", int(flag(worker, "--metrics-export-port")))}
    targets = set()
    cfg = docs(PROMETHEUS)[0]
    for job in cfg["scrape_configs"]:
        for sc in job.get("static_configs") or []:
            for t in sc["targets"]:
                host, port = t.rsplit(":", 1)
                targets.add((host, int(port)))
        for sd in job.get("dns_sd_configs") or []:
            targets |= {(n, int(sd["port"])) for n in sd["names"]}
    assert targets == expected, targets
    (api_job,) = [j for j in cfg["scrape_configs"] if any("api:" in t for sc in j.get("static_configs") or []
                                                              for t in sc["targets"])]
    assert api_job.get("metrics_path", "/metrics") == "/metrics"
    # Kubernetes: the Ray pods' scrape annotations name their metrics port
    for _, spec in ray_clusters():
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            mport = int(group["rayStartParams"]["metrics-export-port"])
            assert {p["name"]: p["containerPort"] for p in containers(group)[0]["ports"]}["metrics"] == mport
            ann = group["template"].get("metadata", {}).get("annotations")
            if ann:
                assert int(ann["prometheus.io/port"]) == mport


# ---- routes and metrics --------------------------------------------------------------

def _app_has_get_route(app, path: str) -> bool:
    from starlette.routing import Match

    scope = {"type": "http", "path": path, "method": "GET", "root_path": "", "headers": [], "query_string": b"",
             "app": app}
    return any(r.matches(scope)[0] == Match.FULL for r in app.router.routes)


def test_probes_and_scrape_paths_are_routes_of_the_app():
    from services.app import create_app
    from services.settings import Settings

    app = create_app(Settings(env="development"))  # no lifespan: nothing starts
    assert not _app_has_get_route(app, "/no-such-route")
    c = api_container()
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    paths = {c["readinessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["path"],
             api_deployment()["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"]}
    paths |= {urlsplit(a).path for a in re.findall(r"http://[^'\" ]+", " ".join(
        services()["api"]["healthcheck"]["test"]))}
    paths |= {j.get("metrics_path", "/metrics") for j in docs(PROMETHEUS)[0]["scrape_configs"]
              if j["job_name"].startswith("privatize")}
    assert {"/readyz", "/healthz", "/metrics"} <= paths
    for p in paths:
        assert _app_has_get_route(app, p), f"{p} is not a GET route of services.app.create_app()"


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in walk(dash["panels"]) for t in p.get("targets") or [] if t.get("expr")]


def test_dashboard_metrics_are_the_services_metrics():
    from services.metrics import METRIC_NAMES

    exprs = " ".join(_dashboard_exprs())
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"\bprivatize_[a-z0-9_]+", exprs)}
    assert used, "no privatize_* metric in the dashboard"
    assert used <= set(METRIC_NAMES), f"not exported by the service: {used - set(METRIC_NAMES)}"
    assert set(METRIC_NAMES) <= used, f"not on the dashboard: {set(METRIC_NAMES) - used}"
    assert "histogram_quantile(0.5," in exprs and "histogram_quantile(0.99," in exprs
    assert "privatize_http_request_duration_seconds_bucket" in exprs
    assert "sum by (route, status) (rate(privatize_http_requests_total[5m]))" in exprs
    ray = set(re.findall(r"\bray_[a-z0-9_]+", exprs))
    assert set(RAY_METRICS) <= ray, set(RAY_METRICS) - ray


# ---- secrets -------------------------------------------------------------------------

def _url_password(value: str) -> str | None:
    m = re.search(r"://[^/@\s:]*:(.*)@", value)
    return m.group(1) if m else None


def test_no_literal_secrets_in_compose():
    for name, svc in services().items():
        for k, v in env_dict(svc.get("environment")).items():
            if SECRET_NAME.search(k) and not k.endswith("_FILE"):
                assert REQUIRED_SUBST.fullmatch(v), f"compose {name}: {k} must be ${{VAR:?...}}, not a literal"
            pw = _url_password(v)
            if pw is not None:
                assert REQUIRED_SUBST.fullmatch(pw), f"compose {name}: {k} holds a literal password"
    for name, sec in compose()["secrets"].items():
        assert sec.keys() & {"file", "environment"} and "content" not in sec, name
    # anything else that looks like ${VAR:-default} for a secret
    text = COMPOSE.read_text()
    assert not re.search(r"\$\{[A-Z_]*(PASSWORD|SECRET|KEY|USER)[A-Z_]*:?-", text)


def test_no_literal_secrets_in_kubernetes():
    for d in k8s_docs():
        assert d["kind"] != "Secret", f"a Secret outside secrets.example.yaml: {d['metadata']['name']}"
        for c in containers(d):
            for e in c.get("env") or []:
                if SECRET_NAME.search(e["name"]) and not e["name"].endswith("_FILE"):
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], f"{c['name']}: {e['name']}"
                if "value" in e:
                    assert _url_password(str(e["value"])) is None, f"{c['name']}: {e['name']} holds a password"


def test_the_example_secrets_are_placeholders_and_complete():
    example = {d["metadata"]["name"]: d for d in docs(SECRETS_EXAMPLE)}
    assert all(d["kind"] == "Secret" for d in example.values())
    for name, d in example.items():
        assert "data" not in d, f"{name}: use stringData with placeholders"
        assert d["stringData"], name
        for k, v in d["stringData"].items():
            assert PLACEHOLDER in str(v), f"{name}.{k} is not an obvious placeholder"
    # every Secret and key the manifests read is shown in the example
    for d in k8s_docs():
        for x in walk(d):
            ref = x.get("secretKeyRef")
            if ref:
                assert ref["key"] in example[ref["name"]]["stringData"], ref
            if "secretName" in x:
                assert x["secretName"] in example, x["secretName"]


def test_the_master_key_is_delivered_as_a_file():
    for p, text in deploy_texts().items():
        assert not re.search(r"\bPRIVATIZE_MASTER_KEY\b(?!_FILE)", text), f"{p}: PRIVATIZE_MASTER_KEY"
    # compose: a file secret, mounted where PRIVATIZE_MASTER_KEY_FILE points
    top = compose()["secrets"]
    for name in SERVERS:
        svc = services()[name]
        path = env_dict(svc["environment"])["PRIVATIZE_MASTER_KEY_FILE"]
        secret = path.removeprefix("/run/secrets/")
        assert path.startswith("/run/secrets/") and secret in svc["secrets"], name
        assert top[secret]["file"] == "./secrets/master.key"
    # Kubernetes: a Secret volume holding the file PRIVATIZE_MASTER_KEY_FILE names
    example = {d["metadata"]["name"]: d for d in docs(SECRETS_EXAMPLE)}
    pods = [api_deployment()["spec"]["template"]["spec"]]
    spec = raycluster()["spec"]
    pods += [g["template"]["spec"] for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]]
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        for c in pod["containers"]:
            path = Path(k8s_env(c)["PRIVATIZE_MASTER_KEY_FILE"]["value"])
            mounts = [m for m in c.get("volumeMounts") or [] if Path(m["mountPath"]) == path.parent]
            assert len(mounts) == 1, f"{c['name']}: {path} is not in a mounted volume"
            mount = mounts[0]
            secret = volumes[mount["name"]]["secret"]["secretName"]
            assert secret == "privatize-master-key" and path.name in example[secret]["stringData"]
            assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True


def test_the_rayjob_runs_the_batch_entrypoint_on_s3():
    import importlib.util

    (job,) = k8s_kind("RayJob")
    args = shlex.split(job["spec"]["entrypoint"])
    assert args[:3] == ["python", "-m", "privatize.job"] and importlib.util.find_spec(args[2]) is not None
    uris = [a for a in args[3:] if not a.startswith("-")]
    assert len(uris) == 3 and all(u.startswith("s3://") for u in uris), uris
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert "rayClusterSpec" in job["spec"] or "clusterSelector" in job["spec"]
    for pod_owner in [raycluster(), job]:
        for c in containers(pod_owner):
            res = c["resources"]
            assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"], c["name"]
