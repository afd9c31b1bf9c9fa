from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkiq.settings import NodeSettings


def test_every_setting_is_documented() -> None:
    undocumented = [
        name for name, field in NodeSettings.model_fields.items() if not field.description
    ]
    assert undocumented == []


def test_environment_supplies_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKIQ_BOOTSTRAP_SERVERS", "127.0.0.1:1234")
    monkeypatch.setenv("SPARKIQ_STANDBY_REPLICAS", "2")
    s = NodeSettings()
    assert s.bootstrap_servers == "127.0.0.1:1234"
    assert s.standby_replicas == 2


def test_arguments_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKIQ_APP", "from-env")
    assert NodeSettings(app="explicit").app == "explicit"


def test_derived_names() -> None:
    s = NodeSettings(app="shop", listen="127.0.0.1:8101", state_dir=Path("/tmp/x"))
    assert s.url == "http://127.0.0.1:8101"
    assert s.group_id == "shop.serving"
    assert s.catalog_topic == "shop.catalog"
    assert NodeSettings(advertised_url="http://node-a:80/").url == "http://node-a:80"


def test_bad_listen_is_rejected() -> None:
    with pytest.raises(ValidationError, match="host:port"):
        NodeSettings(listen="8100")


def test_forward_pipeline_depth_reaches_the_http_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkiq.serving import http_settings

    assert http_settings(NodeSettings()).pipeline_depth == 16
    monkeypatch.setenv("SPARKIQ_FORWARD_PIPELINE_DEPTH", "1")
    assert http_settings(NodeSettings()).pipeline_depth == 1
    with pytest.raises(ValidationError, match="forward_pipeline_depth"):
        NodeSettings(forward_pipeline_depth=0)
