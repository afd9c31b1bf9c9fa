"""End to end: the README's blocks run as written, against a live cluster, and print what the
README says they print.

The blocks marked `run` (tests/support/readme.py) run in README order in one terminal
(tests/support/terminal.py), the README's "second terminal": the walkthrough of "Using it"
makes two topics, registers them as tables, starts three `sparkiq serve` nodes with `&` and
queries them; later blocks query the same cluster. A `background` block runs in a terminal of
its own beside them until the test presses Ctrl-C. The nodes are stopped by their PIDs at
the end (`jobs -p` of the second terminal).

They run in a new directory holding what the README's set-up leaves: `.venv` (the virtualenv
running the tests). What differs from a reader's machine is said here, once:

- the addresses (`readme.ADDRESSES`): the session's Apache Kafka broker (tests/conftest.py)
  stands for the one `sparkiq broker` started in the first terminal, and three free ports
  for 8101..8103; the test replaces these strings and rewrites nothing else;
- the environment: a fresh SPARKIQ_APP, so that the catalog holds the README's tables only
  (the session's broker is shared), no other SPARKIQ_ variable, and PYTHONPATH naming the
  source under test first.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import sparkiq
from sparkiq.dev.ports import free_port
from tests.support import readme
from tests.support.readme import Mode
from tests.support.terminal import Terminal, stop_jobs

pytestmark = pytest.mark.e2e

# What the README says blocks print: (a line of the block, what its terminal prints), each
# block found by that line. The background block's lines are awaited after the next block.
PRINTS: list[tuple[str, list[str]]] = [
    (
        "sparkiq get customers C00042",
        [
            "table 'customers' registered",
            "table 'store-sales' registered",
            '"key": "C00042"',  # `sparkiq get`: the whole answer, indented
            '"token": "3-165"',
            '{"table":"customers","key":"C00042","value":{"id":42,"tier":0}',  # `watch`
            '{"key":"S001","start":',  # `windows`
        ],
    ),
    (
        "sparkiq changes customers --prefix C0001",
        ['"key":"C00010","value":{"id":10,"tier":2}', '"key":"C00011","value":null'],
    ),
    (
        'client.get("customers", "C00042")',
        [
            "{'id': 42, 'tier': 0}\n",
            "[{'key': 'C00042', 'value': {'id': 42, 'tier': 0}}, {'key': 'C00011', 'value': None}]",
            "'partition': 3",
        ],
    ),
    ("after=3-165", ['"offset":165,"token":"3-165"']),
]
RUN_TIMEOUT_S = 150.0  # a block (the walkthrough: three nodes start and restore)


def test_the_readme_s_blocks_run_as_written(
    bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str]
) -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the README's set-up makes .venv; these tests run outside a virtualenv")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    nodes_at = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    urls = [f"http://{address}" for address in nodes_at]
    mapping = dict(zip(readme.ADDRESSES, [bootstrap, *nodes_at], strict=True))
    env = _environment(unique_name("readme"))
    ran = [b for b in readme.blocks() if b.mode in (Mode.RUN, Mode.BACKGROUND)]
    expected = {_block_of(line, ran): prints for line, prints in PRINTS}

    second = Terminal("second", tmp_path, env)
    backgrounds: list[tuple[Terminal, int, list[str]]] = []
    nodes: list[int] = []
    printed: dict[int, str] = {}
    try:
        for n, block in enumerate(ran):
            python = block.lang == "python"
            script = tmp_path / f"block{n}-line{block.line}.{'py' if python else 'sh'}"
            script.write_text(_mapped(block.text, mapping))
            if block.mode is Mode.BACKGROUND:
                before = _watch_figures(urls)
                terminal = Terminal(f"background{n}", tmp_path, env)
                backgrounds.append((terminal, terminal.start(script), expected.pop(n, [])))
                _wait_until_a_stream_is_open(urls, before)
                continue
            printed[n] = second.run(
                script, python=python, timeout_s=RUN_TIMEOUT_S, what=block.where()
            )
            nodes = second.jobs()  # known before a later block can fail
            for terminal, first, prints in backgrounds:  # the reader reads it, then goes on
                terminal.wait_for(lambda lines, p=prints: _all_in("".join(lines), p), first, 30)
        for n, prints in expected.items():
            missing = [p for p in prints if p not in printed[n]]
            assert not missing, f"{ran[n].where()} did not print {missing}:\n{printed[n]}"
        walkthrough = printed[_block_of("sparkiq get customers C00042", ran)]
        ranged = re.findall(r'^\{"key":"(C0001\d)"', walkthrough, re.MULTILINE)
        assert ranged == [f"C0001{i}" for i in range(9, -1, -1)], ranged  # --order desc
        assert len(nodes) == 3, f"the second terminal's jobs: {nodes}"
    finally:
        for terminal, _, _ in backgrounds:
            terminal.interrupt()
            terminal.close()
        stop_jobs(nodes)
        second.close()


def _environment(app: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKIQ_")}
    env.pop("VIRTUAL_ENV", None)
    source = str(Path(sparkiq.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    env["SPARKIQ_APP"] = app
    return env


def _mapped(text: str, mapping: dict[str, str]) -> str:
    for fixed, ours in mapping.items():
        text = text.replace(fixed, ours)
    return text


def _block_of(line: str, blocks: list[readme.Block]) -> int:
    found = [n for n, b in enumerate(blocks) if line in b.text]
    assert len(found) == 1, f"{len(found)} blocks that run hold {line!r}: update PRINTS"
    return found[0]


def _all_in(text: str, wanted: list[str]) -> bool:
    return all(w in text for w in wanted)


def _watch_figures(urls: list[str]) -> dict[str, tuple[float, float]]:
    """Each node's open watches and the watch events it has sent (its /metrics)."""
    figures = {}
    for url in urls:
        text = httpx.get(f"{url}/metrics", timeout=5).text
        opened = re.search(r"^sparkiq_watches_open (\S+)$", text, re.MULTILINE)
        sent = re.search(r"^sparkiq_watch_events_total (\S+)$", text, re.MULTILINE)
        assert opened, f"{url}/metrics has no sparkiq_watches_open"
        assert sent, f"{url}/metrics has no sparkiq_watch_events_total"
        figures[url] = (float(opened[1]), float(sent[1]))
    return figures


def _wait_until_a_stream_is_open(urls: list[str], before: dict[str, tuple[float, float]]) -> None:
    """Until a node holds an open watch and every node that does has sent an event since
    `before`: a range watch sends its first (`positions`) once every partition's start is
    known, relayed ones included, so changes made from then on reach it."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = _watch_figures(urls)
        holding = [u for u, (opened, _) in now.items() if opened > 0]
        if holding and all(now[u][1] > before[u][1] for u in holding):
            return
        time.sleep(0.2)
    pytest.fail(f"no change stream opened within 30 s: {_watch_figures(urls)}")
