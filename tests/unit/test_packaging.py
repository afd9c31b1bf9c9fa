"""What the package asks for at run time: no HTTP server or client it does not use."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# Carried the API (granian) or were the load client (aiohttp); nothing in src/ imports them.
NOT_AT_RUN_TIME = ("granian", "aiohttp")


def requirement_name(requirement: str) -> str:
    """The distribution name of a PEP 508 requirement, normalized (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_granian_and_aiohttp_are_not_runtime_dependencies() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    runtime = {requirement_name(r) for r in project["dependencies"]}
    assert runtime.isdisjoint(NOT_AT_RUN_TIME), sorted(runtime)
    # Nor in the extra a node is deployed with.
    spark = {requirement_name(r) for r in project["optional-dependencies"]["spark"]}
    assert spark.isdisjoint(NOT_AT_RUN_TIME), sorted(spark)


def test_the_server_and_the_node_load_no_granian() -> None:
    script = (
        "import sys, sparkiq.http.app.server, sparkiq.cli.serving\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('granian', 'aiohttp')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
