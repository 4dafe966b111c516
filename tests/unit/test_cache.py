"""Tests for circuitlasso.cache: verified fetches, keyed results, resumable chunks, and the
atomic writes every file of the library goes through."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
import torch

from circuitlasso import cache
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.data.artifacts import FILE_MODE, write_json
from circuitlasso.data.toyworld.tokenizer import build_tokenizer, save_tokenizer
from circuitlasso.presentation import reproduce as rp


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(root))
    monkeypatch.delenv(cache.MIRROR_ENV, raising=False)
    return root


@pytest.fixture
def resource(tmp_path: Path) -> tuple[Path, str]:
    """A local file and its sha256, computed independently of the cache module."""
    path = tmp_path / "source" / "data.bin"
    path.parent.mkdir()
    payload = bytes(range(256)) * 4096
    path.write_bytes(payload)
    return path, hashlib.sha256(payload).hexdigest()


def test_cache_root_follows_environment(cache_dir: Path) -> None:
    assert cache.cache_root() == cache_dir


def test_fetch_downloads_verifies_and_reuses(
    resource: tuple[Path, str], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sha = resource
    fetched = cache.fetch(path.as_uri(), sha)  # file:// goes through the download path
    assert fetched == cache_dir / "files" / sha / "data.bin"
    assert fetched.read_bytes() == path.read_bytes()
    assert not [p for p in fetched.parent.iterdir() if p.name.endswith(".tmp")]

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached file must not be downloaded again")

    monkeypatch.setattr(cache.urllib.request, "urlopen", no_download)
    assert cache.fetch("https://example.invalid/data.bin", sha) == fetched


def test_fetch_replaces_a_corrupted_cache_entry(resource: tuple[Path, str]) -> None:
    path, sha = resource
    fetched = cache.fetch(path.as_uri(), sha)
    fetched.write_bytes(b"truncated")
    assert cache.fetch(path.as_uri(), sha).read_bytes() == path.read_bytes()


def test_fetch_copies_from_mirror(
    resource: tuple[Path, str], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sha = resource
    monkeypatch.setenv(cache.MIRROR_ENV, str(path.parent))
    fetched = cache.fetch("https://example.invalid/files/data.bin", sha)
    assert fetched == cache_dir / "files" / sha / "data.bin"
    assert fetched.read_bytes() == path.read_bytes()


def test_fetch_rejects_mirror_file_with_wrong_sha256(resource: tuple[Path, str]) -> None:
    path, _ = resource
    wrong = "0" * 64
    with pytest.raises(ValueError, match=f"{path}.*has sha256 .*expected {wrong}"):
        cache.fetch("https://example.invalid/data.bin", wrong, mirror=path.parent)


def test_fetch_rejects_download_with_wrong_sha256(
    resource: tuple[Path, str], cache_dir: Path
) -> None:
    path, _ = resource
    wrong = "f" * 64
    with pytest.raises(ValueError, match="expected " + wrong):
        cache.fetch(path.as_uri(), wrong)
    assert list((cache_dir / "files" / wrong).iterdir()) == []  # no partial file kept


def test_fetch_offline_and_missing_says_what_and_where(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(cache.urllib.request, "urlopen", offline)
    url, sha = "https://example.org/pub/corpus.zip", "a" * 64
    with pytest.raises(cache.ResourceUnavailableError) as info:
        cache.fetch(url, sha)
    message = str(info.value)
    assert url in message
    assert cache.MIRROR_ENV in message
    assert str(cache_dir / "files" / sha / "corpus.zip") in message

    mirror = tmp_path / "empty-mirror"
    mirror.mkdir()
    with pytest.raises(cache.ResourceUnavailableError, match=str(mirror / "corpus.zip")):
        cache.fetch(url, sha, mirror=mirror)


def test_fetch_rejects_malformed_sha256() -> None:
    with pytest.raises(ValueError, match="64 hex"):
        cache.fetch("https://example.invalid/x.zip", "abc")


def test_atomic_path_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out" / "result.bin"
    with pytest.raises(RuntimeError), cache.atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("interrupted")
    assert list(target.parent.iterdir()) == []


@pytest.fixture
def umask_027() -> Iterator[None]:
    """Files created meanwhile get mode 0o640 unless their writer sets another."""
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def test_atomic_path_gives_the_file_the_umask_permissions_or_the_mode(
    tmp_path: Path, umask_027: None
) -> None:
    with cache.atomic_path(tmp_path / "plain.txt") as tmp:
        tmp.write_text("plain")
    with cache.atomic_path(tmp_path / "shared.txt", mode=0o604) as tmp:
        tmp.write_text("shared")
    assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "shared.txt").stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "shared.txt"]


def _write_circuit(path: Path) -> None:
    circuit = Circuit([("input", "m0"), ("m0", "output")])
    circuit.add_edge("z0.1", "z1.2", coef=0.5)
    circuit.save(path)


def _write_build_info(path: Path) -> None:
    assert path.name == "build_info.md"
    rp.write_build_info(rp.Project(path.parents[2]))


def _write_toy_json(path: Path) -> None:
    write_json(path, {"seed": 0})


def _write_tokenizer(path: Path) -> None:
    save_tokenizer(build_tokenizer(["a", "b"]), path)


@pytest.mark.parametrize(
    ("writer", "name", "mode"),
    [
        (_write_circuit, "circuit.json", 0o640),
        (_write_build_info, "book/sections/build_info.md", 0o640),
        (_write_toy_json, "config.json", FILE_MODE),
        (_write_tokenizer, "tokenizer.json", 0o640),
    ],
)
def test_the_library_writes_files_through_atomic_path(
    tmp_path: Path, umask_027: None, writer: Callable[[Path], None], name: str, mode: int
) -> None:
    path = tmp_path / name
    writer(path)
    assert path.stat().st_size > 0
    assert stat.S_IMODE(path.stat().st_mode) == mode  # mkstemp's files would be 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_an_interrupted_tokenizer_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("old")

    def save(name: str) -> None:
        Path(name).write_text("partial")
        raise OSError("disk full")

    tokenizer = SimpleNamespace(backend_tokenizer=SimpleNamespace(save=save))
    with pytest.raises(OSError, match="disk full"):
        save_tokenizer(tokenizer, path)  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]


def test_cache_key_is_deterministic_and_order_free() -> None:
    key = cache.cache_key(model="gpt2", layers=[0, 1], lam=0.1, sae=None)
    assert key == cache.cache_key(sae=None, lam=0.1, layers=(0, 1), model="gpt2")
    assert len(key) == 64
    assert key != cache.cache_key(model="gpt2", layers=[0, 1], lam=0.2, sae=None)
    assert key != cache.cache_key(model="gpt2", layers=[1, 0], lam=0.1, sae=None)


def test_cache_key_rejects_unhashable_parts() -> None:
    with pytest.raises(ValueError, match="'tensor'"):
        cache.cache_key(tensor=torch.zeros(2))


def test_load_or_compute_saves_once(cache_dir: Path) -> None:
    calls = []

    def compute() -> dict[str, torch.Tensor]:
        calls.append(1)
        return {"acts": torch.arange(6.0).reshape(2, 3)}

    key = cache.cache_key(name="acts")
    first = cache.load_or_compute(key, compute)
    second = cache.load_or_compute(key, compute)
    assert len(calls) == 1
    torch.testing.assert_close(second["acts"], first["acts"])
    assert (cache_dir / "results" / f"{key}.pt").is_file()


def test_load_or_compute_chunks_resumes_after_interruption(tmp_path: Path) -> None:
    computed: list[int] = []
    interrupt_at = [2]  # the first run stops at chunk 2

    def chunk(i: int) -> torch.Tensor:
        if i in interrupt_at:
            interrupt_at.clear()
            raise KeyboardInterrupt
        computed.append(i)
        return torch.full((3,), float(i))

    key = cache.cache_key(collector="test", chunk_size=3)
    with pytest.raises(KeyboardInterrupt):
        cache.load_or_compute_chunks(key, 4, chunk, root=tmp_path)
    assert computed == [0, 1]

    chunks = cache.load_or_compute_chunks(key, 4, chunk, root=tmp_path)
    assert computed == [0, 1, 2, 3]  # chunks 0 and 1 were read back, not recomputed
    torch.testing.assert_close(torch.stack(chunks), torch.arange(4.0)[:, None].expand(4, 3))


def test_chunk_seconds_are_those_of_the_first_computation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]  # a fake clock that moves only while a chunk is computed
    monkeypatch.setattr(cache.time, "perf_counter", lambda: now[0])
    computed: list[int] = []

    def chunk(i: int) -> torch.Tensor:
        computed.append(i)
        now[0] += 2.0 ** -(i + 1)  # 0.5, 0.25, 0.125 s: exact in binary
        return torch.full((2,), float(i))

    key = cache.cache_key(collector="timed")
    cache.load_or_compute_chunks(key, 3, chunk, root=tmp_path)
    folder = tmp_path / "results" / key
    seconds = [float((folder / f"chunk_{i:06d}.seconds").read_text()) for i in range(3)]
    assert seconds == [0.5, 0.25, 0.125]  # each chunk's own
    assert cache.chunk_seconds(key, 3, root=tmp_path) == 0.875

    now[0] += 1000.0  # however long ago and however long the reading takes
    chunks = cache.load_or_compute_chunks(key, 3, chunk, root=tmp_path)
    assert computed == [0, 1, 2]  # read back, not computed again
    torch.testing.assert_close(torch.stack(chunks)[:, 0], torch.arange(3.0))
    assert cache.chunk_seconds(key, 3, root=tmp_path) == 0.875  # still the first run's


def test_a_chunk_without_its_seconds_is_computed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]  # a fake clock that moves only while a chunk is computed
    monkeypatch.setattr(cache.time, "perf_counter", lambda: now[0])
    computed: list[int] = []

    def chunk(i: int) -> torch.Tensor:
        computed.append(i)
        now[0] += 2.0 ** -len(computed)  # 0.5 s, 0.25 s, then 0.125 s: exact in binary
        return torch.full((2,), float(i))

    key = cache.cache_key(collector="seconds lost")
    cache.load_or_compute_chunks(key, 2, chunk, root=tmp_path)
    (tmp_path / "results" / key / "chunk_000001.seconds").unlink()
    with pytest.raises(FileNotFoundError, match=r"chunks \[1\]"):
        cache.chunk_seconds(key, 2, root=tmp_path)
    cache.load_or_compute_chunks(key, 2, chunk, root=tmp_path)
    assert computed == [0, 1, 1]
    assert cache.chunk_seconds(key, 2, root=tmp_path) == 0.5 + 0.125  # chunk 1's second run


def _split_worker(name: str, root: str, key: str, marks: str, barrier: Any) -> None:
    """One of two processes computing the same chunks (each mark names who computed what)."""

    other = "b" if name == "a" else "a"

    def chunk(i: int) -> torch.Tensor:
        (Path(marks) / f"{name}-{i}").touch()
        while not list(Path(marks).glob(f"{other}-*")):  # until the other computes one too
            time.sleep(0.01)
        return torch.full((2,), float(i))

    barrier.wait()
    chunks = cache.load_or_compute_chunks(key, 8, chunk, root=root, progress=False)
    torch.save(torch.stack(chunks), Path(marks) / f"{name}.pt")


@pytest.mark.slow  # two interpreters importing torch
def test_two_processes_computing_one_key_split_its_chunks(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    key = cache.cache_key(collector="shared")
    workers = [
        context.Process(
            target=_split_worker, args=(name, str(tmp_path / "cache"), key, str(tmp_path), barrier)
        )
        for name in ("a", "b")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:  # a deadline, not a bound: each imports torch (a minute under load)
        worker.join(600)
        assert worker.exitcode == 0, f"{worker.name} exit code {worker.exitcode}"
    done = {name: {int(p.name[2:]) for p in tmp_path.glob(f"{name}-*")} for name in ("a", "b")}
    assert done["a"] and done["b"] and not done["a"] & done["b"]  # each chunk computed once
    assert done["a"] | done["b"] == set(range(8))
    for name in ("a", "b"):  # and each process has all of them
        expected = torch.arange(8.0)[:, None].expand(8, 2)
        torch.testing.assert_close(torch.load(tmp_path / f"{name}.pt"), expected)
    assert not list((tmp_path / "cache").rglob("*.claim"))


def _claim(tmp_path: Path, key: str, i: int, holder: str) -> Path:
    claim = tmp_path / "results" / key / f"chunk_{i:06d}.claim"
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(holder)
    return claim


def test_a_claim_of_an_ended_process_or_another_machine_is_taken_over(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    key = cache.cache_key(collector="taken over")
    host = socket.gethostname()
    _claim(tmp_path, key, 0, f"{host} {ended.stdout.strip()} 1.0")
    _claim(tmp_path, key, 1, f"another-{host} {os.getpid()} 1.0")
    _claim(tmp_path, key, 2, "")  # unwritten: its process died at once
    old = time.time() - 2 * cache.CLAIM_WRITE_SECONDS
    os.utime(tmp_path / "results" / key / "chunk_000002.claim", (old, old))
    computed: list[int] = []

    def chunk(i: int) -> torch.Tensor:
        computed.append(i)
        return torch.full((2,), float(i))

    cache.load_or_compute_chunks(key, 3, chunk, root=tmp_path, progress=False)
    assert computed == [0, 1, 2]
    assert not list(tmp_path.rglob("*.claim"))


def test_a_chunk_a_live_process_computes_is_waited_for_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]  # a fake clock that moves only while a chunk is computed here
    monkeypatch.setattr(cache.time, "perf_counter", lambda: now[0])
    polled = threading.Event()  # this process has looked for chunk 1 and is waiting for it
    sleep = time.sleep

    def poll(seconds: float) -> None:
        polled.set()
        sleep(seconds)

    monkeypatch.setattr(cache.time, "sleep", poll)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = psutil.Process(other.pid).create_time()
        key = cache.cache_key(collector="waited for")
        claim = _claim(tmp_path, key, 1, f"{socket.gethostname()} {other.pid} {started!r}")

        def other_saves_it() -> None:
            polled.wait()
            folder = claim.parent
            (folder / "chunk_000001.seconds").write_text("7.0")
            with cache.atomic_path(folder / "chunk_000001.pt") as tmp:
                torch.save(torch.full((2,), 42.0), tmp)
            claim.unlink()

        def chunk(i: int) -> torch.Tensor:
            assert i != 1, "chunk 1 is another process's"
            now[0] += {0: 0.5, 2: 0.25}[i]
            return torch.full((2,), float(i))

        saver = threading.Thread(target=other_saves_it)
        saver.start()
        try:
            chunks = cache.load_or_compute_chunks(key, 3, chunk, root=tmp_path, progress=False)
        finally:
            polled.set()  # the saver ends, whatever happened
            saver.join()
    finally:
        other.kill()
        other.wait()
    torch.testing.assert_close(torch.stack(chunks)[:, 0], torch.tensor([0.0, 42.0, 2.0]))
    assert cache.chunk_seconds(key, 3, root=tmp_path) == 0.5 + 7.0 + 0.25  # 7 s: the other's


def test_build_once_builds_in_one_thread_while_the_other_waits_for_it(tmp_path: Path) -> None:
    target = tmp_path / "folder" / "weights.bin"
    started, release = threading.Event(), threading.Event()
    builds: list[str] = []

    def build(name: str) -> None:
        builds.append(name)
        started.set()
        release.wait(10)
        with cache.atomic_path(target) as tmp:
            tmp.write_text(name)

    first = threading.Thread(target=cache.build_once, args=(target, lambda: build("first")))
    first.start()
    assert started.wait(10)
    second: list[Path] = []
    waiter = threading.Thread(
        target=lambda: second.append(cache.build_once(target, lambda: build("second")))
    )
    waiter.start()
    time.sleep(5 * cache.CLAIM_POLL_SECONDS)
    assert second == []  # waiting for the first build, not building
    release.set()
    first.join(10)
    waiter.join(10)
    assert builds == ["first"] and second == [target] and target.read_text() == "first"
    assert not list(tmp_path.rglob("*.claim"))


def test_build_once_takes_over_the_claim_of_an_ended_process(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    target = tmp_path / "weights.bin"
    claim = tmp_path / "weights.bin.claim"
    claim.write_text(f"{socket.gethostname()} {ended.stdout.strip()} 1.0")
    assert cache.build_once(target, lambda: target.write_text("built")) == target
    assert target.read_text() == "built" and not claim.exists()
    with pytest.raises(FileNotFoundError, match="left no file"):
        cache.build_once(tmp_path / "never.bin", lambda: None)
