"""``FTRL_PS_*`` environment variables -> a role's typed options, with pydantic-settings.

One mechanism for every options dataclass (``ShardOptions``, ``WorkerOptions``,
``ExportOptions``, ``GenOptions``, ...): :func:`settings_class` builds a
:class:`pydantic_settings.BaseSettings` subclass from the dataclass's fields
(names, types, defaults), and :func:`load_options` reads the environment
through it and returns the options object. Field ``some_field`` is read from
``FTRL_PS_SOME_FIELD``.

Rules
-----
* switches (bool fields) take ``1/true/yes/on`` or ``0/false/no/off``;
* an empty value counts as unset (handy for ``${VAR:-}`` in compose files);
* an ``FTRL_PS_*`` variable that names no field is an error naming it and the
  closest known name (pydantic-settings alone would ignore it);
* ``staleness`` takes an integer >= 0 or ``inf``/``none``/``async`` (None);
  ``worker_index`` takes an integer >= 0 or ``auto`` (None);
  ``adaptive_rounds`` takes a switch word or ``auto`` (None: the default);
* numbers must be finite; a bad value is a :class:`~ftrl_ps.errors.ConfigError`
  naming the variable;
* the token (``FTRL_PS_TOKEN``) is a field like any other, but it is never
  shown: not in a settings object's repr, not in :func:`describe`, not in
  error messages.

Precedence, highest first: ``overrides`` (e.g. a command line), the
environment, ``defaults`` (e.g. a service's own defaults), the dataclass's
defaults.

>>> from ftrl_ps.data.gen import GenOptions
>>> opts = load_options(GenOptions, {"FTRL_PS_OUTDIR": "/d", "FTRL_PS_ROWS": "10",
...                                  "FTRL_PS_QUIET": "yes", "FTRL_PS_SEED": ""})
>>> opts.outdir, opts.rows, opts.quiet, opts.seed
('/d', 10, True, 0)
>>> try:
...     load_options(GenOptions, {"FTRL_PS_OUTDIR": "/d", "FTRL_PS_ROWZ": "10"})
... except ConfigError as exc:
...     print(str(exc).split(". Known")[0])
unknown environment variable(s) for GenOptions: FTRL_PS_ROWZ (did you mean FTRL_PS_ROWS?)
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import functools
import os
import types
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import AllowInfNan, BeforeValidator, Field, ValidationError, create_model
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from ftrl_ps.errors import ConfigError

__all__ = [
    "FIELD_PARSERS",
    "OptionsSettings",
    "PREFIX",
    "SECRET_FIELDS",
    "check_environ",
    "describe",
    "env_name",
    "load_options",
    "parse_staleness",
    "parse_switch",
    "parse_worker_index",
    "settings_class",
]

T = TypeVar("T")

PREFIX = "FTRL_PS_"
#: fields whose value is never shown
SECRET_FIELDS = frozenset({"token", "predict_token"})
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
INF_WORDS = frozenset({"inf", "infinity", "none", "async"})


def env_name(field_name: str) -> str:
    """The variable of a field: ``FTRL_PS_`` + its name in upper case.

    >>> env_name("worker_index")
    'FTRL_PS_WORKER_INDEX'
    """
    return PREFIX + field_name.upper()


# --- value parsers (applied to strings; typed values pass through) -----------------

def parse_switch(text: str) -> bool:
    """``1/true/yes/on`` -> True, ``0/false/no/off`` -> False (any case, spaces ignored).

    >>> parse_switch(" Yes"), parse_switch("OFF")
    (True, False)
    """
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError("expected one of 1/true/yes/on or 0/false/no/off")


def _int_at_least_zero(text: str, expected: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"expected {expected}") from None
    if value < 0:
        raise ValueError(f"expected {expected}")
    return value


def parse_staleness(text: str) -> int | None:
    """SSP staleness: an integer >= 0, or ``inf``/``infinity``/``none``/``async`` -> None.

    >>> parse_staleness("3"), parse_staleness("INF"), parse_staleness("async")
    (3, None, None)
    """
    if text.strip().lower() in INF_WORDS:
        return None
    return _int_at_least_zero(text, "an integer >= 0 or inf")


def parse_worker_index(text: str) -> int | None:
    """A worker index: an integer >= 0, or ``auto`` -> None (the servers assign one).

    >>> parse_worker_index("2"), parse_worker_index("auto")
    (2, None)
    """
    if text.strip().lower() == "auto":
        return None
    return _int_at_least_zero(text, "an integer >= 0 or auto")


def parse_auto_switch(text: str) -> bool | None:
    """A switch, or ``auto`` -> None (the program decides).

    >>> parse_auto_switch("auto"), parse_auto_switch("off")
    (None, False)
    """
    return None if text.strip().lower() == "auto" else parse_switch(text)


#: fields whose text has a meaning beyond their type, by field name
FIELD_PARSERS: dict[str, Callable[[str], Any]] = {
    "staleness": parse_staleness,
    "worker_index": parse_worker_index,
    "adaptive_rounds": parse_auto_switch,
}


def _on_text(parse: Callable[[str], Any]) -> BeforeValidator:
    def validate(value: Any) -> Any:
        return parse(value) if isinstance(value, str) else value

    return BeforeValidator(validate)


_SWITCH = Annotated[bool, _on_text(parse_switch)]
_FINITE = Annotated[float, AllowInfNan(False)]


def _field_type(name: str, hint: Any) -> Any:
    """The pydantic type of a dataclass field: switch words for bools, finite floats,
    the field's own parser where :data:`FIELD_PARSERS` has one."""
    if name in FIELD_PARSERS:
        return Annotated[hint, _on_text(FIELD_PARSERS[name])]
    is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if is_union else ()
    members = args or (hint,)
    mapped = [_SWITCH if m is bool else _FINITE if m is float else m for m in members]
    return functools.reduce(lambda a, b: a | b, mapped) if args else mapped[0]


