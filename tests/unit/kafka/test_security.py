"""Kafka client security settings: parsing, validation, librdkafka/aiokafka mapping, and the
settings reaching real clients (CLI, serving node, group member) against real brokers.

The secured broker is Apache Kafka with a SASL_PLAINTEXT listener that takes SCRAM-SHA-512
logins of one user, bob: alice's logins are refused, bob's accepted, by the broker itself.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sparkiq.cli.main import main
from sparkiq.core.errors import ConfigError, KafkaError
from sparkiq.core.topology import MemberInfo
from sparkiq.dev.kafkabroker import KafkaBroker
from sparkiq.dev.localcluster import NodeProcess
from sparkiq.dev.ports import free_port
from sparkiq.kafka.admin import create_topic
from sparkiq.kafka.catalog import read_catalog
from sparkiq.kafka.security import PLAINTEXT, KafkaSecurity
from sparkiq.node.group.membership import GroupMember
from sparkiq.node.settings import NodeSettings

SCRAM = [
    "security.protocol=SASL_PLAINTEXT",
    "sasl.mechanism=SCRAM-SHA-512",
    "sasl.username=alice",
    "sasl.password=hunter2-secret",
]
BOB_PASSWORD = "bob-s3cret-password"
BOB = [*SCRAM[:2], "sasl.username=bob", f"sasl.password={BOB_PASSWORD}"]


# ---- parsing and validation ----------------------------------------------------------------


def test_pairs_are_parsed_and_keys_normalised() -> None:
    security = KafkaSecurity.from_pairs([" Security.Protocol =SASL_SSL", *SCRAM[1:], "ssl.x=a=b"])
    conf = security.librdkafka_conf()
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.password"] == "hunter2-secret"
    assert conf["ssl.x"] == "a=b"  # only the first '=' separates
    assert security.protocol == "SASL_SSL"
    assert security.mechanism == "SCRAM-SHA-512"


def test_empty_settings_are_plaintext() -> None:
    assert not PLAINTEXT
    assert PLAINTEXT.protocol == "PLAINTEXT"
    assert PLAINTEXT.librdkafka_conf() == {}
    assert PLAINTEXT.aiokafka_kwargs() == {}
    assert KafkaSecurity.load(None, ()) == PLAINTEXT


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        "\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism: PLAIN\n"
        "sasl.username=bob\n"
        "sasl.password=ends in a blank \n"
    )
    security = KafkaSecurity.from_file(path)
    assert security.librdkafka_conf() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "bob",
        "sasl.password": "ends in a blank ",  # as in Java: trailing blanks are kept
    }


def test_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("security.protocol=SSL\njust some words\n")
    with pytest.raises(ConfigError, match=r"bad\.properties:2: not a key=value line"):
        KafkaSecurity.from_file(path)
    with pytest.raises(ConfigError, match="cannot read the Kafka settings file"):
        KafkaSecurity.from_file(tmp_path / "missing.properties")
    path.write_text("group.id=mine\n")
    with pytest.raises(ConfigError, match=r"bad\.properties: Kafka setting 'group.id'"):
        KafkaSecurity.from_file(path)


def test_command_line_pairs_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\n")
    security = KafkaSecurity.load(path, ["sasl.username=b", "sasl.password=p"])
    assert security.librdkafka_conf()["sasl.username"] == "b"
    assert security.librdkafka_conf()["sasl.password"] == "p"
    assert security.protocol == "SASL_SSL"


@pytest.mark.parametrize(
    "key", ["group.id", "bootstrap.servers", "fetch.wait.max.ms", "enable.auto.commit"]
)
def test_only_security_settings_are_accepted(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        KafkaSecurity.from_pairs([f"{key}=x"])
    message = str(info.value)
    assert repr(key) in message
    for allowed in ("security.protocol", "sasl.*", "ssl.*"):
        assert allowed in message


def test_a_near_miss_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'security\.protocol'"):
        KafkaSecurity.from_pairs(["security.protocl=SSL"])


@pytest.mark.parametrize(
    ("pairs", "match"),
    [
        (["security.protocol=TLS"], "security.protocol must be one of"),
        (["security.protocol=SASL_SSL"], "needs sasl.mechanism"),
        (["sasl.mechanism=PLAIN", "sasl.mechanisms=SCRAM-SHA-256"], "disagree"),
        (["ssl.ca.location=a", "ssl.ca.location=b"], "given twice"),
        (["no-equals-sign"], "is not KEY=VALUE"),
        (["=value"], "is not KEY=VALUE"),
    ],
)
def test_invalid_settings(pairs: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KafkaSecurity.from_pairs(pairs)


def test_secrets_never_show() -> None:
    security = KafkaSecurity.from_pairs([*SCRAM, "ssl.key.password=keypass-secret"])
    shown = [repr(security), str(security), str(security.masked())]
    for text in shown:
        assert "hunter2" not in text
        assert "keypass" not in text
    assert security.masked()["sasl.password"] == "***"
    assert security.masked()["sasl.username"] == "alice"
    assert "SCRAM-SHA-512" in str(security)
    # A malformed pair is quoted in the error, but not a password's value.
    with pytest.raises(ConfigError) as info:
        KafkaSecurity.from_pairs(["sasl.password"])
    assert "sasl.password" in str(info.value)


def test_spark_options_prefix_every_setting() -> None:
    security = KafkaSecurity.from_pairs(SCRAM)
    assert security.spark_options() == {f"kafka.{k}": v for k, v in security.settings}


def test_spark_source_and_sink_take_the_settings_but_do_not_show_them() -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    from sparkiq.spark.sink import SinkOptions
    from sparkiq.spark.source import SourceOptions

    options = {"bootstrap.servers": "b:1", **KafkaSecurity.from_pairs(SCRAM).spark_options()}
    source = SourceOptions.parse({**options, "subscribe": "t"})
    schema = StructType([StructField("value", BinaryType())])
    sink = SinkOptions.parse({**options, "topic": "t"}, schema)
    for parsed in (source, sink):
        assert dict(parsed.kafka_config)["sasl.password"] == "hunter2-secret"
        assert dict(parsed.kafka_config)["security.protocol"] == "SASL_PLAINTEXT"
        assert "hunter2" not in repr(parsed)


# ---- librdkafka ---------------------------------------------------------------------------


def test_librdkafka_accepts_good_settings() -> None:
    KafkaSecurity.from_pairs(SCRAM).check()
    PLAINTEXT.check()


@pytest.mark.parametrize(
    ("pairs", "match"),
    [
        (["ssl.ca.locaton=/tmp/ca.pem"], "No such configuration property"),
        (["security.protocol=SSL", "ssl.ca.location=/nonexistent/ca.pem"], "ssl.ca.location"),
        (["security.protocol=SASL_SSL", "sasl.mechanism=NOPE"], "Unsupported SASL mechanism"),
    ],
)
def test_librdkafka_refusals_are_config_errors(pairs: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KafkaSecurity.from_pairs(pairs).check()


# ---- aiokafka -----------------------------------------------------------------------------


def test_aiokafka_sasl_mapping() -> None:
    kwargs = KafkaSecurity.from_pairs(SCRAM).aiokafka_kwargs()
    assert kwargs == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "hunter2-secret",
    }
    plain = KafkaSecurity.from_pairs(
        ["security.protocol=sasl_ssl", "sasl.mechanisms=plain", "sasl.username=u", "sasl.password="]
    ).aiokafka_kwargs()
    assert plain["security_protocol"] == "SASL_SSL"
    assert plain["sasl_mechanism"] == "PLAIN"
    assert plain["sasl_plain_password"] == ""
    assert isinstance(plain["ssl_context"], ssl.SSLContext)


@pytest.mark.parametrize(
    ("pairs", "match"),
    [
        (["security.protocol=SASL_SSL", "sasl.mechanism=GSSAPI"], "cannot be used by"),
        (["security.protocol=SASL_SSL", "sasl.mechanism=OAUTHBEARER"], "cannot be used by"),
        (["security.protocol=SASL_SSL", "sasl.mechanism=PLAIN"], "needs sasl.username"),
        (["security.protocol=SSL", "ssl.keystore.location=k.p12"], "ssl.keystore.location"),
        (["security.protocol=SASL_SSL", "sasl.mechanism=GSSAPI", "sasl.kerberos.keytab=k"], "kerb"),
    ],
)
def test_what_aiokafka_cannot_do_is_a_config_error(pairs: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KafkaSecurity.from_pairs(pairs).aiokafka_kwargs()


def test_group_member_refuses_such_settings_at_construction() -> None:
    security = KafkaSecurity.from_pairs(["security.protocol=SASL_SSL", "sasl.mechanism=GSSAPI"])
    with pytest.raises(ConfigError, match="GSSAPI"):
        _member("127.0.0.1:1", security)


class _Pki:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client key pair, as files."""

    def __init__(self, root: Path) -> None:
        now = datetime.datetime.now(datetime.UTC)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparkiq test CA")])
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca_file = root / "ca.pem"
        self.ca_file.write_bytes(self.ca.public_bytes(serialization.Encoding.PEM))
        self.server_cert, self.server_key = self._leaf(
            root, "server", ExtendedKeyUsageOID.SERVER_AUTH, password=None
        )
        self.client_cert, self.client_key = self._leaf(
            root, "client", ExtendedKeyUsageOID.CLIENT_AUTH, password=b"key-secret"
        )

    def _leaf(
        self, root: Path, name: str, usage: x509.ObjectIdentifier, password: bytes | None
    ) -> tuple[Path, Path]:
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password)
            if password
            else serialization.NoEncryption()
        )
        cert_file, key_file = root / f"{name}.pem", root / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
            )
        )
        return cert_file, key_file

    def client_settings(self, *extra: str) -> KafkaSecurity:
        return KafkaSecurity.from_pairs(
            [
                "security.protocol=SSL",
                f"ssl.ca.location={self.ca_file}",
                f"ssl.certificate.location={self.client_cert}",
                f"ssl.key.location={self.client_key}",
                "ssl.key.password=key-secret",
                *extra,
            ]
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> _Pki:
    return _Pki(tmp_path_factory.mktemp("pki"))


def test_ssl_context_from_files(pki: _Pki) -> None:
    security = pki.client_settings()
    security.check()  # librdkafka loads the same files
    context = security.aiokafka_kwargs()["ssl_context"]
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "sparkiq test CA"),),)
    ]
    relaxed = pki.client_settings("ssl.endpoint.identification.algorithm=none")
    assert not relaxed.aiokafka_kwargs()["ssl_context"].check_hostname


