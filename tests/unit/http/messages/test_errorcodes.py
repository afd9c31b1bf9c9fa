"""The error codes (sparkiq.http.messages.errorcodes): one enum, every member described and sent.

The sources of sparkiq are read (ast) for what they send: every `ErrorCode` member must be
sent somewhere (as `ErrorCode.X`, or as the `FailureReason.X` of its name), every error
answer must be made with a member (no code written as a string), each with the status of
its code; and the OpenAPI document must describe every member under a response of its
status.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sparkiq
from sparkiq.core.queries import Failure, FailureReason
from sparkiq.http.messages.errorcodes import ErrorCode
from sparkiq.http.messages.openapi import document
from sparkiq.http.messages.responses import CODE_FOR, error_response, failure_response

SRC = Path(sparkiq.__file__).parent


def trees() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def members_named(enum: str, *, but: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """`enum.X` attribute reads in the sources (but those of the modules `but`): X -> where."""
    found: dict[str, list[str]] = {}
    for path, tree in trees():
        if str(path.relative_to(SRC)) in but:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == enum
                and node.attr.isupper()
            ):
                found.setdefault(node.attr, []).append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_code_is_sent_and_every_code_sent_is_a_code() -> None:
    named = members_named("ErrorCode", but=("client.py",))  # the client compares codes
    unknown = sorted(set(named) - set(ErrorCode.__members__))
    assert not unknown, {name: named[name] for name in unknown}
    sent = {ErrorCode[name] for name in named}
    reasons = members_named("FailureReason")
    sent |= {CODE_FOR[FailureReason[name]] for name in reasons}
    unused = sorted(code.value for code in set(ErrorCode) - sent)
    assert not unused, f"codes no node sends: {unused}; send them or remove them"


def test_every_code_has_an_error_status_and_says_when() -> None:
    for code in ErrorCode:
        assert 400 <= code.status < 600, code
        assert code.when, code
        assert ErrorCode(code.value) is code


def test_every_failure_reason_is_answered_with_the_code_of_its_name() -> None:
    for reason in FailureReason:
        assert CODE_FOR[reason].value == reason.value


def _is_error_response(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name == "error_response"


def _member(node: ast.AST) -> ErrorCode | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ErrorCode"
    ):
        return ErrorCode[node.attr]
    return None


def test_every_error_answer_has_a_member_and_its_status() -> None:
    """`error_response(404, ErrorCode.X, ...)` and `{404: ErrorCode.X}` pairs: the status
    is the code's; a code is never a string."""
    checked = 0
    for path, tree in trees():
        for node in ast.walk(tree):
            pairs: list[tuple[ast.expr | None, ast.expr]] = []
            if _is_error_response(node):
                assert isinstance(node, ast.Call)
                named = [k.value for k in node.keywords if k.arg == "code"]
                code = node.args[1] if len(node.args) > 1 else named[0]
                assert not isinstance(code, ast.Constant), f"{path}:{node.lineno}: a literal code"
                pairs.append((node.args[0] if node.args else None, code))
            elif isinstance(node, ast.Dict):
                pairs.extend((k, v) for k, v in zip(node.keys, node.values, strict=True))
                # The error shape written out by hand: its code must be a member too.
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        assert not isinstance(value, ast.Constant), f"{path}:{node.lineno}"
            for status, code in pairs:
                member = _member(code)
                if member is None or not isinstance(status, ast.Constant):
                    continue
                where = f"{path.relative_to(SRC)}:{status.lineno}"
                assert status.value == member.status, f"{where}: {status.value!r} {member.value}"
                checked += 1
    assert checked >= 10  # the scan sees the calls


def _codes(response: dict[str, Any]) -> list[str]:
    schema = response["content"]["application/json"]["schema"]
    assert schema["allOf"] == [{"$ref": "#/components/schemas/ErrorAnswer"}]
    codes: list[str] = schema["properties"]["error"]["properties"]["code"]["enum"]
    return codes


def test_every_code_is_described_under_a_response_of_its_status() -> None:
    doc: dict[str, Any] = document()
    components = doc["components"]
    assert components["schemas"]["ErrorCode"]["enum"] == [code.value for code in ErrorCode]
    error = components["schemas"]["ErrorDetail"]["properties"]["code"]
    assert error == {"$ref": "#/components/schemas/ErrorCode"}
    for code in ErrorCode:  # what each means, for people
        assert (
            f"`{code.value}` ({code.status}): {code.when}"
            in (components["schemas"]["ErrorCode"]["description"])
        )
    described: set[str] = set()
    for response in components["responses"].values():
        described.update(_codes(response))
    assert described == {code.value for code in ErrorCode}
    # Where an operation names an error response, every code in it has that status.
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if status == "200":
                    continue
                name = response["$ref"].rsplit("/", 1)[1]
                for value in _codes(components["responses"][name]):
                    assert ErrorCode(value).status == int(status), (method, path, status, value)


def test_the_error_shape_is_unchanged() -> None:
    """An answer made with a member is byte for byte the one made with its string."""
    made = error_response(404, ErrorCode.NOT_FOUND, "key 'x' is not in table 'users'")
    assert (
        made.body
        == b'{"error":{"code":"not_found","message":"key \'x\' is not in table \'users\'"}}'
    )
    unavailable = failure_response(Failure(FailureReason.UNAVAILABLE, "restoring", 2.4))
    assert unavailable.status == 503
    assert unavailable.body == b'{"error":{"code":"unavailable","message":"restoring"}}'
    assert dict(unavailable.headers)["retry-after"] == "2"
