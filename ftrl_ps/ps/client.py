"""The worker-side client of the parameter-server cluster, shaped like ps-lite.

Three verbs carry the work: :meth:`PSClient.pull`, :meth:`PSClient.push` and
:meth:`PSClient.clock`. As in ps-lite, **keys must be unique and sorted in
increasing order** (checked) and lie in ``[0, 2**bits + 1)``. With several
shards each call is split by the shards' key ranges, the parts are sent
concurrently, and the answers are put back together in key order.

Reliability: every request is retried on transport errors (connection
refused/reset, timeouts) with exponential backoff, then raised as
:class:`~ftrl_ps.errors.TransportError`. A push carries the worker id and a
per-worker sequence number, so a retried push is applied exactly once; a
clock tick carries its target clock, so a retried tick counts once. Error
answers become the matching :mod:`ftrl_ps.errors` class.

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

import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
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
from ftrl_ps.ps.shards import ShardConnections
from ftrl_ps.ps.validate import check_keys, check_merge, check_values

__all__ = ["PSClient"]

T = TypeVar("T")
Arrays = tuple[np.ndarray, np.ndarray]
Arrays3 = tuple[np.ndarray, np.ndarray, np.ndarray]


class PSClient:
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
        Retries after a transport error (backoff 0.05 s, doubling, max 2 s).
    wire_format : {"binary", "json"}, default "binary"
        Body encoding of pull/push (JSON is for debugging and comparison).
    http_clients : list of httpx.Client, optional
        Ready clients, one per shard (e.g. ``starlette.testclient.TestClient``
        for in-process tests); by default one keep-alive ``httpx.Client`` each.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        wire_format: str = "binary",
        http_clients: Sequence[httpx.Client] | None = None,
    ) -> None:
        if wire_format not in ("binary", "json"):
            raise ConfigError(f"wire_format must be 'binary' or 'json', got {wire_format!r}")
        self._net = ShardConnections(
            [urls] if isinstance(urls, str) else list(urls),
            token=token, timeout=timeout, retries=retries, http_clients=http_clients,
        )
        self.urls = self._net.urls
        self.timeout = self._net.timeout
        self.retries = self._net.retries
        self.wire_format = wire_format
        self._lock = threading.Lock()
        self.worker_id: int | None = None
        self.worker_index: int | None = None
        self.worker_clock = 0
        self._seq = 0
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
        if self.layout.num_shards != len(self.urls):
            raise LayoutMismatchError(
                f"the servers form {self.layout.num_shards} shard(s) but {len(self.urls)} "
                "URL(s) were given"
            )
        for i, st in enumerate(statuses):
            if st["shard"]["index"] != i:
                raise ConfigError(
                    f"{self.urls[i]} is shard {st['shard']['index']}, expected shard {i}: "
                    "list the URLs in shard order"
                )
            Layout.from_dict(st["layout"]).check_same(self.layout, what=f"shard {i}")
            if st["dtype"] != first["dtype"]:
                raise LayoutMismatchError(
                    f"shard {i} stores {st['dtype']}, shard 0 stores {first['dtype']}"
                )

    # --- parameters ----------------------------------------------------------------
    def pull(self, keys: Any) -> Arrays:
        """``(n, z)`` at ``keys`` (sorted, unique, in ``[0, 2**bits + 1)``): fresh
        writable arrays of the servers' dtype."""
        n, z, _ = self._pull(keys, versions=False)
        return n, z

    def pull_versioned(self, keys: Any) -> Arrays3:
        """``(n, z, versions)``: versions (uint32) for a ``compose`` push (ps.merge)."""
        return self._pull(keys, versions=True)

    def _pull(self, keys: Any, versions: bool) -> Arrays3:
        k = self._check_keys(keys)
        parts = self._by_shard(k, self.layout.split_keys(k), lambda i, ks: self._pull_shard(
            i, ks, versions)) or [(np.zeros(0, self.dtype),) * 2 + (np.zeros(0, np.uint32),)]
        n, z, v = (np.concatenate([p[i] for p in parts]) for i in range(3))
        return n, z, v

    def push(self, keys: Any, delta_n: Any, delta_z: Any, merge: Any = None) -> int:
        """Add ``delta_n`` (>= 0) and ``delta_z`` at ``keys`` (sorted, unique);
        ``merge``: ``(versions pulled, rows, rho)`` for the ``compose`` rule.

        Validated here before anything is sent, so a bad push changes no
        shard. Returns the push's sequence number (0 before :meth:`register`:
        anonymous pushes are only retried when the connection could not be
        made, since they cannot be deduplicated).
        """
        k = self._check_keys(keys)
        dn = check_values(delta_n, "delta_n", k.size, self.dtype, non_negative=True)
        dz = check_values(delta_z, "delta_z", k.size, self.dtype)
        mg = None if merge is None else check_merge(merge, k.size, self.dtype)
        with self._lock:
            worker_id = self.worker_id
            if worker_id is not None:
                self._seq += 1
            seq = self._seq if worker_id is not None else 0
        splits = self.layout.split_keys(k)

        def send(shard: int) -> None:
            a, b = splits[shard], splits[shard + 1]
            part = None if mg is None else tuple(m[a:b] for m in mg)
            if self.wire_format == "json":
                obj: dict[str, Any] = wire.to_json(wire.PUSH, k[a:b], (dn[a:b], dz[a:b]), part)
                if worker_id is not None:
                    obj.update(worker_id=worker_id, seq=seq)
                self._net.post_json(shard, "/v1/push", obj, idempotent=worker_id is not None)
            else:
                body = wire.encode_push(k[a:b], dn[a:b], dz[a:b], worker_id=worker_id,
                                        seq=seq, dtype=self.dtype, merge=part)
                self._net.request(shard, "POST", "/v1/push", content=body,
                              headers={"Content-Type": wire.BINARY_MEDIA_TYPE},
                              idempotent=worker_id is not None)

        shards = [i for i in range(self.layout.num_shards) if splits[i + 1] > splits[i]]
        self._net.each(send, shards)
        return seq

    def pull_groups(self, group_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All keys of the given parameter groups (sorted, unique group ids) with
        their ``n`` and ``z``: ``(keys uint32, n, z)``."""
        g = self._check_ids(group_ids, self.layout.num_groups, "group ids")
        parts = self._by_shard(g, self.layout.split_groups(g), self._pull_groups_shard)
        return self._concat3(parts)

    def dump_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every touched key of every shard with ``n`` and ``z``, in key order."""
        def one(shard: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            resp = self._net.request(shard, "GET", "/v1/state",
                                 headers={"Accept": wire.BINARY_MEDIA_TYPE})
            msg = wire.decode(resp.content, wire.ENTRIES)
            assert msg.keys is not None and msg.values is not None
            return msg.keys.copy(), msg.values[0].copy(), msg.values[1].copy()

        return self._concat3(self._net.each(one, range(self.layout.num_shards)))

    # --- workers and the SSP clock (shard 0) ------------------------------------------
    def register(
        self, worker_index: int | None, num_workers: int, layout: Layout | None = None
    ) -> int:
        """Register this worker with shard 0 and return its worker id.

        ``worker_index=None`` lets the server assign the index (then in
        :attr:`worker_index`).

        ``layout`` (default: the servers' layout) is checked by the server;
        a mismatch raises :class:`~ftrl_ps.errors.LayoutMismatchError`.
        """
        lay = layout if layout is not None else self.layout
        answer = self._net.post_json(0, "/v1/workers", {
            "worker_index": worker_index, "num_workers": num_workers,
            "layout": lay.to_dict(), "instance": self._instance,
        }, idempotent=True).json()
        with self._lock:
            self.worker_id = int(answer["worker_id"])
            self.worker_index = int(answer.get("worker_index", worker_index))
            self.worker_clock = int(answer["clock"])
            self._seq = 0
        return self.worker_id

    def clock(self, stats: dict[str, float] | None = None, timeout: float | None = None) -> int:
        """Tick this worker's clock, then block until the SSP bound lets it go on.

        ``stats`` (numbers, e.g. rows, logloss_sum, rows_per_s) show up in
        ``/v1/status`` (non-finite values are left out). Raises
        :class:`~ftrl_ps.errors.ClockTimeoutError` if ``timeout`` seconds pass
        first (default: wait as long as it takes). Returns the new clock.
        """
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
            answer = self._net.post_json(0, f"/v1/workers/{wid}/wait", wait_body, idempotent=True,
                                     timeout=self._wait_timeout()).json()
        return target

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

    def stop_heartbeat(self) -> None:
        """Stop the heartbeat thread (if running)."""
        thread, self._hb_thread = self._hb_thread, None
        if thread is not None:
            self._hb_stop.set()
            thread.join()

    def finish(self) -> None:
        """Tell shard 0 this worker is done (it stops holding back the others)."""
        wid = self._require_worker()
        self.stop_heartbeat()
        self._net.post_json(0, f"/v1/workers/{wid}/finish", {}, idempotent=True)

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

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- per-shard requests ---------------------------------------------------------
    def _pull_shard(self, shard: int, keys: np.ndarray, versions: bool = False) -> Arrays3:
        if self.wire_format == "json":
            obj: dict[str, Any] = {"keys": keys.tolist(), "versions": versions}
            if self.worker_id is not None:
                obj["worker_id"] = self.worker_id
            msg = wire.decode_json(self._net.post_json(shard, "/v1/pull", obj).content, wire.VALUES)
        else:
            body = wire.encode_keys(keys, worker_id=self.worker_id,
                                    merge=() if versions else None)
            resp = self._net.request(shard, "POST", "/v1/pull", content=body, headers={
                "Content-Type": wire.BINARY_MEDIA_TYPE, "Accept": wire.BINARY_MEDIA_TYPE})
            msg = wire.decode(resp.content, wire.VALUES)
        assert msg.values is not None
        n, z = msg.values
        if n.size != keys.size:
            raise ProtocolError(f"shard {shard} returned {n.size} values for {keys.size} keys")
        v = msg.merge[0] if versions and msg.merge else np.zeros(0, np.uint32)
        if versions and v.size != keys.size:
            raise ProtocolError(f"shard {shard} did not return the keys' versions")
        return n.astype(self.dtype, copy=True), z.astype(self.dtype, copy=True), v.astype(np.uint32)

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

