"""The first process of a real node, run by :mod:`k8stest.node` inside ``unshare --mount``.

It joins the node's cgroups, makes the mounts of the plan (so that containerd, runc, the kubelet
and every container see the node's /sys, /dev, /var/lib/kubelet, …), moves into the node's own
network namespace (the node's address and the Service CIDR are local there), starts the service
proxy (:mod:`k8stest.nodeproxy`) and containerd, starts the kubelet when told to, and then
supervises all three: if one exits, it stops the others and exits, so the test side sees a dead
node at once instead of a timeout; on SIGTERM it stops them (kubelet first).

Usage: ``python -m k8stest.nodeinit <plan.json>`` (see ``start_real_node`` for the plan).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from k8stest import netns

MS_BIND = 0x1000
MS_REC = 0x4000

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def apply_mounts(mounts: list[dict[str, str]]) -> None:
    for m in mounts:
        kind, target = m["kind"], m["target"]
        if kind == "tmpfs":
            _mount("tmpfs", target, "tmpfs", 0, "mode=755")
        elif kind == "mkdir":
            os.makedirs(target, exist_ok=True)
        elif kind == "bind":
            _mount(m["source"], target, None, MS_BIND | MS_REC)
        elif kind == "overlay":
            _mount(
                "overlay",
                target,
                "overlay",
                0,
                f"lowerdir={m['lower']},upperdir={m['upper']},workdir={m['work']}",
            )
        else:
            raise ValueError(f"node plan: unknown mount kind {kind!r} for {target}")


def join_cgroups(cgroup: str, hierarchies: list[str]) -> None:
    """Move this process (and so all it starts) below the node's cgroup in every hierarchy."""
    for h in hierarchies:
        Path(h, cgroup.lstrip("/"), "node", "cgroup.procs").write_text(f"{os.getpid()}\n")


def _start(
    argv: list[str], log: str, env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, pass_fds=pass_fds
        )


def enter_node_network(network: dict[str, str]) -> int:
    """Move into a new network namespace and set it up; returns a descriptor of the old one.

    The node's address goes on ``lo`` (the kubelet registers it and listens on it), and the
    Service CIDR becomes a ``local`` route, so every ClusterIP is an address of the node that the
    service proxy can listen on.
    """
    host = os.open("/proc/self/ns/net", os.O_RDONLY)
    netns.unshare_network()
    for cmd in (
        ["ip", "link", "set", "lo", "up"],
        ["ip", "addr", "add", f"{network['node_ip']}/32", "dev", "lo"],
        ["ip", "route", "add", "local", network["service_cidr"], "dev", "lo"],
    ):
        subprocess.run(cmd, check=True, capture_output=True)
    return host


def start_proxy(proxy: dict[str, Any], host_netns: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the service proxy and wait until it serves (the kubelet needs it to reach the API)."""
    ready = Path(proxy["ready_file"])
    started = _start([*proxy["argv"], f"--host-netns-fd={host_netns}"], proxy["log"], env, (host_netns,))
    deadline = time.monotonic() + 30
    while not ready.exists():
        if started.poll() is not None:
            raise RuntimeError(f"the service proxy exited with {started.returncode} (log: {proxy['log']})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service proxy did not get ready in 30 s (log: {proxy['log']})")
        time.sleep(0.05)
    return started


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def run(plan: dict[str, Any]) -> int:
    join_cgroups(plan["cgroup"], plan["hierarchies"])
    apply_mounts(plan["mounts"])
    print("mounts done", flush=True)

    stopping = False
    restart_kubelet = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    def on_hup(signum: int, frame: object) -> None:
        nonlocal restart_kubelet
        restart_kubelet = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # SIGHUP restarts the kubelet (containers and containerd keep running), as a kubelet upgrade
    # or crash does on a real node.
    signal.signal(signal.SIGHUP, on_hup)

    cd = plan["containerd"]
    env = dict(os.environ)
    env["PATH"] = f"{cd['path_prepend']}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    # The node's network: containerd, the CNI bridge, every pod and the kubelet live there.
    host_netns = enter_node_network(plan["network"])
    proxy = start_proxy(plan["proxy"], host_netns, env)
    os.close(host_netns)
    print("service proxy serving", flush=True)
    containerd = _start(cd["argv"], cd["log"], env)
    kubelet: subprocess.Popen[bytes] | None = None
    socket = Path(cd["socket"])
    go_file = Path(plan["ready_file"]).with_name("kubelet.go")
    try:
        while not stopping:
            if containerd.poll() is not None:
                print(f"containerd exited with {containerd.returncode}", flush=True)
                return 1
            if proxy.poll() is not None:
                print(f"the service proxy exited with {proxy.returncode}", flush=True)
                return 1
            if kubelet is not None and kubelet.poll() is not None:
                print(f"kubelet exited with {kubelet.returncode}", flush=True)
                return 1
            if socket.exists() and not Path(plan["ready_file"]).exists():
                Path(plan["ready_file"]).touch()
                print("containerd serving", flush=True)
            if restart_kubelet and kubelet is not None:
                _stop(kubelet, 10)
                kubelet, restart_kubelet = None, False
                print("kubelet stopped for a restart", flush=True)
            if kubelet is None and go_file.exists():
                kubelet = _start(plan["kubelet"]["argv"], plan["kubelet"]["log"], env)
                Path(plan["ready_file"]).with_name("kubelet.pid").write_text(f"{kubelet.pid}\n")
                print(f"kubelet started (pid {kubelet.pid})", flush=True)
            time.sleep(0.1)
        return 0
    finally:
        _stop(kubelet, 10)
        _stop(containerd, 10)
        _stop(proxy, 5)
        print("node stopped", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    return run(json.loads(Path(argv[1]).read_text()))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
