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
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

__all__ = [
    "FORMATS",
    "FORMAT_ENV",
    "JsonFormatter",
    "LEVELS",
    "TextFormatter",
    "component",
    "set_component",
    "setup_logging",
    "uvicorn_level",
]

FORMATS = ("text", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
#: environment variable with the default log format (``text`` or ``json``)
FORMAT_ENV = "FTRL_PS_LOG_FORMAT"

_component = "ftrl-ps"


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
    """Log ``ftrl_ps.*`` and uvicorn records to stderr, one line each.

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
    handler.set_name("ftrl-ps")
    numeric = getattr(logging, level_name.upper())
    for logger_name, lvl in (("ftrl_ps", numeric),
                             ("uvicorn", getattr(logging, uvicorn_level(level_name).upper()))):
        logger = logging.getLogger(logger_name)
        for old in [h for h in logger.handlers if h.get_name() == "ftrl-ps"]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(lvl)
        logger.propagate = False
    for sub in ("uvicorn.error", "uvicorn.access"):
        sub_logger = logging.getLogger(sub)
        sub_logger.handlers.clear()
        sub_logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = level_name != "debug"
    os.environ[FORMAT_ENV] = chosen  # children (forked or exec'd) log alike
