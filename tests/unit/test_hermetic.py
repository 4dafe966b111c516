"""The tests run without the network (``no_network`` in ``tests/conftest.py``): a download that
is neither cached nor mirrored, and any connection off this machine, fail at once naming what was
reached for, in the test process and in the Python processes it starts (a subprocess, a Jupyter
kernel); loopback and Unix sockets keep working."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from circuitlasso import cache

BLOCKED = "NetworkBlockedError"  # the guard's error (tests/conftest.py), by name
OFF_MACHINE = [("203.0.113.1", 443), ("example.org", 80)]  # TEST-NET-3; a name, not resolved


def test_a_download_neither_cached_nor_mirrored_fails_naming_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.MIRROR_ENV, raising=False)
    url = "https://example.org/pub/corpus.zip"
    with pytest.raises(cache.ResourceUnavailableError) as info:
        cache.fetch(url, "a" * 64)
    blocked = info.value.__cause__
    assert type(blocked).__name__ == BLOCKED, repr(blocked)  # the guard's, not a DNS error
    assert url in str(blocked) and "blocked in tests" in str(blocked)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # nothing written


# a download through the library in a process of its own; prints what it got as one JSON line
CHILD_DOWNLOAD = """
import json
from huggingface_hub import constants
from circuitlasso import cache

try:
    cache.fetch({url!r}, "a" * 64)
    found = {{"error": None}}
except cache.ResourceUnavailableError as err:
    found = {{"error": str(err), "cause": type(err.__cause__).__name__}}
print(json.dumps({{**found, "hub_offline": constants.HF_HUB_OFFLINE}}))
"""


def _in_a_kernel(source: str) -> str:
    """``source`` run in a Jupyter kernel, as papermill runs a section; its printed text."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(source)]
    NotebookClient(nb, kernel_name="python3").execute()
    return "".join(
        out.get("text", "") for out in nb.cells[0].outputs if out.output_type == "stream"
    )


@pytest.mark.parametrize("child", ["subprocess", "kernel"])
def test_a_process_a_test_starts_cannot_download_either(
    child: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))  # the child's cache: empty
    monkeypatch.delenv(cache.MIRROR_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the guard sets it in the child
    url = "https://example.org/pub/corpus.zip"
    source = CHILD_DOWNLOAD.format(url=url)
    if child == "subprocess":
        run = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        out = run.stdout
    else:
        out = _in_a_kernel(source)
    found = json.loads(out.strip().splitlines()[-1])
    # the library's offline error, caused by the guard (not by a DNS lookup or a timeout)
    assert found["error"] is not None, "the child downloaded the file"
    assert found["error"].startswith(f"cannot download {url} (network access blocked in tests")
    assert found["cause"] == BLOCKED
    assert found["hub_offline"] is True  # the hub's own downloads read only its cache
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # nothing written


@pytest.mark.parametrize("address", OFF_MACHINE)
def test_a_connection_off_this_machine_fails_naming_the_address(address: tuple[str, int]) -> None:
    host, port = address
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)  # without the guard: a timeout, not a hang
        for connect in (sock.connect, sock.connect_ex):
            with pytest.raises(ConnectionError, match=f"{host}:{port}") as info:
                connect(address)
            assert type(info.value).__name__ == BLOCKED


def test_urlopen_off_this_machine_fails_naming_the_url() -> None:
    url = "http://203.0.113.1:8080/data.bin"
    with pytest.raises(ConnectionError, match=url) as info:
        urllib.request.urlopen(urllib.request.Request(url), timeout=5)
    assert type(info.value).__name__ == BLOCKED


def test_loopback_connections_still_work() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = server.getsockname()
        with socket.create_connection(address, timeout=30) as client:
            peer, _ = server.accept()
            with peer:
                client.sendall(b"ping")
                assert peer.recv(4) == b"ping"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
            other.settimeout(30)
            assert other.connect_ex(address) == 0
            server.accept()[0].close()


def test_unix_sockets_still_work() -> None:
    with tempfile.TemporaryDirectory() as folder:  # short: a socket path has at most 107 bytes
        path = str(Path(folder) / "s")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(path)
            server.listen(1)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(30)
                client.connect(path)
                peer, _ = server.accept()
                with peer:
                    client.sendall(b"ping")
                    assert peer.recv(4) == b"ping"


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the handler's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 in a thread; its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_urlopen_of_a_loopback_server_still_works(local_server: str) -> None:
    with urllib.request.urlopen(local_server, timeout=30) as response:
        assert response.read() == b"hello"
