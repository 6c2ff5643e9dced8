"""The worker-side client of the parameter-server cluster, shaped like ps-lite.

Three verbs carry the work: :meth:`PSClient.pull`, :meth:`PSClient.push` and
:meth:`PSClient.clock`. As in ps-lite, **keys must be unique and sorted in
increasing order** (checked) and lie in ``[0, 2**bits + 1)``. With several
shards each call is split by the shards' key ranges, the parts are sent
concurrently, and the answers are put back together in key order.

Reliability (docs/durability.md): every request is retried on transport
errors with backoff for ``retry_seconds`` (a shard restart is ridden out), then
raised as :class:`~ftrl_ps.errors.TransportError`. A registered worker's pushes
are journaled and applied exactly once on every shard, replayed to a shard that
restarted, never silently dropped (:mod:`ftrl_ps.ps.pushing`). A clock tick
carries its target clock, so a retried tick counts once. Error answers become
the matching :mod:`ftrl_ps.errors` class.

Example (needs a running server)::

    with PSClient(["http://127.0.0.1:7001", "http://127.0.0.1:7002"]) as ps:
        ps.register(worker_index=0, num_workers=2)
        ps.start_heartbeat()
        n, z = ps.pull(keys)                  # keys: sorted unique
        ps.push(keys, delta_n, delta_z)
        ps.clock(stats={"rows": 1000.0})      # tick, block until SSP allows
        ps.finish()
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np

from ftrl_ps.errors import (
    ClockTimeoutError,
    ConfigError,
    FTRLPSError,
    LayoutMismatchError,
    ProtocolError,
    UnknownWorkerError,
    WorkerStateError,
)
from ftrl_ps.ps import wire
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.overview import held_by
from ftrl_ps.ps.pulling import Pulls
from ftrl_ps.ps.pushing import StreamingPushes
from ftrl_ps.ps.replay import PushStream
from ftrl_ps.ps.shard_settings import check_shards_agree
from ftrl_ps.ps.shards import ShardConnections
from ftrl_ps.ps.validate import check_keys, check_merge, check_values

__all__ = ["PSClient"]

log = logging.getLogger(__name__)
SAY_HELD_EVERY = 30.0  #: seconds between two "waits for the others" lines of one client

T = TypeVar("T")
Arrays = tuple[np.ndarray, np.ndarray]


class PSClient(StreamingPushes, Pulls):
    """Client of an M-shard parameter-server cluster.

    Parameters
    ----------
    urls : str or list of str
        Base URL of every shard, in shard order (``urls[i]`` is shard *i*).
        The client reads each shard's ``/v1/status`` and checks that they
        agree on the layout and dtype.
    token : str, optional
        Bearer token for state-changing requests.
    timeout : float, default 30
        Seconds per HTTP request (clock requests get the server's wait on top).
    retries : int, default 3
        Retries after a transport error at least (backoff 0.05 s, doubling, max 2 s).
    retry_seconds : float, default 120
        ... and for at least this long, so that a shard restart is ridden out.
    state_dir : str, optional
        Directory for the push journal (``worker-<index>.journal``), so that a
        restarted worker replays and resumes; None keeps it in memory.
    wire_format : {"binary", "json"}, default "binary"
        Body encoding of pull/push (JSON is for debugging and comparison).
    http_clients : list of httpx.Client, optional
        Ready clients, one per shard (e.g. ``starlette.testclient.TestClient``
        for in-process tests); by default one keep-alive ``httpx.Client`` each.
    commit_on_shard0 : bool, default False
        Send each push (and a replay) to shard 0 only once every other shard
        applied its part, so that a push shard 0 holds is held everywhere. Work
        handed out on demand needs it: shard 0 hands a dead worker's input on
        after the last push *it* applied (docs/durability.md, section 4). It
        costs one more request latency per push with several shards.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        retry_seconds: float = 120.0,
        state_dir: str | os.PathLike[str] | None = None,
        wire_format: str = "binary",
        http_clients: Sequence[httpx.Client] | None = None,
        commit_on_shard0: bool = False,
    ) -> None:
        if wire_format not in ("binary", "json"):
            raise ConfigError(f"wire_format must be 'binary' or 'json', got {wire_format!r}")
        self._net = ShardConnections(
            [urls] if isinstance(urls, str) else list(urls),
            token=token, timeout=timeout, retries=retries, retry_seconds=retry_seconds,
            http_clients=http_clients,
        )
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.urls = self._net.urls
        self.timeout = self._net.timeout
        self.retries = self._net.retries
        self.wire_format = wire_format
        self.commit_on_shard0 = commit_on_shard0
        self._fences_applied: set[tuple[int, int]] = set()
        self._said_held = -SAY_HELD_EVERY  # time.monotonic() of the last such line
        self._lock = threading.Lock()
        self.worker_id: int | None = None
        self.worker_index: int | None = None
        self.worker_clock = 0
        self.stream: PushStream | None = None
        self._num_workers = 0
        self._layout_sent: Layout | None = None
        self._instance = uuid.uuid4().hex
        self._hb_thread: threading.Thread | None = None
        self._hb_stop = threading.Event()
        self.heartbeat_error: FTRLPSError | None = None
        try:
            self._learn_layout()
        except BaseException:
            self.close()
            raise

    # --- set-up -------------------------------------------------------------------
    def _learn_layout(self) -> None:
        statuses = self._net.each(lambda i: self.status(i), range(len(self.urls)))
        first = statuses[0]
        self.layout = Layout.from_dict(first["layout"])
        self.dtype = np.dtype(first["dtype"])
        self.server_settings: dict[str, Any] = first.get("settings", {})
        self.runs = [st["shard"].get("run") for st in statuses]  # run ids (ps.journal)
        limits = [st.get("settings", {}).get("max_body_mb") for st in statuses]
        #: the smallest request body the servers take (None: they do not say)
        self.max_body_bytes: int | None = (
            int(min(limits) * (1 << 20)) if limits and None not in limits else None)
        #: what the servers own of the model: bits, dtype, params (hyper-parameters)
        self.server_model: dict[str, Any] | None = first.get("model")
        if self.layout.num_shards != len(self.urls):
            raise LayoutMismatchError(f"the servers form {self.layout.num_shards} shard(s) "
                                      f"but {len(self.urls)} URL(s) were given")
        for i, st in enumerate(statuses):
            if st["shard"]["index"] != i:
                raise ConfigError(f"{self.urls[i]} is shard {st['shard']['index']}, expected "
                                  f"shard {i}: list the URLs in shard order")
            self.layout.check_same(Layout.from_dict(st["layout"]), what=f"shard {i}",
                                   against="shard 0")
            if st["dtype"] != first["dtype"]:
                raise LayoutMismatchError(f"shard {i} stores {st['dtype']}, shard 0 "
                                          f"stores {first['dtype']}")
        check_shards_agree([st.get("settings", {}) for st in statuses])

    # --- parameters ----------------------------------------------------------------
    def push(self, keys: Any, delta_n: Any, delta_z: Any, merge: Any = None, *,
             position: int = 0, loss_sum: float = 0.0) -> int:
        """Add ``delta_n`` (>= 0) and ``delta_z`` at ``keys`` (sorted, unique).

        ``merge``: ``(versions pulled, rows, rho)`` for the ``compose`` rule
        (ps.merge). Values are validated here before anything is sent, so a bad
        push changes no shard. After :meth:`register` the push is journaled and
        applied exactly once (``position``: input rows trained up to this push,
        ``loss_sum``: their summed logloss, kept for a restarted worker); its
        sequence number is returned. Before it, the push is anonymous (0 is
        returned): only retried when the connection could not be made.
        """
        k = self._check_keys(keys)
        dn = check_values(delta_n, "delta_n", k.size, self.dtype, non_negative=True, delta=True)
        dz = check_values(delta_z, "delta_z", k.size, self.dtype, delta=True)
        mg = None if merge is None else check_merge(merge, k.size, self.dtype)
        splits = self.layout.split_keys(k)
        shards = [i for i in range(self.layout.num_shards) if splits[i + 1] > splits[i]]
        stream = self.stream
        if stream is None:
            def send(shard: int) -> None:
                a, b = splits[shard], splits[shard + 1]
                part = None if mg is None else tuple(m[a:b] for m in mg)
                self._post_push(shard, k[a:b], dn[a:b], dz[a:b], None, part)

            self._net.each(send, shards)
            return 0
        with self._lock:
            entry = stream.record(k, dn, dz, splits, position, loss_sum)
            entry.merge = mg  # sent with the entry (not kept in the journal file)
        try:
            self._in_commit_order(lambda s: self._deliver(s, entry),
                                  [s for s in range(self.layout.num_shards) if entry.parts[s]])
        except UnknownWorkerError:
            self._reregister()  # shard 0 forgot this epoch; registering replays the rest
        stream.journal.spill(entry)  # sent: a replay reads it back from the journal file
        stream.release()
        return entry.seq

    def pull_groups(self, group_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All keys of the given parameter groups (sorted, unique group ids) with
        their ``n`` and ``z``: ``(keys uint32, n, z)``."""
        g = self._check_ids(group_ids, self.layout.num_groups, "group ids")
        parts = self._by_shard(g, self.layout.split_groups(g), self._pull_groups_shard)
        return self._concat3(parts)

    def dump_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every touched key of every shard with ``n`` and ``z``, in key order
        (each shard streams its state chunk by chunk; a cut answer is an error)."""
        def read(resp: httpx.Response) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            parts, ended = [], False
            for msg in wire.iter_messages(resp.iter_bytes(), wire.ENTRIES):
                assert msg.keys is not None and msg.values is not None
                if ended:
                    raise ProtocolError("the state answer goes on after its end marker")
                ended = msg.keys.size == 0
                parts.append((msg.keys.copy(), msg.values[0].astype(self.dtype),
                              msg.values[1].astype(self.dtype)))
            if not ended:
                raise ProtocolError("the state answer was cut short (no end marker)")
            return self._concat3(parts)

        return self._concat3(self._net.each(
            lambda shard: self._net.stream(shard, "GET", "/v1/state", read,
                                           headers={"Accept": wire.BINARY_MEDIA_TYPE}),
            range(self.layout.num_shards)))

    # --- workers and the SSP clock (shard 0) ------------------------------------------
    def clock(self, stats: dict[str, float] | None = None, timeout: float | None = None) -> int:
        """Tick this worker's clock, then block until the SSP bound lets it go on.

        ``stats`` (numbers, e.g. rows, logloss_sum, rows_per_s) show up in
        ``/v1/status`` (non-finite values are left out). Raises
        :class:`~ftrl_ps.errors.ClockTimeoutError` if ``timeout`` seconds pass
        first (default: wait as long as it takes). Returns the new clock.
        """
        try:
            return self._clock(stats, timeout)
        except UnknownWorkerError:  # shard 0 restarted and forgot this epoch
            if self.stream is None:
                raise
            self._reregister()
            return self._clock(stats, timeout)

    def _clock(self, stats: dict[str, float] | None, timeout: float | None) -> int:
        wid = self._require_worker()
        deadline = None if timeout is None else time.monotonic() + timeout
        target = self.worker_clock + 1
        body: dict[str, Any] = {"clock": target}
        if stats:
            clean = {str(k): float(v) for k, v in stats.items()}
            body["stats"] = {k: v for k, v in clean.items() if math.isfinite(v)}
        if deadline is not None:
            body["timeout"] = max(0.0, deadline - time.monotonic())
        answer = self._net.post_json(0, f"/v1/workers/{wid}/clock", body, idempotent=True,
                                 timeout=self._wait_timeout()).json()
        self.worker_clock = target
        self._wait_ready(wid, answer, deadline, timeout)
        return target

    def warm_done(self) -> None:
        """Tell shard 0 that this worker, training alone in the warm start, has its
        last warm push applied on every shard (:meth:`push` returned): the others
        may pull now, not only after this worker's tick. A shard 0 that forgot this
        epoch (it restarted) is not asked again: the tick ends the warm start too."""
        wid = self._require_worker()
        try:
            self._net.post_json(0, f"/v1/workers/{wid}/warm-done", {}, idempotent=True)
        except UnknownWorkerError:
            pass

    def wait_turn(self) -> bool:
        """Block, without ticking, until the SSP clock lets this worker go on: before
        its first pull, while the servers' warm start has one worker train alone
        (``warm_rounds``; the wait holds the worker alive). True if this worker
        is the one that trains alone."""
        wid = self._require_worker()
        answer = self._net.post_json(0, f"/v1/workers/{wid}/wait", {}, idempotent=True,
                                     timeout=self._wait_timeout()).json()
        return bool(self._wait_ready(wid, answer, None, None).get("alone", False))

    def _wait_ready(self, wid: int, answer: dict[str, Any], deadline: float | None,
                    timeout: float | None) -> dict[str, Any]:
        target = self.worker_clock
        while not answer["ready"]:
            wait_body: dict[str, Any] = {}
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ClockTimeoutError(
                        f"worker {wid} at clock {target} waited {timeout:g} s for the slowest "
                        f"worker (min clock {answer.get('min_clock')}, "
                        f"staleness {answer.get('staleness')})"
                    )
                wait_body["timeout"] = remaining
            if time.monotonic() - self._said_held >= SAY_HELD_EVERY:  # (a server wait passed)
                self._said_held = time.monotonic()
                log.info("worker %s at clock %d waits for %s (min clock %s, staleness %s; a "
                         "worker silent for --worker-timeout is declared dead)", self.worker_index,
                         target, held_by(answer.get("slowest")), answer["min_clock"], answer.get(
                             "staleness"))
            answer = self._net.post_json(0, f"/v1/workers/{wid}/wait", wait_body, idempotent=True,
                                     timeout=self._wait_timeout()).json()
        return answer

    def heartbeat(self) -> None:
        """Tell shard 0 this worker is alive."""
        wid = self._require_worker()
        self._net.post_json(0, f"/v1/workers/{wid}/heartbeat", {}, idempotent=True)

    def start_heartbeat(self, interval: float | None = None) -> None:
        """Send :meth:`heartbeat` every ``interval`` seconds from a daemon thread
        (default: a third of the server's worker timeout). Stops on its own if
        the server says the worker is unknown, dead or finished (the error is
        kept in :attr:`heartbeat_error`)."""
        self._require_worker()
        if self._hb_thread is not None:
            return
        period = interval if interval is not None else max(
            0.05, float(self.server_settings.get("worker_timeout", 30.0)) / 3
        )
        self._hb_stop.clear()

        def loop() -> None:
            while not self._hb_stop.wait(period):
                try:
                    self.heartbeat()
                except (UnknownWorkerError, WorkerStateError) as exc:
                    self.heartbeat_error = exc
                    return
                except FTRLPSError as exc:  # transient: keep trying
                    self.heartbeat_error = exc

        self._hb_thread = threading.Thread(target=loop, name="ps-heartbeat", daemon=True)
        self._hb_thread.start()

    def stop_heartbeat(self, timeout: float | None = None) -> None:
        """Stop the heartbeat thread; wait at most ``timeout`` s for one in progress."""
        thread, self._hb_thread = self._hb_thread, None
        if thread is not None:
            self._hb_stop.set()
            thread.join(timeout)

    def finish(self, stats: dict[str, Any] | None = None) -> None:
        """Tell shard 0 this worker is done (it stops holding back the others);
        ``stats``: its last progress, as a clock tick would carry it.

        First every other shard persists this worker's pushes
        (:meth:`make_durable`), then shard 0 answers once one checkpoint says
        "finished" and holds them: once this returns, no shard restart can lose
        what the worker did.
        """
        self._require_worker()
        for attempt in range(3):
            try:
                self.heartbeat()  # shard 0 still knows this epoch (else: register again)
                self.make_durable(range(1, self.layout.num_shards))
                self.stop_heartbeat()
                self._post_finish(stats)
                self.finished = True
                return
            except UnknownWorkerError:  # shard 0 restarted and forgot this epoch
                if attempt == 2:
                    raise
                self._reregister()  # claims again and replays what the shards lack

    def streams(self, shard: int) -> list[dict[str, Any]]:
        """The stream records of one shard (``GET /v1/streams``)."""
        result: list[dict[str, Any]] = self._net.request(shard, "GET", "/v1/streams").json()
        return result

    def status(self, shard: int = 0) -> dict[str, Any]:
        """The JSON ``/v1/status`` of one shard (shard 0 has the clock)."""
        result: dict[str, Any] = self._net.request(shard, "GET", "/v1/status").json()
        return result

    def close(self) -> None:
        """Stop the heartbeat and close connections (the client is unusable after)."""
        self.stop_heartbeat()
        self._net.close()

    def __enter__(self) -> PSClient:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is not None and not self.finished:  # Ctrl-C, SIGTERM, an error
            self.abort()  # nothing retries for retry_seconds now (a heartbeat neither)
            self.leave()
        self.close()

    # --- per-shard requests ---------------------------------------------------------
    def _pull_groups_shard(self, shard: int, groups: np.ndarray) -> tuple[np.ndarray, ...]:
        if self.wire_format == "json":
            resp = self._net.post_json(shard, "/v1/pull-groups", {"groups": groups.tolist()})
            msg = wire.decode_json(resp.content, wire.ENTRIES)
        else:
            resp = self._net.request(shard, "POST", "/v1/pull-groups",
                                 content=wire.encode_groups(groups), headers={
                                     "Content-Type": wire.BINARY_MEDIA_TYPE,
                                     "Accept": wire.BINARY_MEDIA_TYPE})
            msg = wire.decode(resp.content, wire.ENTRIES)
        assert msg.keys is not None and msg.values is not None
        return (msg.keys.astype(np.uint32), msg.values[0].astype(self.dtype),
                msg.values[1].astype(self.dtype))

    # --- helpers --------------------------------------------------------------------
    def _by_shard(self, ids: np.ndarray, splits: np.ndarray,
                  fn: Callable[[int, np.ndarray], T]) -> list[T]:
        shards = [i for i in range(self.layout.num_shards) if splits[i + 1] > splits[i]]
        return self._net.each(lambda i: fn(i, ids[splits[i]:splits[i + 1]]), shards)

    def _concat3(self, parts: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not parts:
            empty = np.zeros(0, self.dtype)
            return np.zeros(0, np.uint32), empty, empty.copy()
        return (np.concatenate([p[0] for p in parts]).astype(np.uint32, copy=False),
                np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))

    def _check_keys(self, keys: Any) -> np.ndarray:
        return self._check_ids(keys, self.layout.num_keys, "keys")

    @staticmethod
    def _check_ids(ids: Any, limit: int, name: str) -> np.ndarray:
        return check_keys(ids, 0, limit, name=name, where="the valid range").astype(np.uint32)

    def _require_worker(self) -> int:
        if self.worker_id is None:
            raise WorkerStateError("call register() first")
        return self.worker_id

    def _wait_timeout(self) -> float:
        return self.timeout + float(self.server_settings.get("clock_wait_timeout", 5.0))
