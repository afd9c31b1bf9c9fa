"""End to end: the console in a real browser (headless Chromium, Playwright) against three
`sparkiq serve` processes over seeded data, and a node that asks for credentials.

Every view is opened by its URL on some node and checked against the oracle of what was
written (tests/support/consoledata.py); after each, the browser's console must hold no
error. Skipped, saying why, where Debian's chromium or playwright is missing (scripts/test
installs chromium when it runs as root).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from sparkiq.core.tables import TableDef, TableKind
from sparkiq.dev.localcluster import LocalCluster
from sparkiq.kafka.catalog import register_table
from tests.support import browser
from tests.support.auth import CLUSTER_SECRET, SECRET, hs256, write
from tests.support.consoledata import (
    ITEMS,
    PLACES,
    PLACES_PARTITIONS,
    REALTIME_QUERY,
    SALES,
    WINDOW_MS,
    ConsoleData,
    seed,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(browser.missing() is not None, reason=f"{browser.missing()}"),
]

WAIT_MS = 30_000
# What a page's console says of an answer the test asked for (a 401 before signing in, a
# 403 for a table the token does not grant): the browser logs every 4xx as an error.
ASKED_FOR = re.compile(r"Failed to load resource: the server responded with a status of 40[13]")


@pytest.fixture(scope="module")
def served(
    bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, ConsoleData]]:
    work = tmp_path_factory.mktemp("console")
    app = f"console{int(time.time() * 1000) % 10**9}"
    data = seed(bootstrap, app)
    cluster = LocalCluster(bootstrap, work / "nodes", nodes=3, app=app)
    cluster.start()
    try:
        cluster.wait_ready(120)
        yield cluster, data
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def secured(
    bootstrap: str,
    served: tuple[LocalCluster, ConsoleData],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalCluster]:
    """One node that asks for a bearer token, serving the same changelogs in an app of its own."""
    work = tmp_path_factory.mktemp("console-secured")
    app = f"consec{int(time.time() * 1000) % 10**9}"
    topic = served[0].app + "-"
    register_table(bootstrap, TableDef(ITEMS, topic + "items", 6), app=app)
    sales = TableDef(SALES, topic + "sales", 4, kind=TableKind.WINDOWED, window_size_ms=WINDOW_MS)
    register_table(bootstrap, sales, app=app)
    auth_args = [
        "--jwt-secret-file", str(write(work / "jwt.secret", SECRET)),
        "--cluster-secret-file", str(write(work / "cluster.secret", CLUSTER_SECRET)),
    ]  # fmt: skip
    token = hs256("*")
    cluster = LocalCluster(
        bootstrap,
        work / "nodes",
        nodes=1,
        app=app,
        auth_args=auth_args,
        headers={"authorization": f"Bearer {token}"},
    )
    cluster.start()
    try:
        cluster.wait_ready(120)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[browser.Browser]:
    with browser.chromium() as b:
        yield b


@pytest.fixture
def page(chromium: browser.Browser) -> Iterator[browser.Watched]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    try:
        watched = browser.watch(context.new_page())
        watched.page.set_default_timeout(WAIT_MS)
        yield watched
    finally:
        context.close()


def no_errors(page: browser.Watched, allowed: re.Pattern[str] | None = None) -> None:
    errors = [e for e in page.take_errors() if allowed is None or not allowed.search(e)]
    assert errors == [], errors


def test_the_start_page_names_every_node_and_table(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, _ = served
    p = page.page
    p.goto(f"{cluster.urls[1]}/ui/")
    for url in cluster.urls:
        row = p.locator(f'tr[data-node="{url}"]')
        row.wait_for()
        assert "alive" in row.inner_text()
    for table, partitions in ((ITEMS, 6), (SALES, 4)):
        cells = p.locator(f'td.cell[data-table="{table}"]')
        cells.nth(partitions - 1).wait_for()
        assert cells.count() == partitions
        # Every cell names the partition's active node.
        for i in range(partitions):
            assert re.match(r"n[1-3]", cells.nth(i).inner_text())
    # A global table's partitions are held by every node, none of them a standby.
    cells = p.locator(f'td.cell[data-table="{PLACES}"]')
    cells.nth(PLACES_PARTITIONS - 1).wait_for()
    p.wait_for_function(
        f"""() => [...document.querySelectorAll('td.cell[data-table="{PLACES}"]')]
        .every((c) => c.querySelectorAll('.global').length === {len(cluster.urls) - 1})"""
    )
    for i in range(PLACES_PARTITIONS):
        text = cells.nth(i).inner_text()
        assert "standby" not in text
        assert {n for n in re.findall(r"n[1-3]", text)} == {"n1", "n2", "n3"}
    assert "global" in p.locator(f'tr:has(td.cell[data-table="{PLACES}"]) th').inner_text()
    no_errors(page)
    # The tables page, reached by its link without reloading the page.
    p.click("nav >> text=Tables")
    p.wait_for_url(re.compile(r"/ui/tables$"))
    for table, kind in ((ITEMS, "kv"), (SALES, "windowed"), (PLACES, "global")):
        row = p.locator(f'tr[data-table="{table}"]')
        row.wait_for()
        assert kind in row.inner_text()
    no_errors(page)


def test_a_keys_deep_link_shows_its_value_from_any_node(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, data = served
    p = page.page
    keys = sorted(data.items.latest)[:3]
    for url, key in zip(cluster.urls, keys, strict=True):
        p.goto(f"{url}/ui/tables/{ITEMS}/keys/{quote(key, safe='')}")
        value = p.locator("pre.json:not(:empty)")
        value.wait_for()
        assert json.loads(value.inner_text()) == data.items.latest[key]
        facts = p.locator("dl.facts").inner_text()
        assert re.search(rf"partition\s+{data.items.partition_of[key]}\b", facts), facts
        curl = p.locator("pre.curl").inner_text()
        assert curl == f"curl -s '{url}/v1/tables/{ITEMS}/keys/{key}'"
        no_errors(page)


def test_a_range_browse_pages_forward_and_back(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, data = served
    p = page.page
    want = [k for k in sorted(data.items.latest) if k.startswith("k0001")]
    pages = [want[i : i + 10] for i in range(0, 30, 10)]

    from playwright.sync_api import expect  # not at import: the module may be skipped

    def wait_for(keys: list[str]) -> None:
        expect(p.locator("table.items tbody tr td:first-child")).to_have_text(keys)

    p.goto(f"{cluster.urls[2]}/ui/tables/{ITEMS}?prefix=k0001&limit=10")
    wait_for(pages[0])
    for expected in pages[1:]:
        p.click("button.next")
        wait_for(expected)
    p.click("button.prev")
    wait_for(pages[1])
    p.click("button.prev")
    wait_for(pages[0])
    assert p.locator("button.prev").is_disabled()
    no_errors(page)


def test_a_windowed_keys_chart_renders(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, data = served
    p = page.page
    store = "S2"
    windows = data.sales[store]
    p.goto(f"{cluster.urls[0]}/ui/tables/{SALES}/keys/{store}")
    canvas = p.locator(".chart-box canvas")
    canvas.wait_for()
    box = canvas.bounding_box()
    assert box is not None
    assert box["width"] > 200
    assert box["height"] > 100
    # The chart has one series per numeric field, and the table under it the latest windows.
    legend = p.locator(".chart-box .u-legend").inner_text()
    assert "sales" in legend
    assert "invoices" in legend
    p.locator("table.items tbody tr").first.wait_for()
    rows = p.locator("table.items tbody tr").all_inner_texts()
    latest = sorted(windows)[-len(rows) :][::-1]
    assert [json.loads(r.split("\t")[-1]) for r in rows] == [windows[s] for s in latest]
    assert f"{len(windows)} windows" in p.locator(".view").inner_text()
    no_errors(page)


# Columns of the plot area (device pixels) that the bars' blue fills or strokes, as runs:
# [first column, last column] of each bar, from the pixels on the chart's canvas.
BAR_RUNS = """() => {
  const box = document.querySelector(".chart-box");
  const canvas = box.querySelector("canvas");
  const c = canvas.getBoundingClientRect();
  const o = box.querySelector(".u-over").getBoundingClientRect();
  const r = devicePixelRatio;
  const [x0, y0] = [Math.round((o.left - c.left) * r), Math.round((o.top - c.top) * r)];
  const [w, h] = [Math.round(o.width * r), Math.round(o.height * r)];
  const px = canvas.getContext("2d").getImageData(x0, y0, w, h).data;
  const blue = (i) => px[i + 3] > 0 && px[i + 2] - px[i] > 80 && px[i + 2] - px[i + 1] > 60;
  const runs = [];
  let start = -1;
  for (let x = 0; x <= w; x++) {
    let any = false;
    for (let y = 0; x < w && y < h && !any; y++) any = blue((y * w + x) * 4);
    if (any && start < 0) start = x;
    if (!any && start >= 0) {
      runs.push([start, x - 1]);
      start = -1;
    }
  }
  return { width: w, runs };
}"""


def test_a_windowed_keys_chart_shows_every_bar_whole(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, data = served
    p = page.page
    store = "S1"
    p.goto(f"{cluster.urls[1]}/ui/tables/{SALES}/keys/{store}")
    p.locator(".chart-box canvas").wait_for()
    p.locator("table.items tbody tr").first.wait_for()
    counted = re.search(r"(\d+) windows", p.locator(".view").inner_text())
    assert counted is not None
    shown = int(counted[1])
    assert shown == len(data.sales[store])
    p.wait_for_function(f"({BAR_RUNS})().runs.length === {shown}")
    drawn = p.evaluate(BAR_RUNS)
    runs, width = drawn["runs"], drawn["width"]
    # One run of columns per window, none cut by the plot's edges: a margin before the first
    # and after the last, and the first and last as wide as the others.
    assert len(runs) == shown, drawn
    assert runs[0][0] > 0, drawn
    assert runs[-1][1] < width - 1, drawn
    widths = sorted(b - a + 1 for a, b in runs)
    usual = widths[len(widths) // 2]
    for a, b in (runs[0], runs[-1]):
        assert abs((b - a + 1) - usual) <= 1, drawn
    no_errors(page)


def test_the_tables_page_shows_each_tables_lag(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, _ = served
    p = page.page

    from playwright.sync_api import expect  # not at import: the module may be skipped

    for url in cluster.urls:
        p.goto(f"{url}/ui/tables")
        heads = p.locator("table.tables thead th")
        heads.first.wait_for()
        column = next(i for i, t in enumerate(heads.all_inner_texts()) if "active lag" in t)
        for table in (ITEMS, SALES, PLACES):
            cell = p.locator(f'tr[data-table="{table}"] td').nth(column)
            # Every table is caught up once restored (nothing more is written to it): 0
            # over every partition, on every node, each active's lag as it told this node
            # now (no "k of n partitions known", no dash, no peer that did not answer).
            expect(cell).to_have_text(re.compile(r"^0$"), timeout=WAIT_MS)
        assert heads.nth(column).inner_text() == "active lag (max)"  # says which figure
        no_errors(page)


def test_the_lag_and_bar_helpers(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    """The console's pure helpers, run in the browser: charts.barRange, lags.tableLag."""
    cluster, _ = served
    p = page.page
    p.goto(f"{cluster.urls[0]}/ui/pipeline")
    ranges = p.evaluate(
        """async () => {
        const { barRange } = await import("/ui/assets/charts.js");
        return [barRange([], 60), barRange([120], 60), barRange([0, 60, 120], 60),
                barRange([0, 60, 300, 330], 60)];
    }"""
    )
    # Half the narrowest gap past either end; a lone x gets half a step; no data, no range.
    assert ranges == [[None, None], [90, 150], [-30, 150], [-15, 345]]
    a, b, c = "http://a", "http://b", "http://c"
    meta = {
        "node": a,
        "local": [
            {"table": "t", "partition": 0, "lag": 7},
            {"table": "g", "partition": 0, "lag": 3},
            {"table": "g", "partition": 1, "lag": 0},
        ],
        "partitions": [
            # t: the active here (its lag now, not the one it reported), one that reported,
            # one that did not.
            {"table": "t", "partition": 0, "active": a, "lags": {a: 900}},
            {"table": "t", "partition": 1, "active": b, "lags": {b: 5, a: 1}},
            {"table": "t", "partition": 2, "active": c, "lags": {}},
            # g (global): this node's own copies stand for the active's.
            {"table": "g", "partition": 0, "active": b, "lags": {}},
            {"table": "g", "partition": 1, "active": c, "lags": {c: 50}},
            {"table": "u", "partition": 0, "active": c, "lags": {}},
        ],
    }
    # The same map with the peers' own figures now (GET /v1/metadata?peers=true): b
    # answered, c did not (its figures stay those it reported at the last rebalance).
    with_peers = {
        **meta,
        "peers": {
            b: {"local": [{"table": "t", "partition": 1, "lag": 20}], "error": None},
            c: {"local": [], "error": "no answer within 1.000s"},
        },
    }
    both = p.evaluate(
        """async ([meta, withPeers]) => {
        const { tableLag } = await import("/ui/assets/lags.js");
        const all = (m) => [tableLag(m, "t"), tableLag(m, "g", true), tableLag(m, "g"),
                            tableLag(m, "u"), tableLag(m, "none")];
        return [all(meta), all(withPeers)];
    }""",
        [meta, with_peers],
    )
    assert both[0] == [
        {"lag": 7, "known": 2, "partitions": 3, "silent": []},
        {"lag": 3, "known": 2, "partitions": 2, "silent": []},
        {"lag": 50, "known": 1, "partitions": 2, "silent": []},
        {"lag": None, "known": 0, "partitions": 1, "silent": []},
        {"lag": None, "known": 0, "partitions": 0, "silent": []},
    ]
    assert both[1] == [
        # t: b's lag now (20, not the 5 it reported); c said nothing, and reported nothing.
        {"lag": 20, "known": 2, "partitions": 3, "silent": [c]},
        {"lag": 3, "known": 2, "partitions": 2, "silent": []},
        {"lag": 50, "known": 1, "partitions": 2, "silent": [c]},
        {"lag": None, "known": 0, "partitions": 1, "silent": [c]},
        {"lag": None, "known": 0, "partitions": 0, "silent": []},
    ]
    no_errors(page)


