"""ftrl_ps.cluster.settings: FTRL_PS_* environment -> typed options via pydantic-settings."""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from ftrl_ps.cluster import settings as settings_mod
from ftrl_ps.cluster.settings import (
    OptionsSettings,
    check_environ,
    describe,
    env_name,
    load_options,
    parse_switch,
    settings_class,
)
from ftrl_ps.data.gen import GenOptions
from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.export import ExportOptions
from ftrl_ps.ps.worker_main import WorkerOptions
from ftrl_ps.server.options import ShardOptions

ALL_OPTIONS = [ShardOptions, WorkerOptions, ExportOptions, GenOptions]


@dataclass(frozen=True)
class Demo:
    """A stand-in options class with every kind of field."""

    name: str
    count: int = 1
    ratio: float = 0.5
    limit: float | None = None
    flag: bool = False
    staleness: int | None = None
    worker_index: int | None = None
    token: str | None = field(default=None, repr=False)


# --- the generated settings classes ------------------------------------------------

@pytest.mark.parametrize("options_cls", ALL_OPTIONS)
def test_settings_class_mirrors_the_dataclass(options_cls: type) -> None:
    cls = settings_class(options_cls)
    assert issubclass(cls, OptionsSettings) and issubclass(cls, BaseSettings)
    fields = dataclasses.fields(options_cls)
    assert list(cls.model_fields) == [f.name for f in fields]
    for f in fields:
        info = cls.model_fields[f.name]
        if f.default is dataclasses.MISSING:
            assert info.is_required(), f.name
        else:
            assert info.default == f.default, f.name
    assert settings_class(options_cls) is cls  # cached


def test_required_makes_a_defaulted_field_required() -> None:
    cls = settings_class(WorkerOptions, required=["worker_index"])
    assert cls.model_fields["worker_index"].is_required()
    assert not settings_class(WorkerOptions).model_fields["worker_index"].is_required()
    with pytest.raises(TypeError, match="no field"):
        settings_class(WorkerOptions, required=["nope"])


def test_settings_class_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTRL_PS_NAME", "from-env")
    monkeypatch.setenv("FTRL_PS_FLAG", "on")
    monkeypatch.setenv("FTRL_PS_COUNT", "")
    settings: Any = settings_class(Demo)()
    assert (settings.name, settings.flag, settings.count) == ("from-env", True, 1)
    assert load_options(Demo).name == "from-env"  # environ=None: os.environ


def test_variable_names() -> None:
    assert env_name("batch_size") == "FTRL_PS_BATCH_SIZE"
    opts = load_options(WorkerOptions, {"FTRL_PS_SERVER": "http://a:1,http://b:2",
                                        "FTRL_PS_INPUT": "/d/train.svm",
                                        "FTRL_PS_NUM_WORKERS": "3", "FTRL_PS_BATCH_SIZE": "100",
                                        "FTRL_PS_ALPHA": "-0.5", "PATH": "/bin"})
    assert (opts.server, opts.input, opts.num_workers, opts.batch_size, opts.alpha) == (
        "http://a:1,http://b:2", "/d/train.svm", 3, 100, -0.5)


# --- the rules ---------------------------------------------------------------------

def test_unknown_variable_is_an_error_naming_it_and_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"FTRL_PS_BACH_SIZE \(did you mean FTRL_PS_BATCH_SIZE\?"):
        load_options(WorkerOptions, {"FTRL_PS_BACH_SIZE": "10"})
    with pytest.raises(ConfigError, match=r"for services.gen: FTRL_PS_PORT\. Known"):
        load_options(GenOptions, {"FTRL_PS_OUTDIR": "/d", "FTRL_PS_PORT": "1"},
                     what="services.gen")  # a server field, not gen's
    with pytest.raises(ConfigError, match=r"ftrl_ps_rows \(did you mean FTRL_PS_ROWS\?"):
        load_options(GenOptions, {"FTRL_PS_OUTDIR": "/d", "ftrl_ps_rows": "1"})
    with pytest.raises(ConfigError, match="FTRL_PS_ROWZ"):  # even when empty
        load_options(GenOptions, {"FTRL_PS_OUTDIR": "/d", "FTRL_PS_ROWZ": ""})
    check_environ(GenOptions, {"FTRL_PS_X": "1", "FTRL_PSX": "1"}, extras=["FTRL_PS_X"])


@pytest.mark.parametrize(("text", "value"), [("1", True), ("TRUE", True), (" yes", True),
                                             ("on", True), ("0", False), ("False", False),
                                             ("no", False), ("off", False)])
def test_switch_words(text: str, value: bool) -> None:
    assert parse_switch(text) is value
    assert load_options(Demo, {"FTRL_PS_NAME": "n", "FTRL_PS_FLAG": text}).flag is value


@pytest.mark.parametrize("text", ["2", "y", "t", "maybe"])
def test_other_switch_words_are_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=f"FTRL_PS_FLAG='{text}': expected one of 1/true"):
        load_options(Demo, {"FTRL_PS_NAME": "n", "FTRL_PS_FLAG": text})


