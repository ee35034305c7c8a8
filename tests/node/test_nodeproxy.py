"""The node's service proxy, pure parts: Services and EndpointSlices to a forwarding table, and
the CONNECT requests of the API server's egress."""

from __future__ import annotations

from typing import Any

import pytest

from k8stest.nodeproxy import Endpoint, ServicePort, parse_connect, service_table

API = ServicePort("10.0.0.1", 443)
FIXED = {API: Endpoint("127.0.0.1", 6443, on_host=True)}


def service(name: str, ip: str, *ports: dict[str, Any], namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterIP": ip, "ports": list(ports), **spec},
    }


def endpoint_slice(
    service_name: str, ports: list[dict[str, Any]], endpoints: list[dict[str, Any]], namespace: str = "ns"
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    }


def test_ready_endpoints_behind_each_service_port() -> None:
    services = [
        service("web", "10.0.0.20", {"name": "https", "port": 443}, {"name": "metrics", "port": 8080})
    ]
    slices = [
        endpoint_slice(
            "web",
            [{"name": "https", "port": 9443}, {"name": "metrics", "port": 8443}],
            [
                {"addresses": ["10.88.0.5"], "conditions": {"ready": True}},
                {"addresses": ["10.88.0.6"], "conditions": {"ready": False}},
                {"addresses": ["10.88.0.7"]},  # no condition: ready
            ],
        )
    ]
    table = service_table(services, slices, FIXED)
    assert table[ServicePort("10.0.0.20", 443)] == (Endpoint("10.88.0.5", 9443), Endpoint("10.88.0.7", 9443))
    assert table[ServicePort("10.0.0.20", 8080)] == (Endpoint("10.88.0.5", 8443), Endpoint("10.88.0.7", 8443))
    assert table[API] == (FIXED[API],)


def test_a_port_without_endpoints_is_listed_empty_and_others_are_left_out() -> None:
    services = [
        service("lonely", "10.0.0.30", {"port": 80}),
        service("headless", "None", {"port": 80}),
        service("external", "", {"port": 80}, type="ExternalName"),
        service("udp", "10.0.0.31", {"port": 53, "protocol": "UDP"}),
    ]
    slices = [endpoint_slice("lonely", [{"port": 8080}], [], namespace="other")]  # another namespace's
    table = service_table(services, slices, {})
    assert table == {ServicePort("10.0.0.30", 80): ()}


def test_the_kubernetes_service_keeps_its_fixed_endpoint() -> None:
    services = [service("kubernetes", "10.0.0.1", {"name": "https", "port": 443}, namespace="default")]
    assert service_table(services, [], FIXED) == {API: (FIXED[API],)}


def test_connect_request_gives_the_target() -> None:
    assert parse_connect(b"CONNECT 10.88.0.5:9443 HTTP/1.1\r\nHost: 10.88.0.5:9443\r\n\r\n") == (
        "10.88.0.5",
        9443,
    )


@pytest.mark.parametrize(
    ("head", "complaint"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "not a CONNECT request"),
        (b"CONNECT 10.88.0.5 HTTP/1.1\r\n\r\n", "host:port"),
        (b"CONNECT 10.88.0.5:99999 HTTP/1.1\r\n\r\n", "host:port"),
        (b"CONNECT node-a:10250 HTTP/1.1\r\n\r\n", "IPv4 address"),
        (b"CONNECT \xff:1 HTTP/1.1\r\n\r\n", "not ASCII"),
    ],
)
def test_bad_connect_requests_are_refused_with_the_reason(head: bytes, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_connect(head)
