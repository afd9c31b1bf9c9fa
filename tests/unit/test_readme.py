"""The README pastes: every code block is classified, parses, and names only options the CLI
has; its HTTP API section lists every field of every answer; its client section every method
of `sparkiq.client.Client` with what it returns.

tests/e2e/test_readme.py runs the blocks marked `run` against a live cluster; here, in a
second, the rest: the syntax of every shell and Python block that is not skipped, and each
`sparkiq` command line parsed as the CLI would parse it (tests/support/readme.py).
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
from typing import Any

import click
import pytest

from sparkiq.client import Client
from sparkiq.http.messages import openapi
from tests.support import readme
from tests.support.readme import Block, Mode

BLOCKS = readme.blocks()
CHECKED = [b for b in BLOCKS if b.lang in readme.CODE_LANGS and b.mode is not Mode.SKIP]
REPO = readme.README.parent


def _id(block: Block) -> str:
    return f"line{block.line}-{block.lang}"


# -- the blocks ------------------------------------------------------------------------------------


def test_every_code_block_says_what_the_tests_do_with_it() -> None:
    unmarked = [b.where() for b in BLOCKS if b.lang in readme.CODE_LANGS and b.mode is None]
    assert not unmarked, (
        "mark each with <!-- readme: run|background|check|skip (why) --> on the line before "
        f"(see tests/support/readme.py): {unmarked}"
    )
    unknown = [b.where() for b in BLOCKS if b.lang not in readme.CODE_LANGS | readme.OUTPUT_LANGS]
    assert not unknown, f"blocks of a language the tests do not know: {unknown}"
    unexplained = [b.where() for b in BLOCKS if b.mode is Mode.SKIP and not b.reason]
    assert not unexplained, f"a skipped block says why: {unexplained}"


def test_a_new_block_without_a_marker_is_found() -> None:
    text = "# x\n\n<!-- readme: run -->\n```sh\ntrue\n```\n\n```python\npass\n```\n"
    found = readme.blocks(text)
    assert [(b.mode, b.lang) for b in found] == [(Mode.RUN, "sh"), (None, "python")]
    with pytest.raises(readme.ReadmeError, match="unknown mode"):
        readme.blocks("<!-- readme: runs -->\n```sh\ntrue\n```\n")


def test_shell_text_is_split_into_the_commands_a_shell_runs() -> None:
    shell = (
        ". .venv/bin/activate\n"
        "X=1 sparkiq get t k --url http://h:1 2>&1 > out &   # a comment\n"
        "python - <<'EOF'\nimport os  # not shell\nEOF\n"
        'for n in a b; do until curl -sf "$n/readyz"; do sleep 1; done; done\n'
        "sparkiq serve --auth none \\\n    --listen 127.0.0.1:1 ...\n"
        "openssl rand -hex 32 > secret\n"
    )
    assert readme.commands(shell) == [
        [".", ".venv/bin/activate"],
        ["sparkiq", "get", "t", "k", "--url", "http://h:1"],
        ["python", "-"],
        ["curl", "-sf", "$n/readyz"],
        ["sleep", "1"],
        ["sparkiq", "serve", "--auth", "none", "--listen", "127.0.0.1:1"],
        ["openssl", "rand", "-hex", "32"],
    ]


@pytest.mark.parametrize("block", [b for b in CHECKED if b.is_shell], ids=_id)
def test_shell_blocks_parse(block: Block) -> None:
    done = subprocess.run(
        ["bash", "-n"], input=readme.shell_lines(block), capture_output=True, text=True
    )
    assert done.returncode == 0, f"{block.where()}: {done.stderr}"


@pytest.mark.parametrize("block", [b for b in CHECKED if b.is_shell], ids=_id)
def test_no_unquoted_ampersand_cuts_a_command(block: Block) -> None:
    cut = readme.cut_lines(readme.shell_lines(block))
    assert not cut, f"{block.where()}: quote the URL (its & ends the command): {cut}"


def test_an_unquoted_url_is_found_cut() -> None:
    shell = "curl -s http://h/range?prefix=C&limit=10\ncurl -s 'http://h/range?a=1&b=2'\nx &\n"
    assert readme.cut_lines(shell) == ["curl -s http://h/range?prefix=C&limit=10"]


@pytest.mark.parametrize("block", [b for b in CHECKED if b.lang == "python"], ids=_id)
def test_python_blocks_compile(block: Block) -> None:
    compile(block.text, block.where(), "exec")


@pytest.mark.parametrize("block", [b for b in CHECKED if b.is_shell], ids=_id)
def test_sparkiq_commands_have_the_options_they_use(block: Block) -> None:
    for argv in readme.commands(readme.shell_lines(block)):
        if readme.is_sparkiq(argv):
            try:
                readme.check_sparkiq(argv)
            except click.ClickException as exc:
                pytest.fail(f"{block.where()}: {' '.join(argv)}: {exc.format_message()}")
        elif argv[0].startswith("scripts/"):
            script = REPO / argv[0]
            assert script.is_file(), f"{block.where()}: no {script}"
            assert os.access(script, os.X_OK), f"{block.where()}: {script} is not executable"


def test_an_option_the_cli_lacks_is_found() -> None:
    with pytest.raises(click.NoSuchOption):
        readme.check_sparkiq(["sparkiq", "get", "t", "k", "--urls", "http://h:1"])
    with pytest.raises(click.BadParameter):
        readme.check_sparkiq(["sparkiq", "range", "t", "--order", "down"])
    with pytest.raises(click.UsageError, match="no command"):
        readme.check_sparkiq(["sparkiq", "table", "make", "t"])
    with pytest.raises(AssertionError, match="no more arguments"):
        readme.check_sparkiq(["sparkiq", "cluster", "extra"])
    with pytest.raises(AssertionError, match="needs KEY"):
        readme.check_sparkiq(["sparkiq", "get", "t"])


def test_run_blocks_name_only_the_addresses_the_e2e_test_maps() -> None:
    """tests/e2e/test_readme.py replaces these (the broker, the three nodes) by its own; any
    other fixed address would reach something the test did not start."""
    ran = [b for b in BLOCKS if b.mode in (Mode.RUN, Mode.BACKGROUND)]
    named = {m for b in ran for m in re.findall(r"(?:127\.0\.0\.1|localhost):\w+", b.text)}
    assert named == set(readme.ADDRESSES), f"unmapped: {named - set(readme.ADDRESSES)}"


# -- the HTTP API section --------------------------------------------------------------------------

_SECTION = readme.section("HTTP API v1")


def _rows() -> list[tuple[str, str]]:
    """(request, answer) of each row of the section's table."""
    rows = []
    for line in _SECTION.splitlines():
        if line.startswith("| `"):
            request, answer = line.strip().strip("|").split(" | ", 1)
            rows.append((request, answer))
    return rows


