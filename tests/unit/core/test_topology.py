"""A member's subscription user data in both its forms: plain (every leader reads it) and
compact (for leaders of protocol 2)."""

from __future__ import annotations

import orjson

from sparkiq.core.topology import MemberInfo


def member() -> MemberInfo:
    return MemberInfo(
        url="http://sparkiq-serving-3.sparkiq-serving.prod.svc.cluster.local:8100",
        actives=frozenset({("orders-changelog", 1), ("users-changelog", 2)}),
        standbys=frozenset({("orders-changelog", 3)}),
        lags={("orders-changelog", 1): 5, ("orders-changelog", 3): 0, ("users-changelog", 2): 7},
        misplaced={("users-changelog", 2): 3},
        instance="c0ffee",
        started_ms=1_700_000_000_000,
    )


def test_both_forms_round_trip() -> None:
    info = member()
    assert MemberInfo.from_bytes(info.to_bytes()) == info
    assert MemberInfo.from_bytes(info.to_bytes(compact=True)) == info


def test_the_plain_form_is_what_a_leader_of_protocol_1_reads() -> None:
    raw = orjson.loads(member().to_bytes())
    assert raw["v"] == 2
    assert raw["actives"] == ["orders-changelog:1", "users-changelog:2"]
    assert raw["lags"]["orders-changelog:3"] == 0


def test_the_compact_form_names_each_topic_once() -> None:
    tps = [(f"app.table{t}-changelog", p) for t in range(10) for p in range(60)]
    info = MemberInfo(
        url="http://n:8100",
        actives=frozenset(tps[:300]),
        standbys=frozenset(tps[300:]),
        lags=dict.fromkeys(tps, 12_345),
    )
    compact, plain = info.to_bytes(compact=True), info.to_bytes()
    assert MemberInfo.from_bytes(compact) == info
    assert compact.count(b"app.table3-changelog") == 1
    assert len(compact) * 3 < len(plain)


def test_a_member_of_protocol_1_says_so_by_its_v() -> None:
    assert MemberInfo.from_bytes(b'{"url": "http://old:8100"}').protocol == 1
