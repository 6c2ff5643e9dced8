"""A private virtual LAN of Linux network namespaces, for multi-host tests.

One "switch" namespace holds a bridge; every host is its own namespace whose
``eth0`` is one end of a veth pair, the other end plugged into the bridge.
The veth pairs are created inside the switch namespace and only their host
end is moved out, so nothing is ever added to the root namespace and no
packet can leave the LAN. Names carry the test process's pid and a random
tag; :meth:`Lan.close` kills the processes started on the LAN and deletes
every namespace (which destroys the veths and the bridge), and namespaces
left behind by a killed earlier run (its pid gone) are removed on start.

>>> with Lan() as lan:                                    # doctest: +SKIP
...     a, b = lan.add_host("a", 10), lan.add_host("b", 11)
...     server = lan.spawn(a, ["python", "-m", "http.server", "-b", a.addr, "8000"], log)
...     lan.run(b, ["python", "-c", f"import urllib.request as u; u.urlopen('http://{a.addr}:8000')"])
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["SUBNET", "Host", "Lan", "unavailable"]

#: private /24 of the LAN (only inside the namespaces)
SUBNET = "10.213.7"
NAME_PREFIX = "ftps"
_OWNED = re.compile(rf"{NAME_PREFIX}-(\d+)-[0-9a-f]+-\w+")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _netns_list() -> list[str]:
    return [ln.split()[0] for ln in _ip("netns", "list", check=False).stdout.splitlines()
            if ln.strip()]


def _remove_stale() -> None:
    """Delete namespaces of earlier runs whose process no longer exists."""
    for name in _netns_list():
        m = _OWNED.fullmatch(name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _ip("netns", "del", name, check=False)


def unavailable() -> str | None:
    """Why the LAN cannot be built here (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "iproute2 'ip' command not found"
    probe = f"{NAME_PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-probe"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "br0", "type", "bridge")
        _ip("-n", probe, "link", "add", "vp0", "type", "veth", "peer", "name", "vp1")
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return f"cannot create network namespaces, bridges or veths: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    """One machine of the LAN."""

    name: str
    netns: str
    addr: str
    switch_port: str


@dataclass
class Lan:
    """A bridge in a switch namespace plus one namespace per host (see module doc)."""

    tag: str = field(default_factory=lambda: f"{os.getpid()}-{secrets.token_hex(3)}")
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)
    _namespaces: list[str] = field(default_factory=list)
    _files: list[IO[Any]] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{NAME_PREFIX}-{self.tag}-sw"

    def __enter__(self) -> Lan:
        _remove_stale()
        try:
            self._add_netns(self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str, octet: int) -> Host:
        """A host namespace with ``eth0`` at ``SUBNET.octet/24`` on the bridge."""
        netns = f"{NAME_PREFIX}-{self.tag}-{name}"
        port = f"p{len(self.hosts)}"  # interface names are local to the switch namespace
        self._add_netns(netns)
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", netns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        addr = f"{SUBNET}.{octet}"
        _ip("-n", netns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        host = Host(name, netns, addr, port)
        self.hosts[name] = host
        return host

    def argv(self, host: Host, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", host.netns, *argv]

    def spawn(self, host: Host, argv: Sequence[str], log: Path, *, stdout_log: Path | None = None,
              **kw: Any) -> subprocess.Popen[str]:
        """Start ``argv`` on ``host``, stderr to ``log`` (stdout to ``stdout_log`` or
        nowhere); the process is killed by :meth:`close`."""
        err = open(log, "w")  # noqa: SIM115 - closed by close()
        self._files.append(err)
        out: IO[Any] | int = subprocess.DEVNULL
        if stdout_log is not None:
            out = open(stdout_log, "w")  # noqa: SIM115 - closed by close()
            self._files.append(out)
        proc = subprocess.Popen(self.argv(host, argv), stdout=out, stderr=err, text=True, **kw)
        self.processes.append(proc)
        return proc

    def run(self, host: Host, argv: Sequence[str], timeout: float = 30,
            **kw: Any) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` to completion (output captured)."""
        return subprocess.run(self.argv(host, argv), capture_output=True, text=True,
                              timeout=timeout, **kw)

    def cut(self, host: Host) -> None:
        """Unplug ``host``: its switch port goes down (its own eth0 stays up)."""
        _ip("-n", self.switch, "link", "set", host.switch_port, "down")

    def close(self) -> None:
        """Kill the LAN's processes, then delete every namespace; safe to call twice."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
        for proc in self.processes:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck kill
                pass
        for f in self._files:
            f.close()
        for name in reversed(self._namespaces):
            _ip("netns", "del", name, check=False)
        self._namespaces.clear()
        self.processes.clear()
        self._files.clear()

    def leftovers(self) -> list[str]:
        """Namespaces of this LAN that still exist (should be none after close)."""
        return [n for n in _netns_list() if self.tag in n]
