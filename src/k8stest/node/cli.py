"""``python -m k8stest node up``: a control plane plus one real node, for poking by hand.

Why: when a real-node test fails, kubectl against the same setup (and the node's logs and
``ctr``) is the quickest way to see why. Ctrl-C stops everything, containers included.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from intel_device_plugins.sim.node import build_node, load_node_spec
from k8stest.binaries import find_binaries
from k8stest.node import (
    NodeConfig,
    find_node_binaries,
    node_unavailable_reason,
    start_node_control_plane,
    start_real_node,
    write_test_images,
)
from k8stest.ociimage import WORKLOAD_IMAGE


def run_until_signalled(*checks: Callable[[], None]) -> None:
    """Return on SIGINT or SIGTERM; every half second call ``checks`` (which raise when a
    component died, ending the wait with its error)."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop:
        for check in checks:
            check()
        time.sleep(0.5)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up"], help="start a control plane and one real node")
    parser.add_argument("--workdir", help="directory for everything (default: a new temporary one)")
    parser.add_argument(
        "--profile", help="simulated node (sim TOML) whose devices appear in the node's /sys and /dev"
    )
    parser.add_argument("--name", default="k8stest-node", help="node name (default k8stest-node)")


def run(args: argparse.Namespace) -> int:
    bins, reason = find_binaries()
    node_bins, node_reason = find_node_binaries()
    problem = reason or node_reason or node_unavailable_reason()
    if bins is None or node_bins is None or problem:
        print(problem, file=sys.stderr)
        return 1
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="k8stest-node-"))
    sim_root = None
    if args.profile:
        sim_root = workdir / "sim"
        build_node(load_node_spec(Path(args.profile)), sim_root)
    archive = write_test_images(node_bins, workdir / "images" / "k8stest-busybox.tar")
    cp = start_node_control_plane(bins, workdir / "control-plane")
    try:
        print(f"control plane up in {cp.started_in:.1f} s")
        node = start_real_node(
            node_bins, cp, workdir / "node", NodeConfig(name=args.name), sim_root=sim_root, images=[archive]
        )
        try:
            print(f"node {node.name} Ready in {node.started_in:.1f} s; logs in {node.layout.logs}")
            print(f"  device plugins register on {node.device_plugin_dir / 'kubelet.sock'}")
            print(f"  the node's /sys and /dev: {node.sys_dir}, {node.dev_dir}")
            print(f"  images: {', '.join(node.image_names())} (use {WORKLOAD_IMAGE}, imagePullPolicy: Never)")
            print(f"  ctr: {node_bins.path('ctr')} --address {node.layout.containerd_socket} -n k8s.io ...")
            print()
            print(f"export KUBECONFIG={cp.admin_kubeconfig}")
            print(f"{bins.path('kubectl')} get nodes -o wide")
            print("Ctrl-C stops everything.")
            sys.stdout.flush()
            run_until_signalled(cp.check_alive, node.check_alive)
        finally:
            node.stop()
    finally:
        cp.stop()
        print("stopped")
    return 0
