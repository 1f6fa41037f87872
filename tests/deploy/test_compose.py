"""deploy/compose.yaml, deploy/Dockerfile and their files, checked without a daemon:
every command is a real ``podium`` command line, every grace outlasts the drain it
covers, the configuration loads as Podium reads it, and the proxy points at the gateways.
(tests/deploy/test_containers.py runs them for real where dockerd can start.)"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from deploy.chart import REPO
from podium.cli.main import build_parser
from podium.config import load_config
from podium.errors import ConfigError
from podium.factory import worker_agents

DEPLOY = REPO / "deploy"
COMPOSE: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
PODIUM = {n: s for n, s in SERVICES.items() if "PODIUM_IMAGE" in str(s.get("image"))}
ENV = {"REDIS_PASSWORD": "0123abcd", "PODIUM_KEYS": "pk_test=acme"}


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, f"a grace in seconds, got {duration!r}"
    return float(match[1])


def interpolated(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} with ``env`` (default ENV)."""
    env = ENV if env is None else env

    def one(m: re.Match[str]) -> str:
        name, op, rest = m[1], m[2] or "", m[3] or ""
        return env.get(name, rest if op == ":-" else "")
    return re.sub(r"\$\{(\w+)(:[-?])?([^}]*)\}", one, value)


def test_the_stack_has_what_one_host_needs() -> None:
    assert set(PODIUM) == {"sim", "gateway-a", "gateway-b", "worker"}
    redis = SERVICES["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--requirepass ${REDIS_PASSWORD:?" in command
    assert redis["healthcheck"]["test"][:2] == ["CMD", "redis-cli"]
    for name in ("gateway-a", "gateway-b", "worker"):
        assert SERVICES[name]["depends_on"]["redis"] == {"condition": "service_healthy"}


@pytest.mark.parametrize("name", sorted(PODIUM))
def test_each_podium_command_is_a_real_command_line(name: str) -> None:
    service = PODIUM[name]
    args = build_parser().parse_args(service["command"])
    assert args.command in ("serve", "worker", "sim-server")
    assert service["read_only"] is True and "/tmp" in service["tmpfs"]


def test_stop_grace_outlasts_each_drain() -> None:
    config = load_config(str(DEPLOY / "podium.compose.toml"))
    parser = build_parser()
    for service in PODIUM.values():
        args = parser.parse_args(service["command"])
        if args.command == "worker":  # --grace for steps, then the hand-back
            assert seconds(service["stop_grace_period"]) > args.grace
        elif args.command == "serve":  # drain_grace_s, then 2 s for uvicorn's streams
            assert seconds(service["stop_grace_period"]) > config.server.drain_grace_s + 2


def test_configuration_and_environment_load_as_podium_reads_them() -> None:
    parser = build_parser()
    for service in PODIUM.values():
        environ = {k: interpolated(v) for k, v in service["environment"].items()}
        config = load_config(str(DEPLOY / "podium.compose.toml"), environ=environ)
        args = parser.parse_args(service["command"])
        if args.command == "sim-server":
            continue
        assert config.server.redis == "redis://:0123abcd@redis:6379/0"
        assert [k.tenant for k in config.keys] == ["acme"]
        models = {m.name: m for m in config.models}
        assert models["sim"].base_url == "http://sim:8000/v1"  # the sim service's port
        if args.command == "worker":
            assert list(worker_agents(config, [], args.pool)) == ["react"]


def test_required_variables_are_in_the_example_env_file() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", (DEPLOY / "compose.yaml").read_text()))
    example = {line.split("=", 1)[0] for line in (DEPLOY / ".env.example").read_text().splitlines()
               if "=" in line and not line.startswith("#")}
    assert required == {"REDIS_PASSWORD", "PODIUM_KEYS"}
    assert required <= example


def test_the_postgres_profile_keeps_runs_in_postgres() -> None:
    """``--profile postgres`` adds the server; STORE_URL points every Podium container's
    store at it (unset: the default, unused beside Redis)."""
    postgres = SERVICES["postgres"]
    assert postgres["profiles"] == ["postgres"]
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert "postgres-data" in COMPOSE["volumes"]
    url = "postgresql://podium:0123abcd@postgres:5432/podium"
    env = {**ENV, "STORE_URL": url, "POSTGRES_PASSWORD": "0123abcd"}
    assert interpolated(postgres["environment"]["POSTGRES_PASSWORD"], env) == "0123abcd"
    pg_env = postgres["environment"]
    assert url == f"postgresql://{pg_env['POSTGRES_USER']}:0123abcd@postgres:5432/{pg_env['POSTGRES_DB']}"
    for name, service in PODIUM.items():
        if name == "sim":
            continue
        environ = {k: interpolated(v, env) for k, v in service["environment"].items()}
        config = load_config(str(DEPLOY / "podium.compose.toml"), environ=environ)
        assert config.server.store == url and config.server.redis
    assert "postgres" in PODIUM["worker"]["build"]["args"]["EXTRAS"].split(",")  # asyncpg


def test_the_proxy_balances_the_two_gateways() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    upstreams = re.findall(r"^\s*server\s+([\w-]+):(\d+)", conf, re.MULTILINE)
    assert sorted(upstreams) == [("gateway-a", "8000"), ("gateway-b", "8000")]
    assert "proxy_buffering off" in conf  # event streams pass as they are written
    assert SERVICES["proxy"]["profiles"] == ["proxy"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_accepts_the_file() -> None:
    """docker-compose's own schema check (no daemon needed), with and without the proxy."""
    for extra in ([], ["--profile", "proxy"], ["--profile", "postgres"]):
        result = subprocess.run(
            ["docker-compose", "-f", str(DEPLOY / "compose.yaml"), *extra, "config", "-q"],
            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **ENV},
        )
        assert result.returncode == 0, result.stderr
    missing = subprocess.run(["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "config"],
                             capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "REDIS_PASSWORD" in missing.stderr


# -- the Dockerfile -----------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in text.splitlines() if line.strip() and not line.startswith("#")]


def last(keyword: str) -> str:
    return [v for k, v in instructions() if k == keyword][-1]


def test_dockerfile_runs_podium_unprivileged_and_stops_it_with_sigterm() -> None:
    steps = instructions()
    assert [v for k, v in steps if k == "FROM"] == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]
    args = {v.split("=")[0] for k, v in steps if k == "ARG"}
    assert {"BASE_IMAGE", "EXTRAS", "PIP_OPTS"} <= args
    assert json.loads(last("ENTRYPOINT")) == ["podium"]
    user = last("USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert last("STOPSIGNAL") == "SIGTERM"
    default = build_parser().parse_args(json.loads(last("CMD")))
    assert default.command == "serve" and default.host == "0.0.0.0"
    assert last("EXPOSE") == str(default.port)


def test_dockerfile_healthcheck_runs_the_script_it_copies() -> None:
    check = last("HEALTHCHECK")
    command = json.loads(check.split("CMD", 1)[1])
    copied = {v.split()[-1]: v.split()[-2] for k, v in instructions() if k == "COPY"}
    assert copied[command[1]] == "deploy/healthcheck.py"
    assert (REPO / copied[command[1]]).is_file()
    assert command[0] == "/opt/podium/bin/python"
    ignore = (REPO / ".dockerignore").read_text().split()
    assert "!deploy/healthcheck.py" in ignore and "!src/" in ignore


def test_readme_and_docs_start_compose_the_way_the_file_says() -> None:
    page = (REPO / "docs" / "deploy.md").read_text()
    commands = [shlex.split(line) for line in page.splitlines()
                if line.startswith("docker compose ")]
    assert commands
    for argv in commands:  # compose.yaml (and its overrides), or PostgreSQL alone's
        files = [argv[i + 1] for i, a in enumerate(argv) if a == "-f"]
        assert files[0] in ("deploy/compose.yaml", "deploy/compose.postgres.yaml"), argv
        assert all((REPO / f).is_file() for f in files), argv
    assert "docs/deploy.md" in (REPO / "README.md").read_text()


# -- PostgreSQL: the archive override and the PostgreSQL-only file -------------------------


def compose_merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base`` as ``docker compose -f base -f over`` merges them: maps
    (a service, its environment) merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = compose_merged(out[key], value)
        else:
            out[key] = value
    return out


def load(file: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / file).read_text())
    return loaded


def podium_config(service: dict[str, Any], env: dict[str, str]) -> Any:
    environ = {k: interpolated(v, env) for k, v in service["environment"].items()}
    return load_config(str(DEPLOY / "podium.compose.toml"), environ=environ)


PG_URL = "postgresql://podium:0123abcd@postgres:5432/podium"


def test_the_archive_override_archives_finished_runs_to_postgres() -> None:
    """compose.yaml + compose.archive.yaml: every gateway and worker keeps runs hot in
    Redis and archives them to ARCHIVE_URL, as ``server.archive`` is checked at start."""
    from podium._config_checks import check_archive

    override = load("compose.archive.yaml")
    stack = compose_merged(COMPOSE, override)
    serving = {n for n, s in PODIUM.items() if s["command"][0] in ("serve", "worker")}
    assert set(override["services"]) == serving  # every process that reads or finishes runs
    env = {**ENV, "ARCHIVE_URL": PG_URL, "POSTGRES_PASSWORD": "0123abcd"}
    for name in serving:
        service = stack["services"][name]
        config = podium_config(service, env)
        assert config.server.archive == PG_URL and config.server.redis
        check_archive(config.server.archive, config.server.redis, config.server.store)
        # everything else is compose.yaml's service, untouched
        assert {k: v for k, v in service.items() if k != "environment"} == \
            {k: v for k, v in SERVICES[name].items() if k != "environment"}
        # an archive beside a PostgreSQL store is refused, in one line, as it loads
        with pytest.raises(ConfigError, match=r"needs server\.redis"):
            podium_config(service, {**env, "STORE_URL": PG_URL})
    required = set(re.findall(r"\$\{(\w+):\?", (DEPLOY / "compose.archive.yaml").read_text()))
    assert required == {"ARCHIVE_URL"}
    assert "ARCHIVE_URL=" in (DEPLOY / ".env.example").read_text()


PG_ONLY = load("compose.postgres.yaml")
PG_SERVICES: dict[str, Any] = PG_ONLY["services"]
PG_ENV = {"POSTGRES_PASSWORD": "0123abcd", "PODIUM_KEYS": "pk_test=acme"}


def test_postgres_only_runs_podium_as_compose_yaml_does_without_redis() -> None:
    """The same Podium services as compose.yaml (image, commands, graces, lock-down,
    ports), on PostgreSQL alone: no Redis service, no Redis variable."""
    assert set(PG_SERVICES) == {*PODIUM, "postgres", "db-upgrade"}
    assert "${REDIS" not in (DEPLOY / "compose.postgres.yaml").read_text()
    assert not [k for s in PG_SERVICES.values() for k in s.get("environment", {}) if "REDIS" in k]
    for name, service in PODIUM.items():
        mine = PG_SERVICES[name]
        for key in set(service) | set(mine):
            if key not in ("environment", "depends_on"):
                assert mine.get(key) == service.get(key), (name, key)
    postgres = PG_SERVICES["postgres"]
    assert {k: v for k, v in postgres.items() if k not in ("profiles", "environment")} == \
        {k: v for k, v in SERVICES["postgres"].items() if k not in ("profiles", "environment")}
    assert interpolated(postgres["environment"]["POSTGRES_PASSWORD"], PG_ENV) == "0123abcd"


def test_postgres_only_queue_and_store_load_as_podium_reads_them() -> None:
    from podium._config_checks import check_queue

    parser = build_parser()
    for name, service in PG_SERVICES.items():
        if name in ("postgres", "sim"):
            continue
        args = parser.parse_args(service["command"])
        config = podium_config(service, PG_ENV)
        assert config.server.redis is None
        assert config.server.queue == config.server.store == PG_URL
        check_queue(config.server.queue, config.server.store, redis=config.server.redis)
        if args.command == "db":  # the store's tables and the queue's, before the rest
            assert args.verb == "upgrade" and args.queue
            assert service["depends_on"] == {"postgres": {"condition": "service_healthy"}}
            assert service["restart"] == "no"
        else:
            assert service["depends_on"]["db-upgrade"] == {
                "condition": "service_completed_successfully"}
        if args.command == "worker":
            assert list(worker_agents(config, [], args.pool)) == ["react"]
    required = set(re.findall(r"\$\{(\w+):\?", (DEPLOY / "compose.postgres.yaml").read_text()))
    assert required == {"POSTGRES_PASSWORD", "PODIUM_KEYS"}
    example = (DEPLOY / ".env.example").read_text()
    assert all(f"{name}=" in example for name in required)


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_accepts_the_postgres_files() -> None:
    runs = [
        (["-f", "compose.yaml", "-f", "compose.archive.yaml", "--profile", "postgres"],
         {**ENV, "ARCHIVE_URL": PG_URL, "POSTGRES_PASSWORD": "0123abcd"}),
        (["-f", "compose.postgres.yaml"], PG_ENV),
    ]
    for files, env in runs:
        argv = [a if not a.endswith(".yaml") else str(DEPLOY / a) for a in files]
        result = subprocess.run(["docker-compose", *argv, "config", "-q"], capture_output=True,
                                text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})
        assert result.returncode == 0, result.stderr
