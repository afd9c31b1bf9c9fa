"""Click options made from the fields of a settings model, so that each setting is defined once.

A field `max_in_flight: int = Field(512, ge=1, description=...)` of a model whose environment
prefix is `SPARKIQ_` becomes the option `--max-in-flight` (parameter `max_in_flight`) that
also reads `SPARKIQ_MAX_IN_FLIGHT`, of type `click.IntRange(min=1)`, default 512, and the
field's description as its help; `--help` shows the variable and the default. By the field's
type:

- `bool`: a `--x/--no-x` flag (another spelling may be given, e.g. `--protect-ops/--open-ops`);
- `int` and `float` with bounds (ge, gt, le, lt): `click.IntRange` / `click.FloatRange`;
- `Literal[...]`: `click.Choice`;
- `Path`: `click.Path`, of an existing file when the name ends in `_file` or `_files`, of a
  directory when it ends in `_dir`;
- `tuple[X, ...]`: a repeatable option;
- `X | None`: as X, default None (nothing given).

A type with no option type here (say, `KafkaSecurity`) needs `click_type=`; a field the command
line must give (though code may leave it at its default) takes `required=True`.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
import click
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

_F = TypeVar("_F", bound=Callable[..., Any])

# Stands for "the model's default" where None is a value of its own.
_FROM_MODEL: Any = object()


def flag_name(name: str) -> str:
    """The option of field `name`: `--kebab-case`."""
    return "--" + name.replace("_", "-")


def env_var(model: type[BaseModel], name: str) -> str:
    """The environment variable of field `name`: the model's `env_prefix` and the name."""
    prefix = str(model.model_config.get("env_prefix", ""))
    return (prefix + name).upper()


def field_option(
    model: type[BaseModel],
    name: str,
    *,
    flag: str | None = None,
    click_type: click.ParamType[Any] | None = None,
    default: Any = _FROM_MODEL,
    required: bool = False,
) -> Callable[[_F], _F]:
    """The click option of `model`'s field `name` (see the module docstring); `flag` replaces
    the option's spelling, `click_type` its type, `default` its default."""
    field = model.model_fields[name]
    annotation = _unwrap_optional(field.annotation)
    kwargs: dict[str, Any] = {
        "envvar": env_var(model, name),
        "show_envvar": True,
        "help": field.description,
    }
    if get_origin(annotation) is tuple:
        args = get_args(annotation)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"{model.__name__}.{name}: of tuples, only tuple[X, ...] is an option")
        kwargs["multiple"] = True
        annotation = args[0]
    if annotation is bool and click_type is None:
        flag = flag or f"{flag_name(name)}/--no-{name.replace('_', '-')}"
    else:
        kwargs["type"] = click_type or _click_type(model, name, annotation, field)
    if required:
        kwargs["required"] = True  # no default: one would satisfy the requirement
    else:
        model_default = field.get_default(call_default_factory=True)
        kwargs["default"] = model_default if default is _FROM_MODEL else default
        kwargs["show_default"] = True
    option: Callable[[_F], _F] = click.option(flag or flag_name(name), name, **kwargs)
    return option


def settings_options(
    model: type[BaseModel],
    *,
    exclude: Iterable[str] = (),
    flags: Mapping[str, str] | None = None,
) -> Callable[[_F], _F]:
    """The options of every field of `model` but those in `exclude` (given by hand): its own
    fields first, then those it inherits, each in the order of its class. `flags` respells
    some of them (field -> option)."""
    skip = set(exclude)
    inherited = {
        field
        for base in model.__mro__[1:]
        if isinstance(base, type) and issubclass(base, BaseModel)
        for field in base.model_fields
    }
    names = sorted((n for n in model.model_fields if n not in skip), key=lambda n: n in inherited)
    options = [field_option(model, n, flag=(flags or {}).get(n)) for n in names]

    def decorate(command: _F) -> _F:
        for option in reversed(options):  # click lists the outermost decorator first
            command = option(command)
        return command

    return decorate


def _unwrap_optional(annotation: Any) -> Any:
    """`X` of `X | None`; any other annotation as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _click_type(
    model: type[BaseModel], name: str, annotation: Any, field: FieldInfo
) -> click.ParamType[Any]:
    if get_origin(annotation) is Literal:
        return click.Choice([str(value) for value in get_args(annotation)])
    if annotation is Path:
        if name.endswith(("_file", "_files")):
            return click.Path(dir_okay=False, exists=True, path_type=Path)
        if name.endswith("_dir"):
            return click.Path(file_okay=False, path_type=Path)
        return click.Path(path_type=Path)
    if annotation is int or annotation is float:
        return _number_type(annotation, field)
    if annotation is str:
        return click.STRING
    raise TypeError(
        f"{model.__name__}.{name}: no click type for {annotation!r}; pass click_type= (or "
        "write the option by hand and exclude the field)"
    )


def _number_type(annotation: type[int] | type[float], field: FieldInfo) -> click.ParamType[Any]:
    """`int`/`float`, or an IntRange/FloatRange of the field's bounds."""
    bounds: dict[str, Any] = {}
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            bounds["min"] = bound.ge
        elif isinstance(bound, annotated_types.Gt):
            bounds.update(min=bound.gt, min_open=True)
        elif isinstance(bound, annotated_types.Le):
            bounds["max"] = bound.le
        elif isinstance(bound, annotated_types.Lt):
            bounds.update(max=bound.lt, max_open=True)
    if annotation is int:
        return click.IntRange(**bounds) if bounds else click.INT
    return click.FloatRange(**bounds) if bounds else click.FLOAT


def settings_error(exc: ValidationError, flags: Mapping[str, str] | None = None) -> str:
    """A model's validation errors as the options to fix, one line: `--listen: listen must
    be host:port ... (got '127.0.0.1:0')`, never pydantic's own dump. `flags` maps fields to
    other spellings (as in `settings_options`)."""
    reasons = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        spelled = (flags or {}).get(field, flag_name(field)).split("/")[0] if field else ""
        message = str(error["msg"]).removeprefix("Value error, ")
        shown = repr(error["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        where = f"{spelled}: " if spelled else ""
        got = f" (got {shown})" if field and str(error["input"]) not in message else ""
        reasons.append(f"{where}{message}{got}")
    return "; ".join(reasons)
