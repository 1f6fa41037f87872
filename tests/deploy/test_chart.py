"""The Helm chart, rendered offline for a matrix of values: lint, Kubernetes' schemas
(strict), KEDA's, and what neither sees: the trigger reads the queue the workers serve,
the kill waits for the drain, the pods are locked down, the args are real CLI options."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from deploy.chart import CHART, KEDA_SCHEMA, NAMESPACE, container, helm, merged, pod_specs, render
from podium._config_checks import check_archive, check_queue, check_store
from podium.cli.main import build_parser
from podium.config import load_config
from podium.factory import worker_agents
from podium.queue.redis import queue_stream_key

kubernetes_validate = pytest.importorskip("kubernetes_validate")

KUBE_VERSION = "1.30.0"
KEDA_KINDS = ("ScaledObject", "TriggerAuthentication")

BASE: dict[str, Any] = {"redis": {"cidrs": ["10.0.12.0/24"]}}
POOLS_CONFIG = """\
[[models]]
name = "vllm"
model = "qwen"
base_url = "http://vllm.models.svc:8000/v1"

[[agents]]
path = "podium.examples.react:agent"
name = "support"
model = "vllm"
pool = "support"

[[agents]]
path = "podium.examples.react:agent"
name = "codegen"
model = "vllm"
pool = "codegen"
"""

MATRIX: dict[str, dict[str, Any]] = {
    "defaults": BASE,
    "password-and-keys": merged(BASE, {
        "redis": {"password": "s3cret"}, "auth": {"keys": "sha256:" + "ab" * 32 + "=acme"},
    }),
    "existing-secrets": merged(BASE, {
        "redis": {"existingSecret": "redis-creds", "existingSecretKey": "password"},
        "auth": {"existingSecret": "podium-api-keys"}, "prefix": "staging",
    }),
    "postgres-store": merged(BASE, {
        "postgres": {"enabled": True, "host": "pg", "password": "s3cret",
                     "cidrs": ["10.0.13.0/24"]},
    }),
    "postgres-archive": merged(BASE, {
        "postgres": {"enabled": True, "use": "archive", "host": "pg", "password": "s3cret",
                     "cidrs": ["10.0.13.0/24"]},
    }),
    "postgres-existing-secret": merged(BASE, {
        "postgres": {"enabled": True, "host": "db.data.svc", "existingSecret": "pg-creds",
                     "existingSecretKey": "password", "database": "runs", "user": "app",
                     "podSelector": {"app.kubernetes.io/name": "postgresql"},
                     "namespaceSelector": {"kubernetes.io/metadata.name": "data"}},
    }),
    # PostgreSQL alone: no Redis values at all (nothing says where Redis is, none needed)
    "postgres-only": {
        "postgres": {"enabled": True, "use": "queue", "host": "pg", "password": "s3cret",
                     "cidrs": ["10.0.13.0/24"]},
    },
    "postgres-only-pools-in-namespaces": {
        "postgres": {"enabled": True, "use": "queue", "host": "db.data.svc",
                     "existingSecret": "pg-creds", "existingSecretKey": "password",
                     "podSelector": {"app.kubernetes.io/name": "postgresql"},
                     "namespaceSelector": {"kubernetes.io/metadata.name": "data"}},
        "config": POOLS_CONFIG,
        "pools": [{"name": "support", "cpu": "1", "memory": "1Gi", "namespace": "agents-a"},
                  {"name": "codegen", "cpu": "1", "memory": "1Gi"}],
    },
    "prometheus-hpa": merged(BASE, {"autoscaling": {"mode": "prometheus"}}),
    "fixed-replicas": {
        "autoscaling": {"mode": "none"}, "networkPolicy": {"enabled": False},
        "gateway": {"autoscaling": {"enabled": False}, "pdb": {"enabled": False}},
    },
    "pinned-pools-in-namespaces": {
        "redis": {"host": "redis.data.svc", "password": "pw",
                  "podSelector": {"app.kubernetes.io/name": "redis"},
                  "namespaceSelector": {"kubernetes.io/metadata.name": "data"}},
        "sim": {"enabled": False},
        "config": POOLS_CONFIG,
        "worker": {"pinning": True, "grace": 25, "preStopSeconds": 3},
        "networkPolicy": {
            "modelBackends": [{"cidr": "10.0.40.0/24", "ports": [8000]}],
            "toolHosts": [{"cidr": "203.0.113.10/32", "ports": [443, 80]}],
        },
        "pools": [
            {"name": "support", "cpu": "4", "memory": "8Gi", "namespace": "agents-support",
             "createNamespace": True,
             "resourceQuota": {"requests.cpu": "64", "limits.memory": "256Gi", "pods": "32"},
             "keda": {"maxReplicas": 16, "targetUtilizationPercent": 75}},
            {"name": "codegen", "cpu": "2", "memory": "4Gi", "procs": 1, "concurrency": 32,
             "namespace": "agents-codegen", "grace": 40},
        ],
    },
}


@pytest.fixture(scope="module", params=sorted(MATRIX))
def case(request: pytest.FixtureRequest) -> tuple[dict[str, Any], Any]:
    values = MATRIX[request.param]
    return values, render(values)


def workers(rendered: Any) -> list[dict[str, Any]]:
    return [d for d in rendered.of("Deployment")
            if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"]


def gateway(rendered: Any) -> dict[str, Any]:
    [found] = [d for d in rendered.of("Deployment")
               if d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway"]
    return found


def env_of(c: dict[str, Any], secrets: dict[str, str] | None = None) -> dict[str, str]:
    """A container's environment, $(VAR) expanded as the kubelet does; a Secret's value is
    looked up in ``secrets`` ("NAME/KEY"), else a stand-in of the right form."""
    out: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            out[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: out.get(m[1], m[0]), e["value"])
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            stand_in = "pk_from_secret=tenant" if e["name"] == "PODIUM_KEYS" else "pw"
            out[e["name"]] = (secrets or {}).get(f"{ref['name']}/{ref['key']}", stand_in)
    return out


def secret_values(rendered: Any, namespace: str) -> dict[str, str]:
    return {f"{s['metadata']['name']}/{k}": base64.b64decode(v).decode()
            for s in rendered.of("Secret") if s["metadata"]["namespace"] == namespace
            for k, v in s["data"].items()}


def preStop_s(c: dict[str, Any]) -> int:
    command = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    if command is None:
        return 0
    assert command[0] == "sleep", command
    return int(command[1])


# -- what helm sees -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_lint_is_clean(name: str) -> None:
    report = helm.lint(str(CHART), MATRIX[name], strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == []
    # severity 2 is a warning, 3 an error; 1 (info) is only "icon is recommended"
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_core_objects_pass_kubernetes_schemas_strictly(case: tuple[dict[str, Any], Any]) -> None:
    _, rendered = case
    core = [o for o in rendered.objects if o["kind"] not in KEDA_KINDS]
    assert core
    for obj in core:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_keda_objects_match_keda_crds(case: tuple[dict[str, Any], Any]) -> None:
    values, rendered = case
    keda = [o for o in rendered.objects if o["kind"] in KEDA_KINDS]
    if values.get("autoscaling", {}).get("mode", "keda") != "keda":
        assert keda == []
        return
    assert rendered.of("ScaledObject")
    for obj in keda:
        jsonschema.validate(obj, KEDA_SCHEMA[obj["kind"]])
    for scaled in rendered.of("ScaledObject"):
        [trigger] = scaled["spec"]["triggers"]
        if values.get("postgres", {}).get("use") == "queue":  # PostgreSQL alone
            assert trigger["type"] == "postgresql"
            assert set(trigger["metadata"]) <= set(KEDA_SCHEMA["postgresqlMetadata"])
            assert int(trigger["metadata"]["targetQueryValue"]) >= 1
        else:
            assert trigger["type"] == "redis-streams"
            assert set(trigger["metadata"]) <= set(KEDA_SCHEMA["redisStreamsMetadata"])
            assert int(trigger["metadata"]["streamLength"]) >= 1
        if ref := trigger.get("authenticationRef"):  # the object it names is rendered
            auth = rendered.one("TriggerAuthentication", ref["name"])
            assert auth["metadata"]["namespace"] == scaled["metadata"]["namespace"]


def test_a_broken_scaled_object_fails_the_keda_check() -> None:
    """The vendored schema has teeth: a misspelt field or a number where KEDA wants a
    string is refused (the API server would prune or reject them)."""
    scaled = render(BASE).of("ScaledObject")[0]
    misspelt = merged(scaled, {"spec": {"maxReplicas": 3}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(misspelt, KEDA_SCHEMA["ScaledObject"])
    number = merged(scaled, {})
    number["spec"]["triggers"][0]["metadata"]["streamLength"] = 5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(number, KEDA_SCHEMA["ScaledObject"])


# -- what lint cannot see -----------------------------------------------------------------


def test_each_trigger_reads_the_stream_its_workers_claim_from(
    case: tuple[dict[str, Any], Any],
) -> None:
    values, rendered = case
    parser = build_parser()
    scalers = {s["spec"]["scaleTargetRef"]["name"]: s for s in rendered.of("ScaledObject")}
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in rendered.of("HorizontalPodAutoscaler")}
    deployed = workers(rendered)
    assert len(deployed) == len(values.get("pools", [{"name": "default"}]))
    for deployment in deployed:
        c = container(deployment)
        args = parser.parse_args(c["args"])
        prefix = env_of(c)["PODIUM_SERVER__PREFIX"]
        assert prefix == values.get("prefix", "podium")
        name = deployment["metadata"]["name"]
        assert deployment["metadata"]["labels"]["podium.dev/pool"] == args.pool
        if name in scalers and env_of(c).get("PODIUM_SERVER__QUEUE"):  # PostgreSQL alone
            [trigger] = scalers[name]["spec"]["triggers"]
            assert trigger["type"] == "postgresql"
            # the rows `podium worker --pool P` claims from, in the database it claims from
            assert trigger["metadata"]["query"] == queue_rows_query(args.pool)
            url = urlsplit(env_of(c)["PODIUM_SERVER__QUEUE"])
            meta = trigger["metadata"]
            assert (meta["host"], meta["port"]) == (url.hostname, str(url.port))
            assert (meta["userName"], meta["dbName"]) == (url.username, url.path.strip("/"))
            assert url.hostname is not None and "." in url.hostname
            capacity = max(args.procs or 0, 1) * args.concurrency
            assert int(meta["targetQueryValue"]) <= capacity
        elif name in scalers:
            [trigger] = scalers[name]["spec"]["triggers"]
            # the key podium.queue.redis gives the pool's queue, as `podium worker` reads it
            assert trigger["metadata"]["stream"] == queue_stream_key(prefix, args.pool)
            # ... on the Redis they claim from (KEDA's operator runs in its own namespace)
            url = urlsplit(env_of(c)["PODIUM_SERVER__REDIS"])
            assert trigger["metadata"]["address"] == f"{url.hostname}:{url.port}"
            assert trigger["metadata"]["databaseIndex"] == url.path.strip("/")
            assert url.hostname is not None and "." in url.hostname
            assert scalers[name]["metadata"]["namespace"] == deployment["metadata"]["namespace"]
            capacity = max(args.procs or 0, 1) * args.concurrency
            assert int(trigger["metadata"]["streamLength"]) <= capacity
        elif name in hpas:
            [metric] = hpas[name]["spec"]["metrics"]
            assert metric["external"]["metric"]["selector"]["matchLabels"] == {"pool": args.pool}
        else:
            assert values["autoscaling"]["mode"] == "none"
            assert deployment["spec"]["replicas"] >= 0


def test_the_kill_waits_for_the_drain(case: tuple[dict[str, Any], Any]) -> None:
    _, rendered = case
    parser = build_parser()
    for deployment in workers(rendered):
        c = container(deployment)
        grace = parser.parse_args(c["args"]).grace
        spec = deployment["spec"]["template"]["spec"]
        assert spec["terminationGracePeriodSeconds"] > grace + preStop_s(c)
    g = gateway(rendered)
    c = container(g)
    drain = float(env_of(c)["PODIUM_SERVER__DRAIN_GRACE_S"])
    # uvicorn gets the drain + 2 s to end the streams (podium.cli.serve)
    assert g["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > (
        drain + 2 + preStop_s(c)
    )


def test_every_container_runs_a_real_podium_command(case: tuple[dict[str, Any], Any]) -> None:
    _, rendered = case
    parser = build_parser()
    for _, spec in pod_specs(rendered):
        for c in spec["containers"]:
            args = parser.parse_args(c["args"])  # an unknown option or bad value: SystemExit
            assert args.command in ("serve", "worker", "sim-server")


def test_config_and_environment_load_as_podium_reads_them(
    case: tuple[dict[str, Any], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    values, rendered = case
    for configmap in rendered.of("ConfigMap"):
        path = tmp_path / f"{configmap['metadata']['namespace']}.toml"
        path.write_text(configmap["data"]["podium.toml"])
        for deployment in [*workers(rendered), gateway(rendered)]:
            if deployment["metadata"]["namespace"] != configmap["metadata"]["namespace"]:
                continue
            c = container(deployment)
            env = env_of(c, secret_values(rendered, configmap["metadata"]["namespace"]))
            with monkeypatch.context() as m:
                for key, value in env.items():
                    if key.startswith("PODIUM_"):
                        m.setenv(key, value)  # an unknown PODIUM_ variable is refused
                config = load_config(str(path))
            redis = values.get("redis", {})
            host = redis.get("host", "redis")
            if "." not in host:  # a bare Service name, qualified for other namespaces
                host = f"{host}.{NAMESPACE}.svc"
            pg = values.get("postgres", {})
            if pg.get("use") == "queue":  # PostgreSQL alone: no Redis
                assert config.server.redis is None
            elif redis.get("password") or redis.get("existingSecret"):
                password = redis.get("password", "pw")  # the Secret's, as the kubelet puts it
                assert config.server.redis == f"redis://:{password}@{host}:6379/0"
            else:
                assert config.server.redis == f"redis://{host}:6379/0"
            if pg.get("enabled"):  # runs kept in PostgreSQL, the password from its Secret
                pg_host = pg["host"] if "." in pg["host"] else f"{pg['host']}.{NAMESPACE}.svc"
                password = pg.get("password", "pw")
                url = (f"postgresql://{pg.get('user', 'podium')}:{password}@{pg_host}:5432/"
                       f"{pg.get('database', 'podium')}")
                if pg.get("use") == "queue":  # its queue and its store, as serve checks
                    assert config.server.queue == config.server.store == url
                    check_queue(url, config.server.store, redis=config.server.redis)
                elif pg.get("use") == "archive":  # runs hot in Redis, finished ones archived
                    assert config.server.archive == url
                    assert config.server.store == "sqlite:podium.sqlite"  # unused beside Redis
                    check_archive(url, config.server.redis, config.server.store)
                else:
                    assert config.server.store == url
                    assert config.server.archive is None
                    check_store(config.server.store)
            else:
                assert config.server.store == "sqlite:podium.sqlite"  # unused beside Redis
            if "PODIUM_KEYS" in env:  # the gateway's keys, parsed as podium serve parses them
                assert config.keys
            assert config.server.prefix == values.get("prefix", "podium")
            args = build_parser().parse_args(c["args"])
            if args.command == "worker":  # the pool has agents in the config it reads
                assert worker_agents(config, [], args.pool)


def test_pods_are_locked_down(case: tuple[dict[str, Any], Any]) -> None:
    _, rendered = case
    for _, spec in pod_specs(rendered):
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_liveness_never_asks_redis(case: tuple[dict[str, Any], Any]) -> None:
    _, rendered = case
    c = container(gateway(rendered))
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"  # no dependency checked
    for deployment in workers(rendered):
        assert container(deployment)["livenessProbe"]["httpGet"]["path"] == "/livez"


def test_secrets_only_by_reference(case: tuple[dict[str, Any], Any]) -> None:
    values, rendered = case
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in rendered.of("Secret")}
    for deployment, spec in pod_specs(rendered):
        for c in spec["containers"]:
            for e in c.get("env", []):
                assert "s3cret" not in str(e.get("value", ""))
                if ref := e.get("valueFrom", {}).get("secretKeyRef"):
                    ns = deployment["metadata"]["namespace"]
                    named = {values.get("redis", {}).get("existingSecret"),
                             values.get("auth", {}).get("existingSecret"),
                             values.get("postgres", {}).get("existingSecret")}
                    assert (ns, ref["name"]) in secrets or ref["name"] in named
    if "auth" not in values:  # no keys: NOTES say every replica needs the same ones
        assert "no API keys" in rendered.notes


def test_pinned_pools_are_guaranteed_with_whole_cpus() -> None:
    rendered = render(MATRIX["pinned-pools-in-namespaces"])
    parser = build_parser()
    for deployment in workers(rendered):
        c = container(deployment)
        resources = c["resources"]
        assert resources["requests"] == resources["limits"]  # Guaranteed QoS
        cpu = resources["limits"]["cpu"]
        assert cpu.isdigit()
        args = parser.parse_args(c["args"])
        assert 1 <= args.procs <= int(cpu)
    by_name = {d["metadata"]["name"]: d for d in workers(rendered)}
    support = parser.parse_args(container(by_name["rel-podium-worker-support"])["args"])
    assert support.procs == 4  # procs defaults to the pool's CPUs
    quota = rendered.one("ResourceQuota", "rel-podium-pool-support")
    assert quota["metadata"]["namespace"] == "agents-support"
    assert {n["metadata"]["name"] for n in rendered.of("Namespace")} == {"agents-support"}
    # each namespace with workers has their config, Redis secret and NetworkPolicy
    for kind in ("ConfigMap", "NetworkPolicy"):
        spaces = {o["metadata"]["namespace"] for o in rendered.of(kind)}
        assert {"agents-support", "agents-codegen"} <= spaces


def test_network_policy_allows_only_what_the_values_name() -> None:
    rendered = render(MATRIX["pinned-pools-in-namespaces"])
    for policy in rendered.of("NetworkPolicy"):
        egress = policy["spec"]["egress"]
        blocks = sorted(p["ipBlock"]["cidr"] for rule in egress for p in rule.get("to", [])
                        if "ipBlock" in p)
        assert blocks == ["10.0.40.0/24", "203.0.113.10/32"]
        ports = sorted({p["port"] for rule in egress for p in rule["ports"]})
        assert ports == [53, 80, 443, 6379, 8000]
        assert all(rule.get("to") for rule in egress if rule["ports"][0]["port"] != 53)


def test_keda_target_is_pod_capacity_times_utilization() -> None:
    rendered = render(MATRIX["pinned-pools-in-namespaces"])
    streams = {s["metadata"]["name"]: s["spec"]["triggers"][0]["metadata"]
               for s in rendered.of("ScaledObject")}
    # support: 4 pinned processes x 256 runs x 75 %; codegen: 1 x 32 x 80 %
    assert streams["rel-podium-worker-support"]["streamLength"] == str(4 * 256 * 75 // 100)
    assert streams["rel-podium-worker-codegen"]["streamLength"] == str(math.floor(32 * 0.8))


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "worker-grace-too-short": (
        {"worker": {"terminationGracePeriodSeconds": 20}}, "must exceed the pool default's grace"),
    "gateway-grace-too-short": (
        {"gateway": {"terminationGracePeriodSeconds": 25}}, "must exceed drainGraceSeconds"),
    "fractional-pinned-cpu": (
        {"worker": {"pinning": True}, "pools": [{"name": "default", "cpu": "1500m",
                                                 "memory": "1Gi"}]}, "whole number of CPUs"),
    "procs-without-pinning": (
        {"pools": [{"name": "default", "cpu": "2", "memory": "1Gi", "procs": 2}]},
        "procs needs worker.pinning"),
    "more-procs-than-cpus": (
        {"worker": {"pinning": True},
         "pools": [{"name": "default", "cpu": "2", "memory": "1Gi", "procs": 3}]},
        "above its cpu"),
    "pool-name-not-a-dns-label": (
        {"pools": [{"name": "Support_Team", "cpu": "1", "memory": "1Gi"}]}, "pools"),
    "unknown-autoscaler": ({"autoscaling": {"mode": "hpa"}}, "mode"),
    "postgres-nowhere": ({"postgres": {"enabled": True, "cidrs": ["10.0.13.0/24"]}},
                         "say where PostgreSQL is (postgres.host)"),
    "postgres-unfenced": ({"postgres": {"enabled": True, "host": "pg"}},
                          "say where PostgreSQL is (postgres.cidrs or postgres.podSelector)"),
    "postgres-misspelt": ({"postgres": {"enabled": True, "hostname": "pg"}}, "hostname"),
    "misspelt-value": ({"gateway": {"replica": 3}}, "replica"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_values_that_cannot_work_are_refused(name: str) -> None:
    values, why = REFUSED[name]
    with pytest.raises(helm.HelmError, match=re.escape(why)):
        render(merged(BASE, values))


def queue_rows_query(pool: str) -> str:
    return f"SELECT count(*) FROM podium_queue WHERE pool = '{pool}'"


@pytest.mark.parametrize("name", ["postgres-only", "postgres-only-pools-in-namespaces"])
def test_postgres_only_has_no_redis_anywhere(name: str) -> None:
    rendered = render(MATRIX[name])
    for _, spec in pod_specs(rendered):
        for c in spec["containers"]:
            assert not any("REDIS" in e["name"] for e in c.get("env", []))
    assert not [s for s in rendered.of("Secret") if s["metadata"]["name"].endswith("-redis")]
    for policy in rendered.of("NetworkPolicy"):
        ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert 6379 not in ports and 5432 in ports
    for scaled in rendered.of("ScaledObject"):
        assert [t["type"] for t in scaled["spec"]["triggers"]] == ["postgresql"]
    assert "podium_queue" in rendered.notes


@pytest.mark.anyio
async def test_the_trigger_counts_what_the_pool_has_outstanding(fresh_postgres: str) -> None:
    """KEDA's query, run on a real PostgreSQL queue: the pool's waiting and claimed runs
    (its replicas' work), none of another pool's, none acknowledged."""
    import asyncpg

    from podium.queue.base import QueueItem
    from podium.queue.postgres import PostgresQueue

    queue = PostgresQueue(fresh_postgres)
    try:
        for i in range(4):
            await queue.submit(QueueItem(f"r{i}", "react", pool="support"))
        await queue.submit(QueueItem("other", "react", pool="codegen"))
        claims = await queue.claim("w1", pool="support", count=2)
        await queue.ack(claims[0])
    finally:
        await queue.aclose()
    conn = await asyncpg.connect(fresh_postgres)
    try:
        assert await conn.fetchval(queue_rows_query("support")) == 3  # 2 waiting, 1 claimed
        assert await conn.fetchval(queue_rows_query("codegen")) == 1
    finally:
        await conn.close()


def test_a_network_policy_needs_to_know_where_redis_is() -> None:
    with pytest.raises(helm.HelmError, match="say where Redis is"):
        render({})
