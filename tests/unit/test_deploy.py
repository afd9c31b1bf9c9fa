"""The production deployment files under deploy/: valid for their tools, and consistent with
the node they run.

Kubernetes manifests are checked offline against the API's OpenAPI schemas (strict: unknown
fields fail) with kubernetes-validate; the systemd unit with `systemd-analyze verify` where
that exists. What no schema can see is checked against the code: the `sparkiq serve` command
lines are parsed by the real CLI and turned into the node's real settings (only the file
options' existence check is lifted, the files being the deployment's), the variables the
manifests and the env file set are ones the CLI reads, the probes' paths are answered by the
node's HTTP API as probes need, and names, labels, ports and paths agree across the files.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import kubernetes_validate
import pytest
import yaml

from sparkiq.auth import AuthConfig
from sparkiq.cli import main as cli
from sparkiq.cli.serving import auth_config
from sparkiq.core.errors import ConfigError
from sparkiq.http import HttpApi
from sparkiq.http.staticview import StaticView
from sparkiq.node.settings import NodeSettings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "sparkiq.service"
ENV_EXAMPLE = SYSTEMD / "sparkiq.env.example"
# The Kubernetes version whose schemas the manifests must satisfy (kubernetes-validate ships
# schemas per minor version); strict: a field the API does not know fails.
K8S_VERSION = "1.31"
EXAMPLE_SECRET = "secret.example.yaml"
# What the downward API gives the first pod of the StatefulSet in a namespace "prod".
POD_ENV = {"POD_NAME": "sparkiq-0", "POD_NAMESPACE": "prod"}

Manifest = dict[str, Any]


# -- loading -------------------------------------------------------------------------------


def manifests() -> list[tuple[str, Manifest]]:
    """(file name, document) of every YAML document under deploy/kubernetes."""
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def resources() -> list[tuple[str, Manifest]]:
    """The Kubernetes objects (the kustomization is kustomize's, not the API's)."""
    return [(name, doc) for name, doc in manifests() if doc["kind"] != "Kustomization"]


def one(kind: str, name: str | None = None) -> Manifest:
    found = [
        doc
        for _, doc in resources()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''} under {K8S}, found {len(found)}"
    return found[0]


def statefulset() -> Manifest:
    return one("StatefulSet")


def container() -> Manifest:
    containers = statefulset()["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args by the container's environment."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


def container_env() -> dict[str, str]:
    """The container's environment as the pod would see it: the ConfigMaps it imports, then
    its own variables (downward API values as in POD_ENV)."""
    env: dict[str, str] = {}
    spec = container()
    for source in spec.get("envFrom", []):
        env.update(one("ConfigMap", source["configMapRef"]["name"])["data"])
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in ("metadata.name", "metadata.namespace"), path
            env[var["name"]] = POD_ENV[var["name"]]
    return env


def serve_args_of_container() -> list[str]:
    """The `sparkiq serve` options of the StatefulSet's container, $(VAR)s expanded."""
    spec = container()
    argv = [*spec.get("command", []), *spec.get("args", [])]
    assert argv[:2] == ["sparkiq", "serve"], f"the container must run `sparkiq serve`: {argv}"
    env = container_env()
    args = [k8s_expand(arg, env) for arg in argv[2:]]
    unexpanded = [arg for arg in args if "$(" in arg]
    assert not unexpanded, f"variables the container does not define: {unexpanded}"
    return args


