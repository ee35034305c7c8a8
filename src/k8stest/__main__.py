"""Run the test control plane by hand: ``python -m k8stest up``.

Why: when an integration test fails, the quickest way to understand it is to poke the same
control plane with kubectl. This starts exactly what the fixtures start, prints how to reach it,
and tears everything down on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from k8stest.binaries import find_binaries
from k8stest.controlplane import start_control_plane
from k8stest.devicemanager import DeviceManagerHarness
from k8stest.kwok import create_kwok_nodes
from k8stest.node import cli as node_cli


def _up(args: argparse.Namespace) -> int:
    bins, reason = find_binaries()
    if bins is None:
        print(reason, file=sys.stderr)
        return 1
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="k8stest-"))
    cp = start_control_plane(bins, workdir)
    harness: DeviceManagerHarness | None = None
    try:
        print(f"control plane up in {cp.started_in:.1f} s; logs in {workdir / 'logs'}")
        nodes: list[str] = []
        if args.nodes:
            client = cp.client()
            nodes = create_kwok_nodes(client, args.nodes, prefix="kwok-node-")
            client.close()
            print(f"{len(nodes)} kwok nodes Ready: {nodes[0]} .. {nodes[-1]}")
        if args.device_plugin_dir:
            if os.geteuid() != 0:
                print("the device-manager harness needs root", file=sys.stderr)
                return 1
            harness = DeviceManagerHarness(
                bins,
                workdir / "harness",
                Path(args.device_plugin_dir),
                kubeconfig=cp.admin_kubeconfig if nodes else None,
                node_name=nodes[0] if nodes else None,
            )
            harness.start()
            print(
                f"device manager: plugins register on {harness.kubelet_socket}"
                + (f", capacity published to node {nodes[0]}" if nodes else "")
            )
            print(f"  state: curl --unix-socket {harness.control_socket} http://h/state")
        print()
        print(f"export KUBECONFIG={cp.admin_kubeconfig}")
        print(f"{bins.path('kubectl')} get nodes")
        print("Ctrl-C stops everything.")
        sys.stdout.flush()
        node_cli.run_until_signalled(cp.check_alive)
    finally:
        if harness is not None:
            harness.stop()
        cp.stop()
        print("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m k8stest", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start etcd, apiserver, KCM, scheduler and kwok; wait for Ctrl-C")
    up.add_argument("--workdir", help="directory for PKI, kubeconfigs, etcd data and logs (default: temp)")
    up.add_argument("--nodes", type=int, default=1, help="kwok nodes to create (default 1)")
    up.add_argument(
        "--device-plugin-dir",
        help="also run the kubelet device manager on this directory, publishing to the first node",
    )
    node = sub.add_parser("node", help="a control plane plus one real kubelet node (root)")
    node_cli.add_arguments(node)
    args = ap.parse_args(argv)
    if args.cmd == "node":
        return node_cli.run(args)
    return _up(args)


if __name__ == "__main__":
    sys.exit(main())
