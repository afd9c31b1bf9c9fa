"""Java libraries from Maven Central: resolved once by Maven or by PySpark's Ivy, the same
jars either way, and clear errors when Java or the artifact is missing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from sparkiq.dev.jars import (
    KAFKA,
    KAFKA_STREAMS,
    KAFKA_VERSION,
    JarsError,
    JarSet,
    Resolver,
    _run,
    install_jars,
    installed_jars,
    jar_artifact,
    jar_set_named,
    jars_root,
    java_executable,
)

# A small artifact with one dependency, so that both resolvers can be run for real quickly.
SMALL = JarSet(
    name="small",
    version="1",
    artifacts=("org.slf4j:slf4j-simple:1.7.36",),
    title="slf4j-simple",
)


@pytest.mark.parametrize("resolver", [Resolver.MAVEN, Resolver.IVY])
def test_each_resolver_installs_the_jars_with_their_dependencies_once(
    tmp_path: Path, resolver: Resolver
) -> None:
    said: list[str] = []
    jars = install_jars(SMALL, root=tmp_path, progress=said.append, resolver=resolver)
    assert sorted(j.name for j in jars) == ["slf4j-api-1.7.36.jar", "slf4j-simple-1.7.36.jar"]
    assert all(j.parent == tmp_path / "small-1" for j in jars)
    # Resolving ..., "still at it" lines if it takes long, then where they went.
    assert said[0].startswith("resolving slf4j-simple")
    assert all("still at it" in line for line in said[1:-1])
    assert said[-1].startswith("slf4j-simple: 2 jars in")
    # Found again without resolving: nothing is said, nothing runs.
    again: list[str] = []
    assert install_jars(SMALL, root=tmp_path, progress=again.append) == jars
    assert again == []
    # Nothing is left beside the set (the resolution's own working directory is gone).
    assert [p.name for p in tmp_path.iterdir()] == ["small-1"]


def test_a_set_with_a_missing_jar_is_not_installed(tmp_path: Path) -> None:
    jars = install_jars(SMALL, root=tmp_path, resolver=Resolver.IVY)
    jars[0].unlink()
    assert installed_jars(SMALL, root=tmp_path) is None


def test_an_artifact_that_does_not_exist_fails_clearly(tmp_path: Path) -> None:
    missing = JarSet("nope", "1", ("org.sparkiq.nowhere:nothing:0.0.1",), "nothing")
    with pytest.raises(JarsError, match="Maven Central reachable"):
        install_jars(missing, root=tmp_path, resolver=Resolver.MAVEN)
    assert installed_jars(missing, root=tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_no_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(JarsError, match=r"Java 17 or newer .*holds no bin/java.*--broker dev"):
        java_executable()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JarsError, match="no `java` on PATH"):
        install_jars(SMALL, root=tmp_path / "jars")


def test_the_jars_live_in_the_environment_unless_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SPARKIQ_JARS_DIR", raising=False)
    assert jars_root().parts[-3:] == ("share", "sparkiq", "jars")
    monkeypatch.setenv("SPARKIQ_JARS_DIR", str(tmp_path))
    assert jars_root() == tmp_path


def test_kafka_is_pinned_with_its_log_binding() -> None:
    assert KAFKA.version == "4.4.0"
    assert f"org.apache.kafka:kafka_2.13:{KAFKA.version}" in KAFKA.artifacts
    assert any("log4j-slf4j-impl" in a for a in KAFKA.artifacts)


def test_a_long_resolution_says_it_is_still_at_it_in_plain_lines(tmp_path: Path) -> None:
    said: list[str] = []
    wait = [sys.executable, "-c", "import time; time.sleep(0.6)"]
    _run(wait, tmp_path / "out.log", "Ivy resolving x", 30, progress=said.append, every_s=0.2)
    assert len(said) >= 2
    assert all(line.startswith("Ivy resolving x: still at it after ") for line in said)
    assert all(line.endswith(" s") and "\r" not in line for line in said)


def test_a_resolution_past_its_time_is_stopped_and_said(tmp_path: Path) -> None:
    began = time.monotonic()
    hang = [sys.executable, "-c", "import time; time.sleep(30)"]
    with pytest.raises(JarsError, match="took over 1s"):
        _run(hang, tmp_path / "out.log", "mvn resolving x", 1, every_s=0.3)
    assert time.monotonic() - began < 10


@pytest.mark.parametrize("resolver", [Resolver.MAVEN, Resolver.IVY])
def test_excluded_dependencies_are_left_out(tmp_path: Path, resolver: Resolver) -> None:
    alone = JarSet(
        name="alone",
        version="1",
        artifacts=SMALL.artifacts,
        title="slf4j-simple alone",
        excludes=("org.slf4j:slf4j-api",),
    )
    jars = install_jars(alone, root=tmp_path, resolver=resolver)
    assert [j.name for j in jars] == ["slf4j-simple-1.7.36.jar"]


def test_a_set_beside_pyspark_drops_what_pyspark_carries(tmp_path: Path) -> None:
    # PySpark carries slf4j-api (another version): only slf4j-simple is left.
    beside = JarSet("beside", "1", SMALL.artifacts, "slf4j-simple", beside_pyspark=True)
    jars = install_jars(beside, root=tmp_path, resolver=Resolver.IVY)
    assert [j.name for j in jars] == ["slf4j-simple-1.7.36.jar"]


def test_a_jar_file_names_its_artifact() -> None:
    assert jar_artifact("kafka-clients-3.9.2.jar") == "kafka-clients"
    assert jar_artifact("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert jar_artifact("scala-parallel-collections_2.13-1.2.0.jar") == (
        "scala-parallel-collections_2.13"
    )
    assert jar_artifact("netty-transport-native-epoll-4.1.118.Final-linux-x86_64.jar") == (
        "netty-transport-native-epoll"
    )


def test_the_spark_kafka_set_is_the_connector_at_pysparks_version() -> None:
    import pyspark

    jar_set = jar_set_named("spark-kafka")
    assert jar_set.dir_name == f"spark-kafka-{pyspark.__version__}"
    assert jar_set.artifacts == (
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}",
    )
    assert "org.apache.spark:spark-sql_2.13" in jar_set.excludes
    assert jar_set.beside_pyspark
    assert jar_set_named("kafka") is KAFKA
    with pytest.raises(JarsError, match="no jar set"):
        jar_set_named("flink")


def test_the_kafka_streams_set_is_kafka_streams_at_the_brokers_version() -> None:
    jar_set = jar_set_named("kafka-streams")
    assert jar_set is KAFKA_STREAMS
    assert jar_set.dir_name == f"kafka-streams-{KAFKA_VERSION}"
    assert f"org.apache.kafka:kafka-streams:{KAFKA_VERSION}" in jar_set.artifacts