# --- the settings classes ----------------------------------------------------------

@dataclass(frozen=True)
class _Inputs:
    environ: Mapping[str, str] | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)


# What load_options reads: set around one instantiation (a context variable, so
# threads and tasks never see each other's environment).
_INPUTS: contextvars.ContextVar[_Inputs | None] = contextvars.ContextVar(
    "ftrl_ps_settings_inputs", default=None
)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping, not ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        # the config is case-insensitive with env_ignore_empty: lower-case keys, no ""
        self.env_vars = {k.lower(): v for k, v in environ.items() if v != ""}


class OptionsSettings(BaseSettings):
    """Base of the classes :func:`settings_class` builds.

    Sources, highest priority first: keyword arguments, the environment
    (``FTRL_PS_<FIELD>``; ``os.environ`` unless :func:`load_options` passes a
    mapping), the defaults :func:`load_options` was given, the field defaults.
    No ``.env`` or secrets files are read. pydantic-settings matches names in
    any case; :func:`load_options` first rejects every spelling but upper case.
    """

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        case_sensitive=False,
        env_ignore_empty=True,
        extra="forbid",
        frozen=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        inputs = _INPUTS.get() or _Inputs()
        env = (env_settings if inputs.environ is None
               else _MappingEnvSource(settings_cls, inputs.environ))
        return init_settings, env, InitSettingsSource(settings_cls, dict(inputs.defaults))


_CLASSES: dict[tuple[type[Any], frozenset[str]], type[OptionsSettings]] = {}


def _settings_class(options_cls: type[Any], required: frozenset[str]) -> type[OptionsSettings]:
    if not dataclasses.is_dataclass(options_cls):
        raise TypeError(f"{options_cls!r} is not a dataclass")
    hints = typing.get_type_hints(options_cls)
    unknown = required - {f.name for f in dataclasses.fields(options_cls)}
    if unknown:
        raise TypeError(f"{options_cls.__name__} has no field(s) {sorted(unknown)}")
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(options_cls):
        if not f.init:
            continue
        kwargs: dict[str, Any] = {"repr": f.name not in SECRET_FIELDS}
        if f.name in required:
            pass  # no default: pydantic reports it missing
        elif f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        fields[f.name] = (_field_type(f.name, hints[f.name]), Field(**kwargs))
    model: type[OptionsSettings] = create_model(
        f"{options_cls.__name__}Settings",
        __base__=OptionsSettings,
        __doc__=f"``FTRL_PS_*`` settings of :class:`{options_cls.__module__}."
        f"{options_cls.__qualname__}`.",
        **fields,
    )
    return model


def settings_class(
    options_cls: type[Any], *, required: Iterable[str] = ()
) -> type[OptionsSettings]:
    """The :class:`OptionsSettings` subclass of the options dataclass ``options_cls``.

    One field per dataclass field, of the same name, type and default;
    ``required`` names fields that must be given although the dataclass has a
    default (e.g. a service that wants an explicit worker index). Cached.

    >>> from ftrl_ps.data.gen import GenOptions
    >>> cls = settings_class(GenOptions)
    >>> cls.__name__, cls.model_fields["rows"].default, cls.model_fields["outdir"].is_required()
    ('GenOptionsSettings', 1000000, True)
    """
    key = (options_cls, frozenset(required))
    if key not in _CLASSES:
        _CLASSES[key] = _settings_class(*key)
    return _CLASSES[key]


# --- loading -----------------------------------------------------------------------

