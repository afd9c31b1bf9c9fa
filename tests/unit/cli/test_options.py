"""`sparkiq serve`'s options are the node's settings: one option per `NodeSettings` field, with
the field's name, variable, default, bounds and description, and nothing else but what is
listed here with its reason. Also the generator of `sparkiq.cli.options` on its own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from sparkiq.cli import main as cli
from sparkiq.cli.options import env_var, field_option, flag_name, settings_options
from sparkiq.kafka.security import KafkaSecurity
from sparkiq.node.settings import NodeSettings

FIELDS = NodeSettings.model_fields

# Options of `serve` that are no field: --kafka-property KEY=VALUE is merged into the
# kafka_config field (by `sparkiq.cli.common.kafka_security`).
NOT_FIELDS = {"kafka_properties"}
# Fields whose option must be given (no default on the command line; code keeps the model's).
REQUIRED = {"bootstrap_servers"}
# Fields whose option takes something else than the field's value, and what it means:
# kafka_config's names a properties file, loaded (None: the field's default) by the command.
LOADED = {"kafka_config": lambda default: KafkaSecurity.load(default)}

# What deploy files, scripts and operators use: changing one of these breaks them.
DEPLOYED_FLAGS = {
    "--bootstrap-servers", "--app", "--kafka-config", "--kafka-property", "--listen",
    "--advertised-url", "--state-dir", "--standby-replicas", "--acceptable-lag",
    "--session-timeout-ms", "--heartbeat-interval-ms", "--standby-max-lag",
    "--active-timeout-s", "--request-budget-s", "--log-level", "--log-format",
    "--access-log", "--no-access-log", "--auth", "--jwt-secret-file", "--jwt-public-key-file",
    "--jwks-file", "--jwt-audience", "--jwt-issuer", "--jwt-tables-claim", "--api-keys-file",
    "--cluster-secret-file", "--protect-ops", "--open-ops", "--tls-cert-file",
    "--tls-key-file", "--tls-ca-file", "--max-in-flight", "--forward-pipeline-depth",
    "--max-connections", "--header-timeout-s", "--idle-timeout-s", "--request-timeout-s",
}  # fmt: skip


def serve_options() -> dict[str, click.Option]:
    return {p.name: p for p in cli.serve.params if isinstance(p, click.Option) and p.name}


def test_every_serve_option_is_a_field_of_the_same_name() -> None:
    strays = set(serve_options()) - set(FIELDS) - NOT_FIELDS
    assert not strays, f"`sparkiq serve` options with no NodeSettings field: {sorted(strays)}"


def test_every_field_is_a_serve_option() -> None:
    missing = set(FIELDS) - set(serve_options())
    assert not missing, f"NodeSettings fields `sparkiq serve` cannot set: {sorted(missing)}"


def test_every_option_has_its_fields_default_variable_and_help() -> None:
    ctx = click.Context(cli.serve)
    for name, option in serve_options().items():
        if name in NOT_FIELDS:
            continue
        field = FIELDS[name]
        default = option.get_default(ctx)
        assert option.envvar == f"SPARKIQ_{name.upper()}", name
        assert option.show_envvar, name
        assert option.help == field.description, name
        if name in REQUIRED:
            assert option.required, name  # and no default: it would satisfy the requirement
        elif name in LOADED:
            assert LOADED[name](default) == field.default, name
        elif option.multiple:
            assert tuple(default or ()) == field.default, name
        else:
            assert default == field.default, name
            assert option.show_default, name


def test_the_bounds_of_a_field_are_its_options() -> None:
    bounded = 0
    for name, option in serve_options().items():
        if not isinstance(option.type, click.IntRange | click.FloatRange):
            continue
        bounded += 1
        low = option.type.min
        assert low is not None, name
        below = low if option.type.min_open else low - 1
        with pytest.raises(ValueError, match=name):
            NodeSettings(**{name: below})
        with pytest.raises(click.BadParameter):
            option.type.convert(str(below), None, None)
        assert getattr(NodeSettings(**{name: low + 1}), name) == low + 1
    assert bounded >= 15


def test_deployed_option_names_are_kept() -> None:
    flags = {flag for o in serve_options().values() for flag in (*o.opts, *o.secondary_opts)}
    assert flags >= DEPLOYED_FLAGS, sorted(DEPLOYED_FLAGS - flags)


def test_help_shows_every_option_with_its_variable_and_default() -> None:
    ctx = click.Context(cli.serve)
    for name, option in serve_options().items():
        record = option.get_help_record(ctx)
        assert record is not None, name
        _, text = record
        if name not in NOT_FIELDS:
            assert f"env var: SPARKIQ_{name.upper()}" in text, name
        default = FIELDS[name].default if name in FIELDS else None
        if isinstance(default, bool):
            shown = (option.opts if default else option.secondary_opts)[0].lstrip("-")
            assert f"default: {shown}]" in text, (name, text)
        elif default not in (None, ()) and name not in LOADED and name not in REQUIRED:
            assert f"default: {default}" in text, (name, text)
    result = CliRunner().invoke(cli.main, ["serve", "--help"])
    assert result.exit_code == 0, result.output
    assert "--max-in-flight" in result.output
    assert "default: 512" in result.output


def test_serve_with_no_options_runs_the_models_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SPARKIQ_"):
            monkeypatch.delenv(name)
    started: list[NodeSettings] = []
    monkeypatch.setattr("sparkiq.core.openfiles.raise_open_file_limit", lambda: 0)
    monkeypatch.setattr("sparkiq.cli.serving.run_node", started.append)
    missing = CliRunner().invoke(cli.main, ["serve"])
    assert missing.exit_code == 2
    assert "Missing option '--bootstrap-servers'" in missing.output
    result = CliRunner().invoke(cli.main, ["serve", "--bootstrap-servers", "127.0.0.1:9092"])
    assert result.exit_code == 0, result.output
    assert started == [NodeSettings(bootstrap_servers="127.0.0.1:9092")]


def test_serve_reads_the_renamed_http_settings_from_options_and_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkiq.cli.serving import http_settings

    started: list[NodeSettings] = []
    monkeypatch.setattr("sparkiq.core.openfiles.raise_open_file_limit", lambda: 0)
    monkeypatch.setattr("sparkiq.cli.serving.run_node", started.append)
    monkeypatch.setenv("SPARKIQ_FORWARD_PIPELINE_DEPTH", "4")
    args = ["serve", "--bootstrap-servers", "127.0.0.1:9092", "--request-budget-s", "2.5"]
    result = CliRunner().invoke(cli.main, [*args, "--hop-limit", "5", "--protect-ops"])
    assert result.exit_code == 0, result.output
    (settings,) = started
    http = http_settings(settings)
    assert (http.request_budget_s, http.forward_pipeline_depth, http.hop_limit) == (2.5, 4, 5)
    assert settings.protect_ops is True
    refused = CliRunner().invoke(cli.main, [*args[:3], "--request-budget-s", "0"])
    assert refused.exit_code == 2
    assert "--request-budget-s" in refused.output


# -- the generator on its own ----------------------------------------------------------------


class Sample(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="APP_")

    count: int = Field(default=2, ge=1, le=9, description="How many.")
    ratio: float = Field(default=0.5, gt=0, lt=1, description="A share.")
    mode: Literal["a", "b"] = Field(default="a", description="Which.")
    verbose: bool = Field(default=False, description="Say more.")
    work_dir: Path = Field(default=Path("work"), description="Where.")
    key_files: tuple[Path, ...] = Field(default=(), description="Keys.")
    label: str | None = Field(default=None, description="A name.")


GOT: list[dict[str, Any]] = []


@click.command()
@settings_options(Sample, flags={"verbose": "--loud/--quiet"})
def sample(**values: Any) -> None:
    GOT.append(values)


def test_names_and_variables() -> None:
    assert flag_name("max_in_flight") == "--max-in-flight"
    assert env_var(Sample, "work_dir") == "APP_WORK_DIR"
    assert env_var(NodeSettings, "request_budget_s") == "SPARKIQ_REQUEST_BUDGET_S"


def test_generated_option_types(tmp_path: Path) -> None:
    params = {p.name: p for p in sample.params if isinstance(p, click.Option)}
    assert [p.name for p in sample.params] == list(Sample.model_fields)
    count, ratio = params["count"].type, params["ratio"].type
    assert isinstance(count, click.IntRange)
    assert (count.min, count.max, count.min_open) == (1, 9, False)
    assert isinstance(ratio, click.FloatRange)
    assert (ratio.min, ratio.max, ratio.min_open, ratio.max_open) == (0, 1, True, True)
    assert isinstance(params["mode"].type, click.Choice)
    assert params["verbose"].opts == ["--loud"]
    assert params["verbose"].secondary_opts == ["--quiet"]
    work_dir = params["work_dir"].type
    assert isinstance(work_dir, click.Path)
    assert (work_dir.file_okay, work_dir.dir_okay, work_dir.exists) == (False, True, False)
    key_files = params["key_files"].type
    assert isinstance(key_files, click.Path)
    assert (key_files.dir_okay, key_files.exists) == (False, True)
    assert params["key_files"].multiple
    assert params["label"].type == click.STRING
    assert params["label"].default is None

    key = tmp_path / "k.pem"
    key.write_text("k")
    GOT.clear()
    result = CliRunner().invoke(
        sample, ["--count", "3", "--loud", "--key-files", str(key)], env={"APP_MODE": "b"}
    )
    assert result.exit_code == 0, result.output
    assert [
        {
            "count": 3,
            "ratio": 0.5,
            "mode": "b",
            "verbose": True,
            "work_dir": Path("work"),
            "key_files": (key,),
            "label": None,
        }
    ] == GOT
    assert CliRunner().invoke(sample, ["--count", "10"]).exit_code == 2


def test_a_field_without_an_option_type_says_what_to_do() -> None:
    class Odd(BaseModel):
        thing: complex = Field(default=1j, description="?")

    with pytest.raises(TypeError, match="pass click_type="):
        field_option(Odd, "thing")