def test_the_pipeline_page_shows_every_query(
    served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    cluster, data = served
    p = page.page
    p.goto(f"{cluster.urls[1]}/ui/pipeline")
    for name, batches in data.queries.items():
        card = p.locator(f'section.query[data-query="{name}"]')
        card.wait_for()
        text = card.inner_text()
        last = batches[-1]
        assert f"{last.batch} (" in text
        assert f"{last.dead_letters_total} since start" in text
        assert card.locator("canvas").count() == 3
        facts = dict(
            zip(
                card.locator("dt").all_inner_texts(),
                card.locator("dd").all_inner_texts(),
                strict=True,
            )
        )
        if name == REALTIME_QUERY:
            # An epoch is told as such, with its length as planned and the time records
            # wait between epochs, not as a batch that took 5 s.
            assert "real-time" in card.locator("h2").inner_text()
            assert facts["epoch length"].startswith(f"{last.batch_ms:,} ms (planned")
            assert facts["between epochs"].startswith(f"{last.between_epochs_ms} ms")
            assert "batch duration" not in facts
            assert "time between epochs" in card.inner_html()  # the chart's title
        else:
            assert facts["batch duration"] == f"{last.batch_ms} ms"
            assert "epoch" not in text
    no_errors(page)


def test_a_node_with_authentication_asks_for_a_token_then_shows_the_data(
    secured: LocalCluster, served: tuple[LocalCluster, ConsoleData], page: browser.Watched
) -> None:
    _, data = served
    url = secured.urls[0]
    p = page.page
    p.goto(f"{url}/ui/tables")
    form = p.locator("form.signin")
    form.wait_for()
    assert "401" in form.inner_text()
    token = hs256([ITEMS])  # items only
    p.fill("input[name=credential]", token)
    p.click("form.signin button")
    row = p.locator(f'tr[data-table="{ITEMS}"]')
    row.wait_for()
    assert p.locator(f'tr[data-table="{SALES}"]').count() == 0  # not granted: not listed
    # The token is kept for the tab only, and never put in a URL.
    stored = p.evaluate("Object.values(sessionStorage).join(' ')")
    assert token in stored
    assert p.evaluate("Object.values(localStorage).length") == 0
    assert token not in p.url
    key = sorted(data.items.latest)[5]
    p.goto(f"{url}/ui/tables/{ITEMS}/keys/{key}")
    value = p.locator("pre.json:not(:empty)")
    value.wait_for()
    assert json.loads(value.inner_text()) == data.items.latest[key]
    assert "$SPARKIQ_TOKEN" in p.locator("pre.curl").inner_text()
    # A table the token does not grant: the 403, plainly.
    p.goto(f"{url}/ui/tables/{SALES}/keys/S1")
    banner = p.locator(".banner")
    banner.wait_for()
    assert banner.inner_text().startswith("403 forbidden")
    no_errors(page, ASKED_FOR)


def test_the_page_is_public_and_the_api_is_not(secured: LocalCluster) -> None:
    url = secured.urls[0]
    assert httpx.get(f"{url}/ui/").status_code == 200
    assert httpx.get(f"{url}/v1/tables").status_code == 401
