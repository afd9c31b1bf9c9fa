"""Java libraries that sparkiq runs (Apache Kafka), resolved from Maven Central once.

A `JarSet` names Maven coordinates; `install_jars` resolves them with their runtime dependencies
into a directory of its own under the environment (``<sys.prefix>/share/sparkiq/jars``, or
``$SPARKIQ_JARS_DIR``) and writes a stamp listing the jars, so later runs find them there
and never resolve again. It resolves with Maven (``mvn``) where it is installed, else with
the Apache Ivy that every PySpark install carries (``pyspark/jars/ivy-*.jar``): what a user
of sparkiq has without our machine. Both read Maven Central (Maven through its own settings,
so a mirror in ``~/.m2/settings.xml`` is honoured).

    JarsError (a BrokerError)   Java or a resolver is missing, or the resolution failed
"""

from __future__ import annotations

import enum
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from sparkiq.core.errors import BrokerError

KAFKA_VERSION = "4.4.0"
# Kafka's own distribution logs through log4j2 behind slf4j 1.7 (its libs/ ship this bridge;
# the Maven artifact leaves the binding to the user).
_LOG4J_VERSION = "2.25.5"
JAVA_MIN_VERSION = 17

_STAMP = ".installed"


class JarsError(BrokerError):
    """Java libraries cannot be found or resolved."""


class Resolver(enum.Enum):
    """What resolves a jar set: Maven where it is installed, else PySpark's Ivy (AUTO)."""

    AUTO = "auto"
    MAVEN = "maven"
    IVY = "ivy"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven artifacts ("group:artifact:version") resolved together."""

    name: str
    version: str
    artifacts: tuple[str, ...]
    title: str

    @property
    def dir_name(self) -> str:
        return f"{self.name}-{self.version}"


KAFKA = JarSet(
    name="kafka",
    version=KAFKA_VERSION,
    artifacts=(
        f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{_LOG4J_VERSION}",
    ),
    title=f"Apache Kafka {KAFKA_VERSION}",
)

JAR_SETS = {KAFKA.name: KAFKA}

Progress = Callable[[str], None]
STILL_EVERY_S = 15.0  # how often a resolution in progress says it still is


def _quiet(_: str) -> None:
    pass


def jars_root() -> Path:
    """Where resolved jar sets live: ``$SPARKIQ_JARS_DIR``, else under the environment."""
    configured = os.environ.get("SPARKIQ_JARS_DIR")
    if configured:
        return Path(configured)
    return Path(sys.prefix) / "share" / "sparkiq" / "jars"


def installed_jars(jar_set: JarSet, root: Path | None = None) -> list[Path] | None:
    """The jars of *jar_set* if it was installed completely, else None."""
    folder = (root or jars_root()) / jar_set.dir_name
    stamp = folder / _STAMP
    if not stamp.is_file():
        return None
    jars = [folder / name for name in stamp.read_text().split()]
    return jars if jars and all(j.is_file() for j in jars) else None


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
                    "Maven (Debian: apt-get install maven) or PySpark (it carries Ivy), or "
                    "use the dev broker (--broker dev)"
                )
            progress(f"resolving {jar_set.title} from Maven Central with PySpark's Ivy (once)")
            _resolve_with_ivy(java, ivy, jar_set, work, progress)
        jars = sorted(p.name for p in work.glob("*.jar"))
        if not jars:
            raise JarsError(f"resolving {jar_set.title} gave no jars; see {work}")
        (work / _STAMP).write_text("\n".join(jars) + "\n")
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
    try:
        import pyspark
    except ImportError:
        return None
    found = sorted((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    return found[-1] if found else None


def _coordinates(artifact: str) -> tuple[str, str, str]:
    parts = artifact.split(":")
    if len(parts) != 3 or not all(parts):
        raise JarsError(f"not a Maven coordinate group:artifact:version: {artifact!r}")
    return parts[0], parts[1], parts[2]


def _run(
    command: list[str],
    log: Path,
    what: str,
    timeout_s: float,
    progress: Progress = _quiet,
    every_s: float = STILL_EVERY_S,
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
            f"The last lines:\n    {shown}\n(the dev broker needs none of this: --broker dev)"
        )


def _resolve_with_maven(mvn: str, jar_set: JarSet, out: Path, progress: Progress) -> None:
    deps = "".join(
        f"<dependency><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId>"
        f"<version>{escape(v)}</version></dependency>"
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
        )


def _resolve_with_ivy(java: str, ivy: Path, jar_set: JarSet, out: Path, progress: Progress) -> None:
    deps = "".join(
        f'<dependency org="{escape(g)}" name="{escape(a)}" rev="{escape(v)}" '
        'conf="default->default"/>'
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
        )
