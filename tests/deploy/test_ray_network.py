"""The KubeRay manifests close the Ray cluster the API uses (statically checked): Ray's
token authentication on every node, the API holding the same token as a file, and a
NetworkPolicy that lets only the Ray pods reach each other and only the API reach the
Jobs API."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.test_deploy_files import api_container, api_deployment, k8s_env, k8s_kind, raycluster


def test_every_ray_node_runs_with_token_auth_from_the_secret():
    spec = raycluster()["spec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        for c in group["template"]["spec"]["containers"]:
            env = k8s_env(c)
            assert env["RAY_AUTH_MODE"]["value"] == "token", c["name"]
            assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "privatize-ray-token",
                                                                        "key": "token"}, c["name"]


def test_the_api_sends_the_clusters_token_from_a_mounted_file():
    env = k8s_env(api_container())
    path = Path(env["PRIVATIZE_RAY_AUTH_TOKEN_FILE"]["value"])
    (mount,) = [m for m in api_container()["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    volumes = {v["name"]: v for v in api_deployment()["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mount["name"]]["secret"]["secretName"] == "privatize-ray-token" and path.name == "token"


def test_a_network_policy_admits_only_ray_pods_and_the_api_on_the_jobs_port():
    name = raycluster()["metadata"]["name"]
    (policy,) = [p for p in k8s_kind("NetworkPolicy")
                 if p["spec"]["podSelector"]["matchLabels"] == {"ray.io/cluster": name}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rules = policy["spec"]["ingress"]
    for rule in rules:
        peers = rule["from"]
        assert peers and all("ipBlock" not in p for p in peers), rule
        if any(p.get("podSelector", {}).get("matchLabels") == {"ray.io/cluster": name} for p in peers):
            continue  # Ray to Ray: any port
        assert rule.get("ports"), f"a rule open on every port to {peers}"
    api_labels = api_deployment()["spec"]["template"]["metadata"]["labels"]
    api_rules = [r for r in rules if any(p.get("podSelector", {}).get("matchLabels") == api_labels
                                         for p in r["from"])]
    assert [[pt["port"] for pt in r["ports"]] for r in api_rules] == [[8265]]