def test_wrong_key_password_is_a_config_error(pki: _Pki) -> None:
    security = pki.client_settings().merged(KafkaSecurity.from_pairs(["ssl.key.password=nope"]))
    with pytest.raises(ConfigError, match="TLS context"):
        security.aiokafka_kwargs()
    with pytest.raises(ConfigError):
        security.check()


def test_ssl_context_completes_a_real_handshake(pki: _Pki) -> None:
    """The context verifies a server signed by the CA and presents the client certificate."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.server_cert, pki.server_key)
    server_ctx.load_verify_locations(pki.ca_file)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    peer: list[object] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            peer.append(tls.getpeercert())
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    context = pki.client_settings().aiokafka_kwargs()["ssl_context"]
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.recv(2) == b"ok"
    thread.join(5)
    listener.close()
    assert peer, "the server did not complete the handshake"
    assert peer[0], "the server saw no client certificate"


# ---- node settings ------------------------------------------------------------------------


def test_node_settings_read_the_file_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("\n".join(SCRAM) + "\n")
    monkeypatch.setenv("SPARKIQ_KAFKA_CONFIG", str(path))
    settings = NodeSettings()
    assert settings.kafka_config == KafkaSecurity.from_pairs(SCRAM)
    assert settings.model_dump()["kafka_config"]["sasl.password"] == "***"
    assert "hunter2" not in settings.model_dump_json()
    assert "hunter2" not in repr(settings)
    monkeypatch.delenv("SPARKIQ_KAFKA_CONFIG")
    assert NodeSettings().kafka_config == PLAINTEXT


def test_node_settings_refuse_a_mapping() -> None:
    # A mapping is refused: a validation error of one would print it, passwords included.
    with pytest.raises(ValueError, match="KafkaSecurity or a properties file"):
        NodeSettings(kafka_config={"security.protocol": "SSL"})  # type: ignore[arg-type]


# ---- against real brokers -----------------------------------------------------------------


def _member(bootstrap: str, security: KafkaSecurity) -> GroupMember:
    return GroupMember(
        bootstrap=bootstrap,
        group_id="sparkiq-security-test.serving",
        member_info=lambda: MemberInfo(url="http://127.0.0.1:1"),
        on_assignment=lambda _map: None,
        standby_replicas=0,
        acceptable_lag=0,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        security=security,
    )


@pytest.fixture(scope="module")
def scram_broker() -> Iterator[str]:
    """Apache Kafka whose SASL listener (its address is yielded) takes bob's SCRAM login."""
    with KafkaBroker(scram_users={"bob": BOB_PASSWORD}) as kafka:
        yield kafka.sasl_bootstrap_servers
        # Clients a failed test left in reference cycles (an exception's traceback holds
        # the frame that made them) go while the broker is up, not retrying against it after.
        gc.collect()


