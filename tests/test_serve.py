"""Serving on a socket handed over by a launcher (``ftrl-ps server --fd``)."""

from __future__ import annotations

import subprocess
import sys

import httpx

from ftrl_ps.server.serve import bind_socket, socket_url
from tests.conftest import REPO, run_cli


def test_server_on_inherited_socket_answers_requests_sent_before_it_started() -> None:
    sock = bind_socket("127.0.0.1", 0)
    url = socket_url(sock)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftrl_ps", "server", "--bits", "8", "--fd", str(sock.fileno())],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(sock.fileno(),),
    )
    sock.close()
    try:
        # sent at once: the connection waits in the backlog until uvicorn serves
        answer = httpx.get(f"{url}/health", timeout=60, trust_env=False)
        assert answer.status_code == 200 and answer.json()["status"] == "ok"
        assert proc.stdout is not None
        assert proc.stdout.readline().decode().strip() == f"listening on {url}"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_bad_fd_is_a_clear_error() -> None:
    res = run_cli("server", "--fd", "987")
    assert res.returncode == 2
    assert "--fd 987" in res.stderr and "Traceback" not in res.stderr


def test_sigterm_releases_a_blocked_clock_wait_at_once() -> None:
    """Stopping a server must not wait for SSP clock waits to time out."""
    import threading
    import time

    from ftrl_ps.cluster.spawn import spawn_server
    from ftrl_ps.ps.client import PSClient
    from tests._servers import shard_options

    server = spawn_server(shard_options(["--bits", "8", "--staleness", "0", "--num-workers", "2",
                                        "--clock-wait-timeout", "60"]))
    try:
        fast = PSClient(server.url)
        fast.register(0, 2)
        blocked = threading.Thread(target=lambda: _swallow(fast.clock), daemon=True)
        blocked.start()  # waits for worker 1, which never comes
        time.sleep(0.5)
        assert blocked.is_alive()
        t0 = time.monotonic()
        server.handle.terminate()
        server.handle.wait(timeout=20)
        assert time.monotonic() - t0 < 10  # the clock wait alone would hold it 60 s
    finally:
        server.stop()


def _swallow(fn) -> None:  # type: ignore[no-untyped-def]
    try:
        fn()
    except Exception:  # the server goes away under the blocked request
        pass