def unit_sections(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit file's sections as (key, value) lists, read as systemd reads them:
    '#' and ';' comment lines, and lines continued by a trailing backslash."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: str | None = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue  # comments inside a continuation are skipped too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not a key=value line: {line!r}"
        assert current is not None, f"{path}: {line!r} before any [section]"
        sections[current].append((key.strip(), value.strip()))
    assert not pending, f"{path}: the last line is continued"
    return sections


def unit_value(sections: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    values = [v for k, v in sections.get(section, []) if k == key]
    assert len(values) == 1, f"[{section}] {key}= must be set once, found {values}"
    return values[0]


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an EnvironmentFile (blank lines and # comments skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line!r}"
        assert not value.startswith(("'", '"')), f"{path}: keep values unquoted: {line!r}"
        out[key] = value
    return out


def unit_serve_args() -> list[str]:
    sections = unit_sections(UNIT)
    exec_start = unit_value(sections, "Service", "ExecStart")
    # Without $ expansions, % specifiers or a prefix, systemd splits like a shell.
    assert not re.search(r"[$%]", exec_start), exec_start
    argv = shlex.split(exec_start)
    assert Path(argv[0]).name == "sparkiq", argv
    assert argv[1] == "serve", argv
    return argv[2:]


# -- the real CLI --------------------------------------------------------------------------


def serve_opts() -> dict[str, click.Parameter]:
    """Every option string `sparkiq serve` accepts (--x and --no-x), to its parameter."""
    out = {}
    for param in cli.serve.params:
        for opt in (*param.opts, *param.secondary_opts):
            out[opt] = param
    return out


def serve_envvars() -> set[str]:
    out = set()
    for param in cli.serve.params:
        envvar = getattr(param, "envvar", None)
        if isinstance(envvar, str):
            out.add(envvar)
        elif envvar:
            out.update(envvar)
    return out


def serve_without_file_checks() -> click.Command:
    """`sparkiq serve` as it is, except that the files it names need not exist here."""
    command = copy.copy(cli.serve)
    params = []
    for param in cli.serve.params:
        if isinstance(param.type, click.Path) and param.type.exists:
            param = copy.copy(param)
            old = param.type
            param.type = click.Path(
                file_okay=old.file_okay, dir_okay=old.dir_okay, path_type=old.type
            )
        params.append(param)
    command.params = params
    return command


@pytest.fixture
def run_serve(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str], dict[str, str]], Any]:
    """Run `sparkiq serve ARGS` in environment ENV through the real command up to the node's
    start: its parsing, its checks and the node's settings, which it returns."""

    def run(args: list[str], env: dict[str, str]) -> NodeSettings:
        for name in list(os.environ):
            if name.startswith("SPARKIQ_"):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        started: list[NodeSettings] = []
        monkeypatch.setattr("sparkiq.cli.serving.run_node", started.append)
        serve_without_file_checks().main(args, prog_name="sparkiq serve", standalone_mode=False)
        assert len(started) == 1
        return started[0]

    return run


def option_value(args: list[str], option: str) -> str:
    values = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == option]
    assert len(values) == 1, f"{option} must be given once: {args}"
    return values[0]


def assert_known_flags(args: list[str], where: str) -> None:
    opts = serve_opts()
    for arg in args:
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            assert flag in opts, f"{where}: `sparkiq serve` has no option {flag}"


# -- Kubernetes: schemas -------------------------------------------------------------------


def test_manifests_are_there() -> None:
    kinds = sorted(doc["kind"] for _, doc in resources())
    assert kinds == [
        "ConfigMap",
        "PodDisruptionBudget",
        "Secret",
        "Service",
        "Service",
        "StatefulSet",
    ]


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(doc, id=f"{name}:{doc['kind']}/{doc['metadata']['name']}")
        for name, doc in resources()
    ],
)
def test_manifest_validates_against_the_kubernetes_schema(doc: Manifest) -> None:
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def rename(key: str, to: str) -> Callable[[Manifest], None]:
    def change(doc: Manifest) -> None:
        doc[to] = doc.pop(key)

    return change


@pytest.mark.parametrize(
    ("where", "change"),
    [
        pytest.param(
            ("spec",), rename("podManagementPolicy", "podManagmentPolicy"), id="misspelled"
        ),
        pytest.param(
            ("spec", "template", "spec", "containers", 0),
            rename("readinessProbe", "readinesProbe"),
            id="misspelled-in-a-container",
        ),
        pytest.param(("spec",), lambda doc: doc.update(replicas="three"), id="wrong-type"),
        pytest.param(("spec",), lambda doc: doc.pop("selector"), id="required-field-missing"),
    ],
)
def test_schema_validation_rejects_a_broken_statefulset(
    where: tuple[str | int, ...], change: Callable[[Manifest], None]
) -> None:
    broken = copy.deepcopy(statefulset())
    target: Any = broken
    for step in where:
        target = target[step]
    change(target)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", EXAMPLE_SECRET}
    assert set(listed) == on_disk


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_builds_the_manifests() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(built.stdout) if doc)
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Service", "Service", "StatefulSet"]


# -- Kubernetes: consistency with the node -------------------------------------------------


def test_statefulset_command_is_accepted_by_the_real_cli(run_serve: Any) -> None:
    args = serve_args_of_container()
    assert_known_flags(args, "statefulset.yaml")
    settings = run_serve(args, container_env())
    config = one("ConfigMap", "sparkiq-config")["data"]
    assert settings.bootstrap_servers == config["SPARKIQ_BOOTSTRAP_SERVERS"]
    assert settings.app == config["SPARKIQ_APP"]
    assert settings.listen == "0.0.0.0:8100"
    assert settings.url == "http://sparkiq-0.sparkiq-headless.prod.svc.cluster.local:8100"
    assert settings.state_dir == Path("/var/lib/sparkiq")
    assert settings.jwt_secret_file is not None
    assert settings.cluster_secret_file is not None
    # Kubelet probes carry no credentials: health and readiness must stay open.
    assert settings.protect_ops is False
    assert settings.tls_cert_file is None  # so the probes and the URL say http