def _known(options_cls: type[Any], extras: Iterable[str]) -> set[str]:
    from ftrl_ps.learn.logs import FORMAT_ENV

    return ({env_name(f.name) for f in dataclasses.fields(options_cls) if f.init}
            | set(extras) | {FORMAT_ENV})


def check_environ(
    options_cls: type[Any],
    environ: Mapping[str, str],
    *,
    extras: Iterable[str] = (),
    what: str | None = None,
) -> None:
    """Raise :class:`ConfigError` if ``environ`` has an ``FTRL_PS_*`` variable (in
    any case) that is no field of ``options_cls`` and not in ``extras``."""
    known = _known(options_cls, extras)
    unknown = sorted(k for k in environ if k.upper().startswith(PREFIX) and k not in known)
    if not unknown:
        return
    by_suffix = {k.removeprefix(PREFIX): k for k in sorted(known)}  # the prefix is no clue
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name.upper().removeprefix(PREFIX), list(by_suffix),
                                          n=1, cutoff=0.7)
        parts.append(f"{name} (did you mean {by_suffix[close[0]]}?)" if close else name)
    raise ConfigError(
        f"unknown environment variable(s) for {what or options_cls.__name__}: "
        f"{', '.join(parts)}. Known: {', '.join(sorted(known))}"
    )


def _explain(
    exc: ValidationError,
    environ: Mapping[str, str],
    overrides: Collection[str],
    defaults: Collection[str],
) -> str:
    """One line naming each bad variable (secret values replaced by ``***``)."""
    seen: dict[str, str] = {}
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        if name in seen:
            continue
        var = env_name(name)
        if err["type"] == "missing":
            seen[name] = f"{var} is required"
            continue
        if err["type"] == "extra_forbidden":
            seen[name] = f"{name!r} is no option"
            continue
        if name in overrides:
            label = name
        elif environ.get(var):
            label = var
        elif name in defaults:
            label = f"{var} (default)"
        else:
            label = var
        shown = "***" if name in SECRET_FIELDS else repr(err.get("input"))
        message = str(err["msg"]).removeprefix("Value error, ")
        seen[name] = f"{label}={shown}: {message}"
    return "; ".join(seen.values())


def load_options(
    options_cls: type[T],
    environ: Mapping[str, str] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    extras: Iterable[str] = (),
    required: Iterable[str] = (),
    what: str | None = None,
) -> T:
    """The options ``options_cls`` from ``FTRL_PS_*`` variables.

    Parameters
    ----------
    options_cls : type
        An options dataclass (field names = the variables' names after ``FTRL_PS_``).
    environ : mapping, optional
        The environment (default ``os.environ``); other variables are ignored.
    defaults : mapping, optional
        Field -> value used when the environment does not set the field.
    overrides : mapping, optional
        Field -> value that wins over the environment (e.g. command-line flags).
    extras : iterable of str
        ``FTRL_PS_*`` names the caller handles itself (not an error, not read).
    required : iterable of str
        Fields that must be set although the dataclass has a default.
    what : str, optional
        Who reads the variables, for messages (default: the class name).

    Raises
    ------
    ConfigError
        An unknown ``FTRL_PS_*`` variable, a value of the wrong type, or a
        required field that is not set. The message names the variable.
    """
    env = os.environ if environ is None else environ
    check_environ(options_cls, env, extras=extras, what=what)
    settings_cls = settings_class(options_cls, required=required)
    given = dict(overrides or {})
    fallback = dict(defaults or {})
    reset = _INPUTS.set(_Inputs(env, fallback))
    try:
        settings = settings_cls(**given)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, env, given, fallback)) from None
    except SettingsError as exc:  # pragma: no cover - only complex (JSON) fields raise it
        raise ConfigError(f"{what or options_cls.__name__}: {exc}") from None
    finally:
        _INPUTS.reset(reset)
    values = {name: getattr(settings, name) for name in type(settings).model_fields}
    return options_cls(**values)


def describe(options: Any) -> str:
    """``options`` as one line, every field shown except secrets (``***``): the
    class's own fields first, then those of the flag groups it shares with other
    commands (:mod:`ftrl_ps.ps.option_groups`).

    >>> from ftrl_ps.ps.export import ExportOptions
    >>> describe(ExportOptions(server="http://s:1", model="m", token="abc"))[:58]
    "ExportOptions(server='http://s:1', model='m', token=***, t"
    """
    own = set(vars(type(options)).get("__annotations__", {}))
    parts = []
    for f in sorted(dataclasses.fields(options), key=lambda f: f.name not in own):
        value = getattr(options, f.name)
        shown = "***" if f.name in SECRET_FIELDS and value is not None else repr(value)
        parts.append(f"{f.name}={shown}")
    return f"{type(options).__name__}({', '.join(parts)})"