def _row(method: str, path: str) -> tuple[str, str]:
    pattern = re.compile(rf"`{method.upper()} {re.escape(path)}[`?]")
    matching = [row for row in _rows() if pattern.search(row[0])]
    assert len(matching) == 1, f"{method.upper()} {path}: {len(matching)} rows of the table"
    return matching[0]


def _names(schema: dict[str, Any], schemas: dict[str, Any], seen: frozenset[str]) -> set[str]:
    """Every property name in `schema` and the schemas it refers to."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return set() if name in seen else _names(schemas[name], schemas, seen | {name})
    names = set(schema.get("properties", {}))
    subs = [
        *schema.get("properties", {}).values(),
        schema.get("items"),
        schema.get("additionalProperties"),
    ]
    subs += [*schema.get("anyOf", ()), *schema.get("oneOf", ()), *schema.get("allOf", ())]
    for sub in subs:
        if isinstance(sub, dict):
            names |= _names(sub, schemas, seen)
    return names


def _literals(schemas: dict[str, Any]) -> set[str]:
    """The constant strings of the schemas (`"ok"` of `{"status": "ok"}`)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.update(v for v in node.get("enum", ()) if isinstance(v, str))
            if isinstance(node.get("const"), str):
                found.add(node["const"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schemas)
    return found


def _json_operations() -> list[tuple[str, str, str | None, str]]:
    """(method, path, request body's schema or None, answer's schema) of every operation whose
    answer is JSON of a model (not the event streams, the metrics or the document itself)."""
    found = []
    for path, methods in openapi.document()["paths"].items():  # type: ignore[attr-defined]
        for method, operation in methods.items():
            content = operation["responses"]["200"]["content"]
            ref = content.get("application/json", {}).get("schema", {}).get("$ref")
            if ref is None:
                continue
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            body_ref = None if body is None else body["schema"]["$ref"]
            found.append((method, path, body_ref, ref))
    return found


def test_the_http_api_section_has_a_row_for_every_endpoint() -> None:
    for path, methods in openapi.document()["paths"].items():  # type: ignore[attr-defined]
        for method in methods:
            _row(method, path)


@pytest.mark.parametrize(
    ("method", "path", "body", "answer"), _json_operations(), ids=lambda v: str(v)
)
def test_the_http_api_section_lists_every_field_of_each_answer(
    method: str, path: str, body: str | None, answer: str
) -> None:
    schemas: dict[str, Any] = openapi.document()["components"]["schemas"]  # type: ignore[index]
    request_cell, answer_cell = _row(method, path)
    # A row may say an object is "as `GET /v1/tables` lists it": that row's fields count too.
    shown = answer_cell
    for other in re.findall(r"`((?:GET|POST) /[^`?]*)`", answer_cell):
        shown += " ".join(a for r, a in _rows() if f"`{other}`" in r and a != answer_cell)
    fields = _names({"$ref": answer}, schemas, frozenset())
    missing = sorted(f for f in fields if f'"{f}"' not in shown)
    assert not missing, f"{method.upper()} {path}: README.md does not name {missing}"
    stale = set(re.findall(r'"([a-z_][a-z0-9_]*)"', answer_cell)) - fields - _literals(schemas)
    assert not stale, f"{method.upper()} {path}: README.md names {sorted(stale)}, no field"
    if body is not None:
        asked = _names({"$ref": body}, schemas, frozenset())
        assert all(f'"{f}"' in request_cell for f in asked), (method, path, asked)


def test_the_http_api_section_gives_the_error_shape() -> None:
    schemas: dict[str, Any] = openapi.document()["components"]["schemas"]  # type: ignore[index]
    fields = _names(schemas["ErrorAnswer"], schemas, frozenset({"ErrorAnswer"}))
    assert fields == {"error", "code", "message"}
    assert '{"error": {"code", "message"}}' in _SECTION


# -- the Python client -----------------------------------------------------------------------------

_PUBLIC = sorted(
    name
    for name, member in vars(Client).items()
    if not name.startswith("_") and inspect.isfunction(member)
)


def _method_rows() -> dict[str, str]:
    """Method name -> what the client section's table says it returns."""
    rows = {}
    for line in readme.section("The Python client").splitlines():
        row = re.match(r"^\| `(\w+)\(.*?\)` \| (.*) \|$", line)
        if row:
            rows[row[1]] = row[2].strip()
    return rows


def test_every_client_method_is_in_the_readme_with_what_it_returns() -> None:
    rows = _method_rows()
    assert sorted(rows) == _PUBLIC, f"README.md's client table: {sorted(rows)}; Client: {_PUBLIC}"
    assert all(rows.values())


@pytest.mark.parametrize("name", _PUBLIC)
def test_every_client_method_has_a_docstring(name: str) -> None:
    assert inspect.getdoc(getattr(Client, name)), f"Client.{name} has no docstring"


def test_the_table_of_kafka_rights_is_the_one_the_roles_define() -> None:
    """The rights the README lists are those the node and commands check and the secured
    end-to-end test grants (`sparkiq.kafka.roles`)."""
    from sparkiq.kafka.roles import rights_table

    assert rights_table() in readme.README.read_text()
