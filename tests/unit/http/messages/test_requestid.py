"""Request ids (sparkiq.http.messages.requestid): a caller's id is kept only if well formed."""

from __future__ import annotations

import pytest

from sparkiq.http.messages.requestid import accept_request_id, new_request_id


@pytest.mark.parametrize(
    "sent",
    ["0123456789abcdef", "ABCxyz09", "req-1", "a.b_c-d", "x" * 64, b"0123456789abcdef"],
)
def test_a_well_formed_id_is_kept(sent: str | bytes) -> None:
    text = sent.decode() if isinstance(sent, bytes) else sent
    assert accept_request_id(sent) == text


@pytest.mark.parametrize(
    "sent", [None, "", "x" * 65, "a b", "ab\n", "caf\u00e9", "\u0662\u0663", "a/b", b"a\xffb"]
)
def test_anything_else_gets_a_new_id(sent: str | bytes | None) -> None:
    made = accept_request_id(sent)
    assert made != sent
    assert len(made) == 16
    assert set(made) <= set("0123456789abcdef")


def test_new_ids_differ() -> None:
    assert len({new_request_id() for _ in range(1000)}) == 1000
