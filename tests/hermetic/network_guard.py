"""The tests' network guard, one definition for the test process and every Python process it
starts (standard library only: it runs in fresh virtual environments too).

``socket.socket.connect`` / ``connect_ex`` to an address that is not loopback, and
``urllib.request.urlopen`` of a URL that is neither a local file (``file:``, ``data:``) nor on
loopback, raise :class:`NetworkBlockedError` (a ``ConnectionError``, so code that handles being
offline still does) naming the address or the URL. Loopback and Unix sockets keep working; host
names other than ``localhost`` are refused without being resolved (that would be a DNS query).

The test process installs it for the session (``no_network`` in ``tests/conftest.py``); a child
process installs it at start-up through ``sitecustomize.py`` beside this file (see there).
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

ENV = "CIRCUITLASSO_TEST_NO_NETWORK"  # "1": a Python process started by a test blocks too
HF_OFFLINE_ENV = "HF_HUB_OFFLINE"  # set to "1" in those processes: the hub reads only its cache


class NetworkBlockedError(ConnectionError):
    """An attempt to reach the network from a test or a process it started."""


def is_local_host(host: str) -> bool:
    """Whether ``host`` (an address or a name, as given to ``connect``) is this machine's
    loopback; names other than ``localhost`` are not resolved."""
    host = host.strip("[]").split("%")[0].lower()  # IPv6 brackets and zone
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def check_connect(sock: socket.socket, address: Any) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        return  # Unix sockets and the like (a malformed address is the real connect's to refuse)
    host, port = address[0], address[1]
    if not is_local_host(str(host)):
        raise NetworkBlockedError(
            f"network access blocked in tests: connect to {host}:{port} "
            f"(only loopback and Unix sockets are allowed)"
        )


def guarded() -> list[tuple[Any, str, Callable[..., Any]]]:
    """``(owner, name, replacement)`` of each function the guard replaces, wrapping the ones
    in place now."""
    real_urlopen = urllib.request.urlopen
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def urlopen(url: Any, *args: Any, **kwargs: Any) -> Any:
        full = url.full_url if isinstance(url, urllib.request.Request) else str(url)
        parts = urllib.parse.urlsplit(full)
        if parts.scheme not in ("", "file", "data") and not is_local_host(parts.hostname or ""):
            raise NetworkBlockedError(f"network access blocked in tests: urlopen({full!r})")
        return real_urlopen(url, *args, **kwargs)

    def connect(self: socket.socket, address: Any) -> None:
        check_connect(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check_connect(self, address)
        return real_connect_ex(self, address)

    return [
        (urllib.request, "urlopen", urlopen),
        (socket.socket, "connect", connect),
        (socket.socket, "connect_ex", connect_ex),
    ]


def install() -> None:
    """Block the network in this process for good (a process a test started)."""
    for owner, name, replacement in guarded():
        setattr(owner, name, replacement)
