"""Log lines of every ftrl-ps process: one line per event, with time, level and component.

:func:`setup_logging` sends the records of ``ftrl_ps.*`` and uvicorn to
stderr in one of two formats:

``text`` (default)::

    2026-11-01 13:02:11.482 INFO  server-0  listening on http://127.0.0.1:7000

``json`` (one object per line, for log collectors)::

    {"time": "2026-11-01T13:02:11.482Z", "level": "info", "component": "server-0",
     "logger": "ftrl_ps.server", "message": "listening on http://127.0.0.1:7000"}

The *component* is the process's role (``train``, ``server-0``, ``worker-1``,
``cluster``, ...), set once per process (:func:`set_component`; a forked
child sets its own). Expected errors are logged as one line, without a
traceback; only unexpected ones carry it (in JSON as the ``exception`` field
of the same line). The format comes from ``--log-format`` or, when that is
not given, ``$FTRL_PS_LOG_FORMAT`` (so exec'd children and containers
inherit it).

Lines that people and scripts read as they are (``servers: URL, ...``,
``ftrl-ps train: worker 0 was killed by signal 9: restarted ...``,
``ftrl-ps server: shard 0 restored checkpoint ...``) go through :func:`say`:
a log record like any other, so in ``json`` they are objects too, but in
``text`` they are the bare line (a prefix and the message), as before.
In ``json``, Python warnings are logged as well (logger ``py.warnings``), so
that every stderr line of a process is one object. The one exception is the
progress line on a terminal, redrawn in place with ``\r`` (off a terminal
it is a log record; :mod:`ftrl_ps.learn.progress`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from typing import Any

__all__ = [
    "FORMATS",
    "FORMAT_ENV",
    "JsonFormatter",
    "LEVELS",
    "TextFormatter",
    "component",
    "say",
    "set_component",
    "setup_logging",
    "uvicorn_level",
]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
#: environment variable with the default log format (``text`` or ``json``)
FORMAT_ENV = "FTRL_PS_LOG_FORMAT"

_component = "ftrl-ps"
#: the name of the handler :func:`setup_logging` installs
_HANDLER = "ftrl-ps"
#: the record attribute of a :func:`say` line: its prefix in the text format
_PLAIN = "ftrl_ps_plain"


def set_component(name: str) -> None:
    """Name this process's component in every later log line."""
    global _component
    _component = name


def component() -> str:
    """The current process's component name."""
    return _component


def _timestamp(record: logging.LogRecord, utc: bool) -> str:
    t = time.gmtime(record.created) if utc else time.localtime(record.created)
    sep = "T" if utc else " "
    return time.strftime(f"%Y-%m-%d{sep}%H:%M:%S", t) + f".{int(record.msecs):03d}" + (
        "Z" if utc else "")


class TextFormatter(logging.Formatter):
    """``DATE TIME LEVEL COMPONENT MESSAGE`` (a traceback only for unexpected errors)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = getattr(record, _PLAIN, None)
        if prefix is not None:  # a say() line: bare
            line = f"{prefix}{record.getMessage()}"
        else:
            line = (f"{_timestamp(record, utc=False)} {record.levelname:<5} {_component}  "
                    f"{record.getMessage()}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, component, logger, message[, exception]."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record, utc=True),
            "level": record.levelname.lower(),
            "component": _component,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (a forked child replaces it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def uvicorn_level(level: str | None) -> str:
    """The level of uvicorn's own records at ftrl-ps's ``level``: from ``warning`` up
    (its start-up chatter stays out of an ``info`` log), everything at ``debug``.

    >>> [uvicorn_level(x) for x in ("debug", "info", "warning", "error", "critical")]
    ['debug', 'warning', 'warning', 'error', 'error']
    """
    name = (level or "info").lower()
    return {"debug": "debug", "error": "error", "critical": "error"}.get(name, "warning")


def setup_logging(
    name: str | None = None, fmt: str | None = None, level: str | None = None
) -> None:
    """Log ``ftrl_ps.*`` and uvicorn records (and, in json, Python warnings) to
    stderr, one line each.

    ``name``: this process's component; ``fmt``: ``text`` or ``json`` (None:
    ``$FTRL_PS_LOG_FORMAT``, else text); ``level``: the lowest level shown for
    ftrl-ps's own records (default ``info``). uvicorn's records show from
    ``warning`` up (``debug`` shows all); its access log stays off.
    Idempotent: a second call replaces the first's handler.
    """
    if name is not None:
        set_component(name)
    chosen = (fmt or os.environ.get(FORMAT_ENV) or "text").strip().lower()
    if chosen not in FORMATS:
        from ftrl_ps.errors import ConfigError

        raise ConfigError(f"log format must be one of {', '.join(FORMATS)}, got {chosen!r}")
    level_name = (level or "info").lower()
    if level_name not in LEVELS:
        from ftrl_ps.errors import ConfigError

        raise ConfigError(f"log level must be one of {', '.join(LEVELS)}, got {level_name!r}")
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter() if chosen == "json" else TextFormatter())
    handler.set_name(_HANDLER)
    numeric = getattr(logging, level_name.upper())
    for logger_name, lvl in (("ftrl_ps", numeric),
                             ("uvicorn", getattr(logging, uvicorn_level(level_name).upper()))):
        logger = logging.getLogger(logger_name)
        for old in [h for h in logger.handlers if h.get_name() == _HANDLER]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(lvl)
        logger.propagate = False
    for sub in ("uvicorn.error", "uvicorn.access"):
        sub_logger = logging.getLogger(sub)
        sub_logger.handlers.clear()
        sub_logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = level_name != "debug"
    # Python warnings: in json as objects too; in text they stay as Python prints them
    warned = logging.getLogger("py.warnings")
    for old in [h for h in warned.handlers if h.get_name() == _HANDLER]:
        warned.removeHandler(old)
    logging.captureWarnings(chosen == "json")
    if chosen == "json":
        warned.addHandler(handler)
        warned.propagate = False
    os.environ[FORMAT_ENV] = chosen  # children (forked or exec'd) log alike


def _configured(logger: logging.Logger) -> bool:
    """Whether records of ``logger`` reach the handler of :func:`setup_logging`."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(h.get_name() == _HANDLER for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def say(logger: logging.Logger, message: str, *, level: int = logging.INFO,
        prefix: str = "", exc_info: bool = False) -> None:
    """Write a line that people and scripts read as it is, through ``logger``.

    Text format: ``prefix + message`` alone (no time, level or component; the
    traceback of the exception being handled follows with ``exc_info``). JSON
    format: one object like every log line, ``message`` without the prefix.
    Written whatever ``--log-level`` says (these lines were always printed,
    and scripts read some of them). Before :func:`setup_logging` (a library
    caller, a test) it is printed on stderr as in the text format.
    """
    if _configured(logger):
        record = logger.makeRecord(logger.name, level, "(say)", 0, "%s", (message,),
                                   sys.exc_info() if exc_info else None,
                                   extra={_PLAIN: prefix})
        logger.handle(record)  # not logger.log: no level threshold
        return
    text = prefix + message
    if exc_info:
        text += "\n" + traceback.format_exc().rstrip()
    print(text, file=sys.stderr, flush=True)