def test_empty_value_counts_as_unset() -> None:
    opts = load_options(Demo, {"FTRL_PS_NAME": "n", "FTRL_PS_COUNT": "", "FTRL_PS_FLAG": "",
                               "FTRL_PS_LIMIT": ""}, defaults={"count": 7})
    assert (opts.count, opts.flag, opts.limit) == (7, False, None)
    with pytest.raises(ConfigError, match="FTRL_PS_NAME is required"):
        load_options(Demo, {"FTRL_PS_NAME": ""})


@pytest.mark.parametrize(("text", "value"), [("inf", None), ("Infinity", None), ("none", None),
                                             ("async", None), ("0", 0), ("3", 3)])
def test_staleness(text: str, value: int | None) -> None:
    assert load_options(ShardOptions, {"FTRL_PS_STALENESS": text}).staleness == value


@pytest.mark.parametrize("text", ["-1", "x", "1.5"])
def test_bad_staleness_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigError, match=f"FTRL_PS_STALENESS='{text}': expected an integer"):
        load_options(ShardOptions, {"FTRL_PS_STALENESS": text})


def test_worker_index_auto() -> None:
    base = {"FTRL_PS_NAME": "n"}
    assert load_options(Demo, {**base, "FTRL_PS_WORKER_INDEX": "auto"}).worker_index is None
    assert load_options(Demo, {**base, "FTRL_PS_WORKER_INDEX": "2"}).worker_index == 2
    with pytest.raises(ConfigError, match="FTRL_PS_WORKER_INDEX='-2'"):
        load_options(Demo, {**base, "FTRL_PS_WORKER_INDEX": "-2"})


def test_bad_values_name_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^FTRL_PS_PORT='70o0': .*valid integer"):
        load_options(ShardOptions, {"FTRL_PS_PORT": "70o0"})
    with pytest.raises(ConfigError, match=r"FTRL_PS_WORKER_TIMEOUT='inf': .*finite"):
        load_options(ShardOptions, {"FTRL_PS_WORKER_TIMEOUT": "inf"})
    with pytest.raises(ConfigError, match=r"FTRL_PS_LIMIT='nan'.*finite"):
        load_options(Demo, {"FTRL_PS_NAME": "n", "FTRL_PS_LIMIT": "nan"})
    with pytest.raises(ConfigError, match=r"FTRL_PS_BITS='x'.*; FTRL_PS_NUM_WORKERS='y'"):
        load_options(ShardOptions, {"FTRL_PS_NUM_WORKERS": "y", "FTRL_PS_BITS": "x"})
    with pytest.raises(ConfigError, match=r"FTRL_PS_COUNT \(default\)='z'"):
        load_options(Demo, {"FTRL_PS_NAME": "n"}, defaults={"count": "z"})
    with pytest.raises(ConfigError, match="'bogus' is no option"):
        load_options(Demo, {"FTRL_PS_NAME": "n"}, overrides={"bogus": 1})


def test_precedence_overrides_env_defaults_dataclass() -> None:
    environ = {"FTRL_PS_NAME": "env", "FTRL_PS_COUNT": "2"}
    opts = load_options(Demo, environ, defaults={"count": 5, "ratio": 0.25, "name": "d"},
                        overrides={"name": "cli"})
    assert (opts.name, opts.count, opts.ratio, opts.limit) == ("cli", 2, 0.25, None)


def test_typed_values_pass_through() -> None:
    opts = load_options(Demo, {}, overrides={"name": "n", "flag": True, "staleness": None,
                                             "worker_index": 4})
    assert (opts.flag, opts.staleness, opts.worker_index) == (True, None, 4)


def test_token_is_never_shown() -> None:
    secret = "s3cr3t-token"
    environ = {"FTRL_PS_SERVER": "http://s:1", "FTRL_PS_MODEL": "m", "FTRL_PS_TOKEN": secret}
    opts = load_options(ExportOptions, environ)
    assert opts.token == secret
    export_settings: Any = settings_class(ExportOptions)
    settings = export_settings(server="s", model="m", token=secret)
    line = describe(opts)
    assert secret not in repr(opts) and secret not in repr(settings) and secret not in line
    assert "token=***" in line and "server='http://s:1'" in line
    assert "token=None" in describe(ExportOptions(server="s", model="m"))
    with pytest.raises(ConfigError) as info:
        load_options(Demo, {"FTRL_PS_NAME": "n"}, overrides={"token": 12345})
    assert "token=***" in str(info.value) and "12345" not in str(info.value)


def test_the_module_uses_no_argparse_and_no_cli() -> None:
    tree = ast.parse(Path(settings_mod.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    assert not {n for n in names if n == "argparse" or n.startswith("ftrl_ps.cli")}
    assert settings_mod.__all__ == sorted(settings_mod.__all__)
