"""Bounded waits at start-up: until every server answers and every input file exists.

Containers start in any order: Kubernetes has no start ordering at all, and
podman-compose does not enforce compose's ``depends_on`` conditions. So a
worker or an export that starts before the servers or before the data waits
for them here, before it creates its :class:`~ftrl_ps.ps.client.PSClient`
(whose own retries only bridge short hiccups), for at most ``timeout``
seconds, saying what it is waiting for (log lines on stderr). Nothing here retries a
request that reached a server: these are health probes and file checks.

>>> unmet([], [__file__])
[]
>>> unmet([], ["/no/such/file.svm"])
['file /no/such/file.svm']
>>> wait_until_ready([], ["/no/such/file.svm"], timeout=0, who="worker", out=None)
Traceback (most recent call last):
...
ftrl_ps.errors.StartupTimeoutError: worker: still missing after 0 s: file /no/such/file.svm
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ftrl_ps.errors import StartupTimeoutError
from ftrl_ps.learn.logs import say

__all__ = ["FIRST_ANSWER_TIMEOUT", "REMIND_EVERY", "health_url", "log_line", "servers_answer",
           "unmet", "wait_to_start", "wait_until_ready"]

log = logging.getLogger("ftrl_ps.waiting")

#: seconds between two reminders while nothing changes
REMIND_EVERY = 30.0


def health_url(url: str) -> str:
    """The health probe of a server base URL.

    >>> health_url("http://server-0:7000/")
    'http://server-0:7000/health'
    """
    return url.rstrip("/") + "/health"


def _probe(url: str, timeout: float) -> str | None:
    """None if ``GET url`` answers 200, else why not (one short phrase)."""
    import httpx  # here: a shard imports this module for its paths only (~0.15 s saved)

    try:
        # trust_env=False: cluster traffic never goes through an HTTP(S)_PROXY
        resp = httpx.get(url, timeout=timeout, trust_env=False)
    except httpx.ConnectError as exc:
        return f"not reachable: {exc}" if str(exc) else "not reachable"
    except httpx.TimeoutException:
        return f"no answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if resp.status_code == 200 else f"HTTP {resp.status_code}"


def _missing_input(spec: str) -> str | None:
    """What the input ``spec`` lacks: None when it is there (a directory or glob: when
    it has a file to read; stdin ``-`` and an fsspec URL, opened when read, always),
    else ``file PATH``, ``a file in the directory PATH`` or ``a file matching PATTERN``."""
    from ftrl_ps.data.sources import has_files, is_url

    if spec == "-" or is_url(spec):
        return None
    if os.path.isdir(spec):
        return None if has_files(spec) else f"a file in the directory {spec}"
    if set("*?[") & set(spec) and not os.path.exists(spec):
        return None if has_files(spec) else f"a file matching {spec}"
    return None if os.path.exists(spec) else f"file {spec}"


def unmet(urls: Sequence[str], paths: Sequence[str], *, probe_timeout: float = 2.0,
          inputs: Sequence[str] = ()) -> list[str]:
    """What is not there yet: ``URL/health (why)`` for every server that does not
    answer 200, ``file PATH`` for every path that does not exist (``-`` = stdin
    counts as present), and for every training input in ``inputs`` the same, or for
    a directory or glob with no file yet ``a file in the directory PATH`` / ``a
    file matching PATTERN``."""
    out = []
    for url in urls:
        why = _probe(health_url(url), probe_timeout)
        if why is not None:
            out.append(f"{health_url(url)} ({why})")
    out += [f"file {p}" for p in paths if p and p != "-" and not os.path.exists(p)]
    out += [what for p in inputs if (what := _missing_input(p)) is not None]
    return out


#: seconds a server may take to answer its first probe: one that is starting on a
#: socket bound before it (the local cluster's) answers once it serves
FIRST_ANSWER_TIMEOUT = 30.0


def servers_answer(urls: Sequence[str], who: str) -> None:
    """``--start-timeout 0``: fail at once if a server refuses its first connection
    or is not a server of ours (a wrong URL), instead of retrying it for
    ``retry_seconds``, the window that rides out a shard restart *during* a run."""
    missing = unmet(urls, [], probe_timeout=FIRST_ANSWER_TIMEOUT)
    if missing:
        raise StartupTimeoutError(
            f"{who}: no server answers at {'; '.join(missing)}; check --server, or give "
            "--start-timeout SECONDS to wait for servers that start later")


def wait_to_start(urls: Sequence[str], inputs: Sequence[str], *, timeout: float,
                  who: str) -> None:
    """The start of a worker or an export: with ``timeout`` > 0 wait up to that long
    for the servers and the ``inputs`` (:func:`wait_until_ready`); with 0 fail at once
    if a server does not answer (:func:`servers_answer`; the caller's options checked
    the inputs)."""
    if timeout > 0:
        wait_until_ready(urls, [], inputs=inputs, timeout=timeout, who=who)
    else:
        servers_answer(urls, who)


def log_line(line: str) -> None:
    """The default ``out`` of :func:`wait_until_ready`: an INFO line of the
    ``ftrl_ps.waiting`` logger, the bare line in the text format
    (:func:`ftrl_ps.learn.logs.say`)."""
    say(log, line)


def _write(out: TextIO | Callable[[str], None] | None, line: str) -> None:
    if out is None:
        return
    if callable(out):
        out(line)
    else:
        print(line, file=out, flush=True)


def wait_until_ready(
    urls: Sequence[str],
    paths: Sequence[str],
    *,
    timeout: float,
    who: str,
    interval: float = 1.0,
    out: TextIO | Callable[[str], None] | None = log_line,
    inputs: Sequence[str] = (),
) -> float:
    """Wait until every server in ``urls`` answers ``GET /health``, every file in
    ``paths`` exists and every training input in ``inputs`` has a file to read (see
    :func:`unmet`); the seconds waited.

    ``who`` names the waiting process in the messages written to ``out`` (a
    stream, or a function given each line; default :func:`log_line`; None:
    silent): one line whenever the list of what is missing changes, and a
    reminder every :data:`REMIND_EVERY` seconds. ``timeout`` 0 checks once.

    Raises
    ------
    StartupTimeoutError
        ``timeout`` seconds passed and something is still missing (all of it
        is named).
    """
    start = time.monotonic()
    deadline = start + max(0.0, timeout)
    last, said_at = "", start
    while True:
        todo = unmet(urls, paths, probe_timeout=min(2.0, max(0.2, interval * 2)), inputs=inputs)
        now = time.monotonic()
        if not todo:
            if last:
                _write(out, f"{who}: ready after {now - start:.1f} s")
            return now - start
        if now >= deadline:
            raise StartupTimeoutError(
                f"{who}: still missing after {timeout:g} s: {'; '.join(todo)}"
            )
        text = "; ".join(todo)
        if text != last or now - said_at >= REMIND_EVERY:
            _write(out, f"{who}: waiting (up to {timeout:g} s) for {text}")
            last, said_at = text, now
        time.sleep(min(interval, max(0.0, deadline - now)))

