"""Java libraries that sparkiq runs (Apache Kafka, Spark's Kafka connector), resolved from
Maven Central once.

A `JarSet` (`sparkiq.core.jarsets`) names Maven coordinates; `install_jars` resolves them
with their runtime dependencies (less the set's exclusions, and less what PySpark carries
for a set that runs beside it) into a directory of its own under the environment
(``<sys.prefix>/share/sparkiq/jars``, or ``$SPARKIQ_JARS_DIR``) and writes a stamp listing
the jars, so later runs find them there and never resolve again. It resolves with Maven
(``mvn``) where it is installed, else with the Apache Ivy that every PySpark install
carries (``pyspark/jars/ivy-*.jar``): what a user of sparkiq has without our machine. Both
read Maven Central (Maven through its own settings, so a mirror in ``~/.m2/settings.xml``
is honoured).

    JarsError (a BrokerError)   Java or a resolver is missing, or the resolution failed
"""

from __future__ import annotations

import enum
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import escape

from sparkiq.core.errors import BrokerError
from sparkiq.core.jarsets import (
    KAFKA,
    KAFKA_STREAMS,
    KAFKA_VERSION,
    SPARK_KAFKA,
    STAMP,
    JarSet,
    installed_jars,
    jars_root,
    spark_kafka_connector,
)

__all__ = [
    "JAR_SET_NAMES",
    "JAVA_MIN_VERSION",
    "KAFKA",
    "KAFKA_STREAMS",
    "KAFKA_VERSION",
    "JarSet",
    "JarsError",
    "Resolver",
    "install_jars",
    "installed_jars",
    "ivy_jar",
    "jar_artifact",
    "jar_set_named",
    "jars_root",
    "java_executable",
    "java_version",
    "pyspark_jars",
    "spark_kafka_for_pyspark",
]

JAVA_MIN_VERSION = 17


class JarsError(BrokerError):
    """Java libraries cannot be found or resolved."""


class Resolver(enum.Enum):
    """What resolves a jar set: Maven where it is installed, else PySpark's Ivy (AUTO)."""

    AUTO = "auto"
    MAVEN = "maven"
    IVY = "ivy"


def pyspark_jars() -> Path | None:
    """The directory of the jars the installed PySpark carries, if PySpark is installed."""
    try:
        import pyspark
    except ImportError:
        return None
    folder = Path(pyspark.__file__).parent / "jars"
    return folder if folder.is_dir() else None


def spark_kafka_for_pyspark() -> JarSet:
    """Spark's Kafka connector at the version (and Scala) of the installed PySpark."""
    folder = pyspark_jars()
    if folder is None:
        raise JarsError(
            "Spark's Kafka connector is installed at the version of PySpark, which is not "
            "installed: install sparkiq[spark]"
        )
    import pyspark

    core = sorted(folder.glob("spark-core_*.jar"))
    match = re.match(r"spark-core_(\d+\.\d+)-", core[-1].name) if core else None
    return spark_kafka_connector(pyspark.__version__, match.group(1) if match else "2.13")


def jar_set_named(name: str) -> JarSet:
    """`KAFKA` for "kafka", `KAFKA_STREAMS` for "kafka-streams", the connector of the
    installed PySpark for "spark-kafka"."""
    if name == SPARK_KAFKA:
        return spark_kafka_for_pyspark()
    for jar_set in (KAFKA, KAFKA_STREAMS):
        if name == jar_set.name:
            return jar_set
    raise JarsError(f"no jar set {name!r}: {', '.join(JAR_SET_NAMES)}")


JAR_SET_NAMES = (KAFKA.name, KAFKA_STREAMS.name, SPARK_KAFKA)

Progress = Callable[[str], None]
STILL_EVERY_S = 15.0  # how often a resolution in progress says it still is


def _quiet(_: str) -> None:
    pass