def test_configmap_sets_only_variables_serve_reads() -> None:
    data = one("ConfigMap", "sparkiq-config")["data"]
    unknown = set(data) - serve_envvars()
    assert not unknown, f"`sparkiq serve` reads no {sorted(unknown)}: they would be ignored"
    assert "SPARKIQ_BOOTSTRAP_SERVERS" in data


def test_statefulset_shape() -> None:
    spec = statefulset()["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
    limits = container()["resources"]["limits"]
    assert {"cpu", "memory"} <= set(limits)


def test_advertised_url_names_the_pod_through_the_headless_service() -> None:
    headless = one("Service", statefulset()["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    args = container()["args"]
    url = urlsplit(option_value(args, "--advertised-url"))
    host = url.netloc.rpartition(":")[0]  # as written: .hostname would lower-case it
    pod, service, namespace, *domain = host.split(".")
    assert (pod, namespace) == ("$(POD_NAME)", "$(POD_NAMESPACE)")
    assert service == headless["metadata"]["name"]
    assert domain == ["svc", "cluster", "local"]
    listen_port = int(option_value(args, "--listen").rpartition(":")[2])
    assert url.port == listen_port


def container_port(ref: int | str) -> int:
    """The container port a probe or Service names (by number or by name)."""
    ports = container()["ports"]
    if isinstance(ref, int):
        assert ref in [p["containerPort"] for p in ports]
        return ref
    (port,) = [p["containerPort"] for p in ports if p.get("name") == ref]
    return int(port)


def test_ports_agree() -> None:
    listen_port = int(option_value(container()["args"], "--listen").rpartition(":")[2])
    assert [p["containerPort"] for p in container()["ports"]] == [listen_port]
    for name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container()[name]["httpGet"]
        assert container_port(probe["port"]) == listen_port, name
        assert probe.get("scheme", "HTTP") == "HTTP", name
    for _, doc in resources():
        if doc["kind"] == "Service":
            for port in doc["spec"]["ports"]:
                assert container_port(port["targetPort"]) == listen_port, doc["metadata"]


async def test_probe_paths_are_served_by_the_node_as_probes_need() -> None:
    """Readiness follows the node's readiness; liveness and startup stay 200 while the node
    restores (a liveness probe on /readyz would kill every restoring pod)."""
    spec = container()
    view = StaticView("http://sparkiq-0.sparkiq-headless.prod.svc.cluster.local:8100")
    api = HttpApi(view)
    try:

        async def status(path: str) -> int:
            return (await api.handle("GET", path, "", {}, b"")).status

        ready_path = spec["readinessProbe"]["httpGet"]["path"]
        live_paths = [spec[p]["httpGet"]["path"] for p in ("livenessProbe", "startupProbe")]
        assert await status(ready_path) == 200
        assert all([await status(path) == 200 for path in live_paths])
        view.ready = False  # joined but restoring, or not joined yet
        assert await status(ready_path) == 503
        assert all([await status(path) == 200 for path in live_paths])
        assert await status("/no-such-route") == 404  # the router does refuse unknown paths
    finally:
        await api.close()


def test_selectors_match_the_pod_labels() -> None:
    labels = statefulset()["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, str]) -> bool:
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

    assert selects(statefulset()["spec"]["selector"]["matchLabels"])
    pdb = one("PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"])
    assert pdb["spec"]["maxUnavailable"] == 1
    services = [doc for _, doc in resources() if doc["kind"] == "Service"]
    assert len(services) == 2
    for service in services:
        assert selects(service["spec"]["selector"]), service["metadata"]["name"]
    client = [s for s in services if s["spec"].get("clusterIP") != "None"]
    assert len(client) == 1
    assert client[0]["spec"].get("type", "ClusterIP") == "ClusterIP"


def mounts() -> dict[str, Manifest]:
    return {m["name"]: m for m in container()["volumeMounts"]}


def test_state_dir_is_the_claim_mount_and_writable_paths_are_volumes() -> None:
    state_dir = option_value(container()["args"], "--state-dir")
    claims = [c["metadata"]["name"] for c in statefulset()["spec"]["volumeClaimTemplates"]]
    by_path = {m["mountPath"]: m for m in mounts().values()}
    assert by_path[state_dir]["name"] in claims
    assert not by_path[state_dir].get("readOnly", False)
    security = container()["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert "/tmp" in by_path  # the only other place a process may write
    pod_security = statefulset()["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["fsGroup"]  # the claim is writable by the non-root user


def test_secret_files_come_from_the_example_secrets_keys() -> None:
    secret = one("Secret")
    args = container()["args"]
    volumes = {v["name"]: v for v in statefulset()["spec"]["template"]["spec"]["volumes"]}
    for option in ("--jwt-secret-file", "--cluster-secret-file"):
        path = Path(option_value(args, option))
        (mount,) = [m for m in mounts().values() if Path(m["mountPath"]) == path.parent]
        assert mount.get("readOnly") is True
        source = volumes[mount["name"]]["secret"]
        assert source["secretName"] == secret["metadata"]["name"]
        assert path.name in secret["stringData"], f"{option}: the Secret has no key {path.name}"


def test_example_secret_cannot_start_a_node_but_real_secrets_do(
    tmp_path: Path, run_serve: Any
) -> None:
    settings = run_serve(serve_args_of_container(), container_env())
    secret = one("Secret")["stringData"]

    def load(values: dict[str, str]) -> AuthConfig:
        for key, value in values.items():
            (tmp_path / key).write_text(value + "\n")
        jwt, cluster = settings.jwt_secret_file, settings.cluster_secret_file
        assert jwt is not None
        assert cluster is not None
        here = settings.model_copy(
            update={
                "jwt_secret_file": tmp_path / jwt.name,
                "cluster_secret_file": tmp_path / cluster.name,
            }
        )
        return auth_config(here)

    with pytest.raises(ConfigError, match="at least 32 bytes"):
        load(secret)
    # What the instructions in secret.example.yaml make (openssl rand -hex 32).
    config = load({key: os.urandom(32).hex() for key in secret})
    assert config.cluster is not None
    assert not config.protect_ops


# -- systemd --------------------------------------------------------------------------------


def test_unit_exec_start_is_accepted_by_the_real_cli(run_serve: Any) -> None:
    args = unit_serve_args()
    assert_known_flags(args, "sparkiq.service")
    env = env_file(ENV_EXAMPLE)
    settings = run_serve(args, env)
    sections = unit_sections(UNIT)
    assert settings.listen == "0.0.0.0:8100"
    state_dir = Path("/var/lib") / unit_value(sections, "Service", "StateDirectory")
    assert settings.state_dir == state_dir
    assert str(state_dir) in unit_value(sections, "Service", "ReadWritePaths").split()
    assert settings.url == env["SPARKIQ_ADVERTISED_URL"]
    assert settings.bootstrap_servers == env["SPARKIQ_BOOTSTRAP_SERVERS"]
    assert settings.jwt_secret_file is not None
    assert settings.cluster_secret_file is not None


def test_unit_settings() -> None:
    sections = unit_sections(UNIT)

    def value(key: str) -> str:
        return unit_value(sections, "Service", key)

    # The node does not speak sd_notify: Type=notify would never see it start.
    assert value("Type") == "simple"
    assert value("EnvironmentFile") == "/etc/sparkiq/sparkiq.env"
    assert value("User") == "sparkiq"
    assert value("Restart") == "on-failure"
    assert value("KillSignal") == "SIGTERM"
    assert int(value("LimitNOFILE")) >= 65536
    assert value("ProtectSystem") == "strict"
    assert value("NoNewPrivileges") == "yes"
    assert unit_value(sections, "Install", "WantedBy") == "multi-user.target"


def test_env_example_names_only_variables_serve_reads() -> None:
    named = re.findall(r"^#?\s*(SPARKIQ_[A-Z0-9_]+)=", ENV_EXAMPLE.read_text(), re.MULTILINE)
    assert "SPARKIQ_BOOTSTRAP_SERVERS" in named
    unknown = set(named) - serve_envvars()
    assert not unknown, f"`sparkiq serve` reads no {sorted(unknown)}"


@pytest.fixture
def verifiable_unit(tmp_path: Path) -> Callable[[str], tuple[int, str]]:
    """`systemd-analyze verify` of the unit, its ExecStart pointed at this venv's sparkiq
    (verify insists that the program exists); returns (exit code, what it printed)."""
    here = Path(sys.executable).parent / "sparkiq"
    if not here.exists():
        pytest.skip(f"no sparkiq script beside {sys.executable}")
    text = UNIT.read_text()
    assert "/opt/sparkiq/.venv/bin/sparkiq" in text

    def verify(unit_text: str) -> tuple[int, str]:
        path = tmp_path / "sparkiq.service"
        path.write_text(unit_text.replace("/opt/sparkiq/.venv/bin/sparkiq", str(here)))
        done = subprocess.run(
            ["systemd-analyze", "verify", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        said = [line for line in (done.stdout + done.stderr).splitlines() if path.name in line]
        return done.returncode, "\n".join(said)

    return verify


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_systemd_analyze_verifies_the_unit(
    verifiable_unit: Callable[[str], tuple[int, str]],
) -> None:
    code, said = verifiable_unit(UNIT.read_text())
    assert code == 0, said
    assert not said
    # ... and it does complain about a broken one.
    broken = UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystm=strict")
    code, said = verifiable_unit(broken)
    assert "ProtectSystm" in said
