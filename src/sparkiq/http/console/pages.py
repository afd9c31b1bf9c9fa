"""The console: a web page on every node, under `/ui/`, from files shipped in the package.

The page (`sparkiq/http/ui/`: `index.html`, plain JS modules and CSS under `assets/`, and the
vendored chart library `assets/uplot/` with its license) reads everything it shows from the
public API (`/v1/...`) with the caller's own credentials: it adds no data endpoint, and its
files hold no data, so they are served to anyone (the gate admits `/ui` paths without
credentials: `is_console_path`).

- `/ui/assets/{file}`: the file, with an ETag. Asked with `?v=` its fingerprint (as the
  page asks for its entry points), it is cached for good (`immutable`): a new version of the
  file has a new fingerprint, so a new URL. Otherwise the browser revalidates it every time
  (`no-cache`) and a matching `If-None-Match` is answered 304 without a body.
- any other path under `/ui/` (`/ui/tables/users/keys/alice`...): the page itself, which
  shows the view the path names (the history fallback that makes every view a URL to
  bookmark), `no-cache` with an ETag.
- `/ui`: a redirect to `/ui/`.

Files are read once, when the node starts; answers are prepared bytes.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import mimetypes
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.responses import JSON_HEADERS, Response, error_response

CONSOLE_PATH = "/ui"
ASSETS_PATH = "/ui/assets/"
_ASSETS = "assets"
_INDEX = "index.html"
# `{{asset:NAME}}` in index.html becomes NAME's URL with its fingerprint.
_ASSET_MARK = "{{asset:"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    "": "text/plain; charset=utf-8",  # LICENSE
}
_COMMON = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
)
# The page runs its own files only, talks to its own node only, and is never framed.
_PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_REVALIDATE = "no-cache"
_FOREVER = "public, max-age=31536000, immutable"


def is_console_path(path: str) -> bool:
    """Whether `path` (raw, no query) is the console's: `/ui` or under `/ui/`."""
    return path.startswith(CONSOLE_PATH) and (len(path) == 3 or path[3] == "/")


@dataclass(frozen=True, slots=True)
class _File:
    body: bytes
    content_type: str
    etag: str  # quoted, as sent
    fingerprint: str


class Console:
    """Answers the `/ui` paths of one node from the files under `root`."""

    def __init__(self, root: Traversable | None = None) -> None:
        root = (
            root if root is not None else importlib.resources.files("sparkiq.http.console") / "ui"
        )
        self._assets = dict(_files(root / _ASSETS))
        index = (root / _INDEX).read_text("utf-8")
        self._index = _file(_INDEX, _with_fingerprints(index, self._assets).encode())

    @property
    def assets(self) -> Mapping[str, _File]:
        """The files under `assets/`, by path relative to it."""
        return self._assets

    def answer(self, method: str, path: str, query: str, if_none_match: str | None) -> Response:
        """The answer to `method path?query` (raw path, `is_console_path`)."""
        if method not in ("GET", "HEAD"):
            return error_response(
                405,
                ErrorCode.METHOD_NOT_ALLOWED,
                f"{method} is not allowed here; use GET",
                (*JSON_HEADERS, ("allow", "GET, HEAD")),
            )
        if path == CONSOLE_PATH:
            return Response(308, b"", (("location", "/ui/"), *_COMMON))
        if path.startswith(ASSETS_PATH):
            found = self._assets.get(path[len(ASSETS_PATH) :])
            if found is None:
                return error_response(
                    404, ErrorCode.NO_ROUTE, f"the console has no file {path}; open /ui/"
                )
            forever = query == f"v={found.fingerprint}"
            return _send(found, if_none_match, _FOREVER if forever else _REVALIDATE, ())
        return _send(
            self._index, if_none_match, _REVALIDATE, (("content-security-policy", _PAGE_POLICY),)
        )


def _send(
    file: _File,
    if_none_match: str | None,
    cache: str,
    extra: tuple[tuple[str, str], ...],
) -> Response:
    headers = (("etag", file.etag), ("cache-control", cache), *_COMMON, *extra)
    if if_none_match is not None and _matches(if_none_match, file.etag):
        return Response(304, b"", headers)
    return Response(200, file.body, (("content-type", file.content_type), *headers))


def _matches(if_none_match: str, etag: str) -> bool:
    """Whether an If-None-Match value names `etag` (weakly, as RFC 9110 compares for it)."""
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, _File]]:
    out: list[tuple[str, _File]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        name = prefix + entry.name
        if entry.is_dir():
            out.extend(_files(entry, name + "/"))
        elif not entry.name.startswith("."):
            out.append((name, _file(name, entry.read_bytes())))
    return out


def _file(name: str, body: bytes) -> _File:
    digest = hashlib.sha256(body).hexdigest()[:16]
    suffix = name[name.rfind(".") :] if "." in name.rsplit("/", 1)[-1] else ""
    content_type = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return _File(body, content_type, f'"{digest}"', digest)


def _with_fingerprints(index: str, assets: Mapping[str, _File]) -> str:
    """`index` with each `{{asset:NAME}}` replaced by NAME's URL and fingerprint."""
    out, rest = [], index
    while (start := rest.find(_ASSET_MARK)) >= 0:
        end = rest.index("}}", start)
        name = rest[start + len(_ASSET_MARK) : end]
        found = assets.get(name)
        if found is None:
            raise FileNotFoundError(f"the console's index.html names {name!r}, which is missing")
        out.append(rest[:start] + f"{ASSETS_PATH}{name}?v={found.fingerprint}")
        rest = rest[end + 2 :]
    return "".join(out) + rest
