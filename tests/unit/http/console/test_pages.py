"""The console's files (sparkiq.http.console.pages) over a real loop server: the page at every
/ui path, its assets cached by ETag or fingerprint, public on a node that asks for
credentials while the API stays closed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from sparkiq.auth import AuthConfig
from sparkiq.dev.ports import free_port
from sparkiq.http import HttpServer
from sparkiq.http.console.pages import Console, is_console_path
from sparkiq.http.staticview import StaticView
from tests.support.auth import CLUSTER_SECRET, SECRET, write

CONSOLE = Console()
VIEWS = ("/ui/", "/ui/tables", "/ui/tables/users", "/ui/tables/users/keys/a%2Fb", "/ui/pipeline")


async def serve(auth: AuthConfig | None = None) -> AsyncIterator[httpx.AsyncClient]:
    view = StaticView(f"http://127.0.0.1:{free_port()}")
    port = int(view.url.rsplit(":", 1)[1])
    async with (
        HttpServer(view, "127.0.0.1", port, auth=auth),
        httpx.AsyncClient(base_url=view.url) as client,
    ):
        yield client


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async for c in serve():
        yield c


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    auth = AuthConfig.load(
        auth="required",
        jwt_secret_file=write(tmp_path / "jwt.secret", SECRET),
        cluster_secret_file=write(tmp_path / "cluster.secret", CLUSTER_SECRET),
    )
    async for c in serve(auth):
        yield c


async def test_every_view_is_the_page_revalidated_by_its_etag(client: httpx.AsyncClient) -> None:
    pages = [await client.get(path) for path in VIEWS]
    for r in pages:
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.headers["cache-control"] == "no-cache"
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.content == pages[0].content
    etag = pages[0].headers["etag"]
    again = await client.get("/ui/tables", headers={"if-none-match": etag})
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
    other = await client.get("/ui/tables", headers={"if-none-match": '"something-else"'})
    assert other.status_code == 200
    moved = await client.get("/ui")
    assert (moved.status_code, moved.headers["location"]) == (308, "/ui/")


async def test_the_page_names_its_assets_by_fingerprint_and_they_are_cached_for_good(
    client: httpx.AsyncClient,
) -> None:
    page = (await client.get("/ui/")).text
    assert "{{" not in page
    named = re.findall(r'(?:href|src)="(/ui/assets/[^"?]+)\?v=([0-9a-f]{16})"', page)
    assert {name for name, _ in named} >= {
        "/ui/assets/app.js",
        "/ui/assets/style.css",
        "/ui/assets/uplot/uPlot.iife.min.js",
        "/ui/assets/uplot/uPlot.min.css",
    }
    for name, fingerprint in named:
        r = await client.get(name, params={"v": fingerprint})
        assert r.status_code == 200, name
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert r.headers["etag"] == f'"{fingerprint}"'
        # Without the fingerprint (or with an old one) the browser revalidates.
        stale = await client.get(name, params={"v": "0" * 16})
        assert stale.headers["cache-control"] == "no-cache"
        assert stale.content == r.content
        same = await client.get(name, headers={"if-none-match": f'W/"{fingerprint}"'})
        assert same.status_code == 304
    types = {
        "app.js": "text/javascript; charset=utf-8",
        "style.css": "text/css; charset=utf-8",
        "uplot/LICENSE": "text/plain; charset=utf-8",
    }
    for name, content_type in types.items():
        r = await client.get(f"/ui/assets/{name}")
        assert r.headers["content-type"] == content_type
        assert r.headers["x-content-type-options"] == "nosniff"


async def test_every_module_a_script_imports_is_shipped(client: httpx.AsyncClient) -> None:
    scripts = [name for name in CONSOLE.assets if name.endswith(".js")]
    for name in scripts:
        text = CONSOLE.assets[name].body.decode()
        for imported in re.findall(r'from "\./([^"]+)"', text):
            assert imported in CONSOLE.assets, f"{name} imports {imported}, which is missing"
            r = await client.get(f"/ui/assets/{imported}")
            assert r.status_code == 200
    assert "MIT License" in CONSOLE.assets["uplot/LICENSE"].body.decode()


async def test_what_is_not_a_console_file(client: httpx.AsyncClient) -> None:
    missing = await client.get("/ui/assets/nope.js")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "no_route")
    posted = await client.post("/ui/")
    assert (posted.status_code, posted.headers["allow"]) == (405, "GET, HEAD")
    assert (await client.head("/ui/tables")).status_code == 200
    other = await client.get("/uix")
    assert other.json()["error"]["code"] == "no_route"
    assert [is_console_path(p) for p in ("/ui", "/ui/", "/ui/x", "/uix", "/v1/ui")] == [
        True,
        True,
        True,
        False,
        False,
    ]


async def test_a_plain_get_of_the_page_without_any_header_the_app_reads() -> None:
    """The loop server's plain lane (a bare request: no header the app reads) serves it too."""
    async for client in serve():
        url = httpx.URL(str(client.base_url))
        reader, writer = await asyncio.open_connection(url.host, url.port)
        writer.write(b"GET /ui/pipeline HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        body = await reader.readexactly(length)
        writer.close()
        assert head.startswith(b"HTTP/1.1 200")
        assert body == (await client.get("/ui/")).content


async def test_the_page_is_public_where_the_api_asks_for_credentials(
    secured: httpx.AsyncClient,
) -> None:
    for path in (*VIEWS, "/ui/assets/app.js"):
        r = await secured.get(path)
        assert r.status_code == 200, (path, r.text)
    for path in ("/v1/tables", "/v1/metadata", "/v1/pipeline", "/uix"):
        r = await secured.get(path)
        assert r.status_code == 401, path


def _js_imports() -> dict[str, set[str]]:
    """Each of the console's JavaScript modules -> the modules it imports."""
    import sparkiq.http.console

    assets = Path(sparkiq.http.console.pages.__file__).parent / "ui" / "assets"
    found = re.compile(r'^import [^;]* from "\./([\w.]+\.js)";', re.M)
    return {p.name: set(found.findall(p.read_text())) for p in assets.glob("*.js")}


def test_the_consoles_modules_import_no_cycle() -> None:
    graph = _js_imports()
    assert "app.js" in graph
    assert graph["app.js"] >= {"tables.js", "api.js"}  # the graph was read
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dep in sorted(graph.get(name, ())):
            visit(dep, (*path, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())