def _timed(fn: Callable[[], object]) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def test_plaintext_given_explicitly_works(bootstrap: str) -> None:
    security = KafkaSecurity.from_pairs(["security.protocol=PLAINTEXT"])
    assert isinstance(read_catalog(bootstrap, app="sparkiq-sec-plain", security=security), dict)


def test_cli_table_list_with_explicit_plaintext(bootstrap: str, tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=PLAINTEXT\n")
    runner = CliRunner()
    for args, env in (
        (["--kafka-property", "security.protocol=PLAINTEXT"], {}),
        ([], {"SPARKIQ_KAFKA_CONFIG": str(path)}),
    ):
        result = runner.invoke(
            main,
            ["table", "list", "--bootstrap-servers", bootstrap, "--app", "sparkiq-sec", *args],
            env=env,
        )
        assert result.exit_code == 0, result.output
        assert "no tables registered" in result.output


def test_cli_refuses_non_security_settings_before_connecting() -> None:
    result = CliRunner().invoke(
        main,
        [
            "table",
            "list",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--kafka-property",
            "enable.auto.commit=true",
        ],
    )
    assert result.exit_code == 2
    assert "not a security setting" in result.output


def test_cli_ssl_against_a_plaintext_broker_fails_clearly_and_in_time(bootstrap: str) -> None:
    runner = CliRunner()
    result = None

    def invoke() -> None:
        nonlocal result
        result = runner.invoke(
            main,
            [
                "table",
                "list",
                "--bootstrap-servers",
                bootstrap,
                "--kafka-property",
                "security.protocol=SSL",
            ],
        )

    # The failed handshake ends the wait: no retrying for the whole 10 s metadata timeout.
    assert _timed(invoke) < 8
    assert result is not None
    assert result.exit_code == 2
    assert "security.protocol=SSL" in result.output
    assert bootstrap in result.output


def test_sasl_login_refused_by_the_broker_is_reported(scram_broker: str) -> None:
    """librdkafka clients log in with the settings; the broker's refusal reaches the user."""
    security = KafkaSecurity.from_pairs(SCRAM)
    with pytest.raises(KafkaError) as info:
        read_catalog(scram_broker, timeout_s=5, security=security)
    message = str(info.value)
    assert "SASL" in message
    assert "SCRAM-SHA-512" in message
    assert "hunter2" not in message


def test_cli_sasl_login_refused(scram_broker: str) -> None:
    args = ["table", "list", "--bootstrap-servers", scram_broker]
    args += [arg for pair in SCRAM for arg in ("--kafka-property", pair)]
    started = time.monotonic()
    result = CliRunner().invoke(main, args)
    assert time.monotonic() - started < 8  # the refusal ends the wait for metadata
    assert result.exit_code == 2
    assert "SASL authentication error" in result.output
    assert "hunter2" not in result.output


def test_accepted_scram_login_reads_and_writes(scram_broker: str, tmp_path: Path) -> None:
    """bob's settings reach every librdkafka client: topics, the catalog, the CLI."""
    security = KafkaSecurity.from_pairs(BOB)
    create_topic(scram_broker, "sec-accepted", 2, security=security)
    assert read_catalog(scram_broker, app="sparkiq-sec-accepted", security=security) == {}
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{pair}\n" for pair in BOB))
    result = CliRunner().invoke(
        main,
        ["table", "list", "--bootstrap-servers", scram_broker, "--kafka-config", str(config)],
    )
    assert result.exit_code == 0, result.output
    assert BOB_PASSWORD not in result.output


def test_group_member_joins_with_an_accepted_scram_login(scram_broker: str) -> None:
    security = KafkaSecurity.from_pairs(BOB)
    create_topic(scram_broker, "sec-group", 2, security=security)
    maps: list[object] = []

    async def join() -> None:
        member = GroupMember(
            bootstrap=scram_broker,
            group_id="sparkiq-security-bob.serving",
            member_info=lambda: MemberInfo(url="http://127.0.0.1:1"),
            on_assignment=maps.append,
            standby_replicas=0,
            acceptable_lag=0,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000,
            security=security,
        )
        await member.start(["sec-group"])
        try:
            deadline = time.monotonic() + 30
            while not maps:
                assert time.monotonic() < deadline, "no assignment within 30 s"
                await asyncio.sleep(0.1)
        finally:
            await member.stop()

    asyncio.run(join())
    assert maps


def test_without_credentials_the_secured_broker_refuses(scram_broker: str) -> None:
    with pytest.raises(KafkaError, match=r"security\.protocol=PLAINTEXT"):
        read_catalog(scram_broker, timeout_s=3)


def test_group_member_logs_in_with_the_settings(scram_broker: str) -> None:
    """aiokafka gets the SASL settings: the broker answers its SCRAM login (and refuses it)."""

    async def join() -> None:
        await _member(scram_broker, KafkaSecurity.from_pairs(SCRAM)).start(["t"])

    start = time.monotonic()
    with pytest.raises(KafkaError) as info:
        asyncio.run(join())
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "refused the SCRAM-SHA-512 login" in message
    assert "hunter2" not in message


def _node(bootstrap: str, tmp_path: Path, *kafka_args: str) -> NodeProcess:
    """A started `sparkiq serve` process with *kafka_args*, logging to tmp_path/node.log."""
    return NodeProcess(
        port=free_port(),
        state_dir=tmp_path / "state",
        bootstrap_servers=bootstrap,
        app="sparkiq-sec-node",
        log_path=tmp_path / "node.log",
        extra_args=kafka_args,
    ).start()


def _wait_ready(node: NodeProcess, tmp_path: Path) -> None:
    deadline = time.monotonic() + 60
    while not node.is_ready():
        assert node.is_running(), (tmp_path / "node.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "node not ready within 60 s"
        time.sleep(0.2)


def test_serving_node_with_explicit_plaintext_becomes_ready(bootstrap: str, tmp_path: Path) -> None:
    node = _node(bootstrap, tmp_path, "--kafka-property", "security.protocol=PLAINTEXT")
    try:
        _wait_ready(node, tmp_path)
    finally:
        node.stop()


def test_serving_node_logs_in_with_scram_and_becomes_ready(
    scram_broker: str, tmp_path: Path
) -> None:
    node = _node(
        scram_broker, tmp_path, *[arg for pair in BOB for arg in ("--kafka-property", pair)]
    )
    try:
        _wait_ready(node, tmp_path)
    finally:
        node.stop()
    assert BOB_PASSWORD not in (tmp_path / "node.log").read_text()


def test_serving_node_with_unusable_settings_exits_at_start(bootstrap: str, tmp_path: Path) -> None:
    node = _node(
        bootstrap,
        tmp_path,
        "--kafka-property",
        "security.protocol=SASL_PLAINTEXT",
        "--kafka-property",
        # librdkafka can (so the CLI's check passes); the group member cannot.
        "sasl.mechanism=OAUTHBEARER",
    )
    try:
        assert node.proc is not None
        assert node.proc.wait(timeout=60) == 2
    finally:
        node.stop()
    assert (
        "OAUTHBEARER cannot be used by the serving node's group member"
        in (tmp_path / "node.log").read_text()
    )


class _RecordingReader:
    """Stands in for ``spark.readStream``: records the options a query is built with."""

    def __init__(self) -> None:
        self.recorded: dict[str, str] = {}

    def format(self, _name: str) -> _RecordingReader:
        return self

    def option(self, key: str, value: str) -> _RecordingReader:
        self.recorded[key] = value
        return self

    def options(self, **options: str) -> _RecordingReader:
        self.recorded.update(options)
        return self

    def load(self) -> dict[str, str]:
        return dict(self.recorded)


def test_pipeline_context_hands_the_settings_to_sources_topics_and_catalog(
    bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    from sparkiq.core.tables import TableDef
    from sparkiq.kafka.admin import partition_count
    from sparkiq.spark.pipeline import PipelineContext

    security = KafkaSecurity.from_pairs(["security.protocol=PLAINTEXT"])
    ctx = PipelineContext(
        spark=cast(Any, SimpleNamespace(readStream=_RecordingReader())),
        bootstrap_servers=bootstrap,
        checkpoint_dir=tmp_path,
        app=unique_name("sec-app"),
        kafka_security=security,
    )
    loaded = cast(dict[str, str], ctx.read("orders"))
    assert loaded["kafka.security.protocol"] == "PLAINTEXT"
    assert loaded["bootstrap.servers"] == bootstrap
    topic = unique_name("sec-topic")
    ctx.create_topics(topic, partitions=2)
    assert partition_count(bootstrap, topic, security=security) == 2
    ctx.prepare_table(TableDef(name="t", topic=topic, partitions=2))
    assert "t" in read_catalog(bootstrap, app=ctx.app, security=security)