def java_executable() -> str:
    """The `java` to run: ``$JAVA_HOME/bin/java``, else the one on PATH; JarsError if none
    or if it is older than Java 17."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).is_file():
        where = (
            f"JAVA_HOME is {home}, which holds no bin/java"
            if home
            else "no JAVA_HOME, no `java` on PATH"
        )
        raise JarsError(
            f"Java {JAVA_MIN_VERSION} or newer is needed to run Apache Kafka and Spark ({where});"
            " install a JDK (Debian: apt-get install openjdk-17-jre-headless) and set JAVA_HOME"
            " to it, or use the dev broker (--broker dev)"
        )
    version = java_version(java)
    if version is not None and version < JAVA_MIN_VERSION:
        raise JarsError(
            f"{java} is Java {version}; Apache Kafka {KAFKA_VERSION} needs Java "
            f"{JAVA_MIN_VERSION} or newer: set JAVA_HOME to a newer JDK or use the dev "
            "broker (--broker dev)"
        )
    return java


def java_version(java: str) -> int | None:
    """The feature version of *java* (17 for "17.0.15"), None when it cannot tell."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older call themselves "1.8".
    return int(match.group(2) or 0) if major == 1 else major


def install_jars(
    jar_set: JarSet,
    *,
    root: Path | None = None,
    progress: Progress = _quiet,
    resolver: Resolver = Resolver.AUTO,
) -> list[Path]:
    """The jars of *jar_set*, resolved from Maven Central on the first call only."""
    found = installed_jars(jar_set, root)
    if found is not None:
        return found
    java = java_executable()
    folder = (root or jars_root()) / jar_set.dir_name
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Resolve into a fresh directory beside the target and rename it at the end, so an
    # interrupted resolution never leaves a half-filled set that looks installed.
    work = Path(tempfile.mkdtemp(prefix=f".{jar_set.dir_name}-", dir=folder.parent))
    try:
        mvn = shutil.which("mvn") if resolver is not Resolver.IVY else None
        if resolver is Resolver.MAVEN and mvn is None:
            raise JarsError("mvn is not on PATH; install Maven (Debian: apt-get install maven)")
        if mvn is not None:
            progress(f"resolving {jar_set.title} from Maven Central with {mvn} (once)")
            _resolve_with_maven(mvn, jar_set, work, progress)
        else:
            ivy = ivy_jar()
            if ivy is None:
                raise JarsError(
                    f"{jar_set.title} is not installed and nothing here can fetch it: install "
                    f"Maven (Debian: apt-get install maven) or PySpark (it carries Ivy); "
                    f"{jar_set.fallback}"
                )
            progress(f"resolving {jar_set.title} from Maven Central with PySpark's Ivy (once)")
            _resolve_with_ivy(java, ivy, jar_set, work, progress)
        if jar_set.beside_pyspark:
            _drop_what_pyspark_carries(work)
        jars = sorted(p.name for p in work.glob("*.jar"))
        if not jars:
            raise JarsError(f"resolving {jar_set.title} gave no jars; see {work}")
        (work / STAMP).write_text("\n".join(jars) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        work.rename(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"{jar_set.title}: {len(jars)} jars in {folder}")
    result = installed_jars(jar_set, root)
    assert result is not None
    return result


def ivy_jar() -> Path | None:
    """The Apache Ivy jar inside the installed PySpark, if any."""
    folder = pyspark_jars()
    found = sorted(folder.glob("ivy-*.jar")) if folder is not None else []
    return found[-1] if found else None


_JAR_NAME = re.compile(r"(?P<artifact>.+?)-(?P<version>\d[\w.]*)(?:-[A-Za-z][\w.-]*)?\.jar")


def jar_artifact(file_name: str) -> str:
    """The artifact a jar file is of: "kafka-clients" for "kafka-clients-3.9.2.jar"."""
    match = _JAR_NAME.fullmatch(file_name)
    return match.group("artifact") if match else file_name


def _drop_what_pyspark_carries(folder: Path) -> None:
    """Remove the jars of *folder* whose artifact PySpark carries (at whatever version):
    Spark's class path comes first, so they would never be loaded, only shipped."""
    carried = pyspark_jars()
    if carried is None:
        return
    have = {jar_artifact(j.name) for j in carried.glob("*.jar")}
    for jar in folder.glob("*.jar"):
        if jar_artifact(jar.name) in have:
            jar.unlink()


def _coordinates(artifact: str) -> tuple[str, str, str]:
    parts = artifact.split(":")
    if len(parts) != 3 or not all(parts):
        raise JarsError(f"not a Maven coordinate group:artifact:version: {artifact!r}")
    return parts[0], parts[1], parts[2]


def _group_artifact(name: str) -> tuple[str, str]:
    parts = name.split(":")
    if len(parts) != 2 or not all(parts):
        raise JarsError(f"not a Maven group:artifact: {name!r}")
    return parts[0], parts[1]


def _run(
    command: list[str],
    log: Path,
    what: str,
    timeout_s: float,
    progress: Progress = _quiet,
    every_s: float = STILL_EVERY_S,
    fallback: str = KAFKA.fallback,
) -> None:
    """Run a resolver, its output in `log`; `progress` hears that it is still at work every
    `every_s` (a resolution can take minutes in silence: a plain line, for a terminal or a
    file alike)."""
    began = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            while True:
                left = timeout_s - (time.monotonic() - began)
                if left <= 0:
                    raise JarsError(f"{what} took over {timeout_s:.0f}s; see {log}")
                try:
                    proc.wait(timeout=min(every_s, left))
                    break
                except subprocess.TimeoutExpired:
                    progress(f"{what}: still at it after {time.monotonic() - began:.0f} s")
        finally:
            if proc.poll() is None:  # timed out, or interrupted: not left running
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        shown = "\n    ".join(tail)
        raise JarsError(
            f"{what} failed (exit {proc.returncode}); is Maven Central reachable? "
            f"The last lines:\n    {shown}\n({fallback})"
        )


def _resolve_with_maven(mvn: str, jar_set: JarSet, out: Path, progress: Progress) -> None:
    exclusions = "".join(
        f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
        for g, a in map(_group_artifact, jar_set.excludes)
    )
    deps = "".join(
        f"<dependency><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId>"
        f"<version>{escape(v)}</version><exclusions>{exclusions}</exclusions></dependency>"
        for g, a, v in map(_coordinates, jar_set.artifacts)
    )
    with tempfile.TemporaryDirectory(prefix="sparkiq-mvn-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(
            '<project xmlns="http://maven.apache.org/POM/4.0.0">'
            "<modelVersion>4.0.0</modelVersion><groupId>sparkiq.local</groupId>"
            f"<artifactId>{escape(jar_set.name)}-jars</artifactId><version>1</version>"
            f"<dependencies>{deps}</dependencies></project>"
        )
        _run(
            [
                mvn,
                "-B",
                "-q",
                "--no-transfer-progress",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={out}",
                "-DincludeScope=runtime",
            ],
            Path(tmp) / "mvn.log",
            f"mvn resolving {jar_set.title}",
            timeout_s=900,
            progress=progress,
            fallback=jar_set.fallback,
        )


def _resolve_with_ivy(java: str, ivy: Path, jar_set: JarSet, out: Path, progress: Progress) -> None:
    exclusions = "".join(
        f'<exclude org="{escape(g)}" module="{escape(a)}"/>'
        for g, a in map(_group_artifact, jar_set.excludes)
    )
    deps = "".join(
        f'<dependency org="{escape(g)}" name="{escape(a)}" rev="{escape(v)}" '
        f'conf="default->default">{exclusions}</dependency>'
        for g, a, v in map(_coordinates, jar_set.artifacts)
    )
    with tempfile.TemporaryDirectory(prefix="sparkiq-ivy-") as tmp:
        ivy_xml = Path(tmp) / "ivy.xml"
        ivy_xml.write_text(
            '<ivy-module version="2.0"><info organisation="sparkiq.local" '
            f'module="{escape(jar_set.name)}-jars"/><configurations><conf name="default"/>'
            f"</configurations><dependencies>{deps}</dependencies></ivy-module>"
        )
        _run(
            [
                java,
                "-jar",
                str(ivy),
                "-ivy",
                str(ivy_xml),
                "-confs",
                "default",
                "-retrieve",
                str(out / "[artifact]-[revision](-[classifier]).[ext]"),
            ],
            Path(tmp) / "ivy.log",
            f"Ivy resolving {jar_set.title}",
            timeout_s=900,
            progress=progress,
            fallback=jar_set.fallback,
        )
