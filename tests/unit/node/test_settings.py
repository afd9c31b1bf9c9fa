from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from sparkiq.core.errors import ConfigError
from sparkiq.http.settings import HttpSettings, TunableHttpSettings
from sparkiq.node.settings import NodeSettings


def test_every_setting_is_documented() -> None:
    for model in (NodeSettings, HttpSettings):
        undocumented = [name for name, field in model.model_fields.items() if not field.description]
        assert undocumented == [], model.__name__


def test_the_node_derives_the_http_settings_defined_once() -> None:
    """The node's HTTP settings are HttpSettings' own fields (one definition), and reach it."""
    from sparkiq.cli.serving import http_settings

    tunable = TunableHttpSettings.model_fields

    def definitions(model: type[BaseModel]) -> dict[str, tuple[object, ...]]:
        return {
            name: (field.annotation, field.default, field.description, field.metadata)
            for name, field in model.model_fields.items()
            if name in tunable
        }

    assert (
        definitions(NodeSettings) == definitions(HttpSettings) == definitions(TunableHttpSettings)
    )
    node = NodeSettings(request_budget_s=2.5, hop_limit=5, max_key_bytes=100, max_connections=9)
    http = http_settings(node)
    assert {name: getattr(http, name) for name in tunable} == {
        name: getattr(node, name) for name in tunable
    }


def test_http_settings_out_of_bounds_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="request_budget_s: Input should be greater than 0"):
        HttpSettings(request_budget_s=0)
    with pytest.raises(ConfigError, match=r"default_range_limit .* at most max_range_limit"):
        HttpSettings(default_range_limit=20, max_range_limit=10)
    with pytest.raises(ConfigError, match="budget_s: no such setting; they are request_budget_s"):
        HttpSettings(budget_s=1.0)  # type: ignore[call-arg]


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
    from sparkiq.cli.serving import http_settings

    assert http_settings(NodeSettings()).forward_pipeline_depth == 16
    monkeypatch.setenv("SPARKIQ_FORWARD_PIPELINE_DEPTH", "1")
    assert http_settings(NodeSettings()).forward_pipeline_depth == 1
    with pytest.raises(ValidationError, match="forward_pipeline_depth"):
        NodeSettings(forward_pipeline_depth=0)


def test_connection_limit_and_timeouts_reach_the_http_layer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkiq.cli.serving import http_settings

    default = http_settings(NodeSettings())
    assert default.max_connections is None  # derived from the open-file limit at start
    assert (default.header_timeout_s, default.idle_timeout_s, default.request_timeout_s) == (
        10.0,
        75.0,
        30.0,
    )
    monkeypatch.setenv("SPARKIQ_MAX_CONNECTIONS", "2000")
    monkeypatch.setenv("SPARKIQ_HEADER_TIMEOUT_S", "2")
    monkeypatch.setenv("SPARKIQ_IDLE_TIMEOUT_S", "60")
    monkeypatch.setenv("SPARKIQ_REQUEST_TIMEOUT_S", "5.5")
    s = http_settings(NodeSettings())
    assert (s.max_connections, s.header_timeout_s, s.idle_timeout_s, s.request_timeout_s) == (
        2000,
        2.0,
        60.0,
        5.5,
    )
    for name in ("max_connections", "header_timeout_s", "idle_timeout_s", "request_timeout_s"):
        with pytest.raises(ValidationError, match=name):
            NodeSettings(**{name: 0})


def test_serve_takes_the_connection_options_and_raises_the_open_file_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from sparkiq.cli import main as cli

    calls: list[str] = []
    started: list[NodeSettings] = []
    monkeypatch.setattr(
        "sparkiq.core.openfiles.raise_open_file_limit", lambda: calls.append("raise") or 0
    )
    monkeypatch.setattr(
        "sparkiq.cli.serving.run_node", lambda s: (calls.append("run"), started.append(s))
    )
    for name in ("SPARKIQ_MAX_CONNECTIONS", "SPARKIQ_HEADER_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    args = ["serve", "--bootstrap-servers", "127.0.0.1:9092", "--auth", "none"]
    args += ["--max-connections", "2000", "--header-timeout-s", "2"]
    result = CliRunner().invoke(cli.main, [*args, "--idle-timeout-s", "60"])
    assert result.exit_code == 0, result.output
    assert calls == ["raise", "run"]  # the limit is raised before the node derives from it
    (s,) = started
    assert (s.max_connections, s.header_timeout_s, s.idle_timeout_s) == (2000, 2.0, 60.0)
    assert s.request_timeout_s == 30.0
    refused = CliRunner().invoke(cli.main, [*args[:5], "--max-connections", "0"])
    assert refused.exit_code == 2
    assert "--max-connections" in refused.output
