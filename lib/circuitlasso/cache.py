"""Content-addressed on-disk cache: verified downloads and keyed results, written atomically.

Two stores live under one root (``$CIRCUITLASSO_CACHE``, default ``~/.cache/circuitlasso``):

- ``files/<sha256>/<name>``: downloaded resources, addressed by their sha256 (:func:`fetch`).
- ``results/<key>...``: values computed by the library (tensors, dicts of tensors), addressed by
  :func:`cache_key` and saved with ``torch.save`` (:func:`load_or_compute`,
  :func:`load_or_compute_chunks`).

Every write goes to a temporary file in the destination folder and is moved into place with
``os.replace``, so an interrupted run never leaves a truncated file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psutil
from tqdm import tqdm

from circuitlasso.executor import Executor, get_executor
from circuitlasso.timing import Stopwatch

CACHE_ENV = "CIRCUITLASSO_CACHE"
MIRROR_ENV = "CIRCUITLASSO_MIRROR"
WRITE_LOG_ENV = "CIRCUITLASSO_WRITE_LOG"  # a file each completed write appends its path to
CLAIM_POLL_SECONDS = 0.05  # how often what another process computes is looked for
CLAIM_WRITE_SECONDS = 10.0  # a claim still unwritten after this long is of a process that died

T = TypeVar("T")


class ResourceUnavailableError(RuntimeError):
    """A resource is neither cached nor mirrored locally, and downloading it failed."""


def hub_resource_error(
    what: str,
    repo: str,
    err: Exception,
    *,
    repo_type: str = "model",
    include: str | None = None,
) -> ResourceUnavailableError:
    """The error for a Hugging Face hub resource that is neither in the hub cache nor downloadable.

    It names the ``hf download`` command to run with network and the hub-cache folder to copy the
    result to.
    """
    from huggingface_hub import constants

    folder = Path(constants.HF_HUB_CACHE) / f"{repo_type}s--{repo.replace('/', '--')}"
    command = f"hf download {repo}"
    if repo_type != "model":
        command += f" --repo-type {repo_type}"
    if include is not None:
        command += f" --include '{include}'"
    return ResourceUnavailableError(
        f"cannot load {what} from the Hugging Face hub repo {repo!r} ({err}). On a machine with "
        f"network run `{command}` and copy the resulting hub-cache folder to {folder} (or set "
        "HF_HUB_CACHE to a folder holding it), then set HF_HUB_OFFLINE=1. Gated repos (Gemma) "
        "need an accepted licence on huggingface.co and HF_TOKEN."
    )


def cache_root() -> Path:
    """The cache root: ``$CIRCUITLASSO_CACHE`` if set, else ``~/.cache/circuitlasso``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "circuitlasso"


@contextmanager
def atomic_path(path: str | Path, *, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` if the block succeeds.

    The temporary file is removed if the block raises, so ``path`` is either absent or complete.
    The file gets the permissions ``mode``, or by default those of any new file under the umask.
    Every file the library writes goes through here; where ``$CIRCUITLASSO_WRITE_LOG`` names a
    file, each completed write appends its path there (how a book build counts what each of its
    stages wrote, :func:`circuitlasso.presentation.reproduce.run_stage`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    tmp.touch(exist_ok=False)  # claims the name; unlike mkstemp's 0600, honours the umask
    try:
        yield tmp
        if mode is not None:
            tmp.chmod(mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    log = os.environ.get(WRITE_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as lines:
            lines.write(f"{path.resolve()}\n")


def sha256_of(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 digest of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def _file_name(url: str) -> str:
    name = Path(urllib.parse.urlparse(url).path).name
    if not name:
        raise ValueError(f"cannot infer a file name from url {url!r}; pass filename=")
    return name


def _check_sha256(sha256: str) -> str:
    sha256 = sha256.lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"sha256 must be 64 hex characters, got {sha256!r}")
    return sha256


def _download(url: str, dest: Path, expected_sha256: str) -> None:
    """Stream ``url`` into ``dest`` atomically with a progress bar, verifying its sha256."""
    digest = hashlib.sha256()
    with atomic_path(dest) as tmp:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        if digest.hexdigest() != expected_sha256:
            raise ValueError(
                f"downloaded {url} has sha256 {digest.hexdigest()}, expected {expected_sha256}"
            )


def fetch(
    url: str,
    sha256: str,
    *,
    mirror: str | Path | None = None,
    filename: str | None = None,
) -> Path:
    """Return a local path to the file at ``url`` whose content has the given sha256.

    Lookup order: (1) the cache, ``<cache root>/files/<sha256>/<filename>``; (2) a local mirror
    directory (``mirror`` or ``$CIRCUITLASSO_MIRROR``) holding ``<filename>``, copied into the
    cache; (3) a download, verified and written atomically. A mirrored or downloaded file whose
    sha256 differs raises ``ValueError``; a failed download raises
    :class:`ResourceUnavailableError` saying what to download and where to put it.
    """
    sha256 = _check_sha256(sha256)
    name = filename or _file_name(url)
    cached = cache_root() / "files" / sha256 / name
    if cached.is_file():
        if sha256_of(cached) == sha256:
            return cached
        cached.unlink()  # corrupted entry: fetch it again

    mirror_dir = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    if mirror_dir:
        mirrored = Path(mirror_dir).expanduser() / name
        if mirrored.is_file():
            actual = sha256_of(mirrored)
            if actual != sha256:
                raise ValueError(
                    f"mirror file {mirrored} has sha256 {actual}, expected {sha256} "
                    f"(the file at {url})"
                )
            with atomic_path(cached) as tmp:
                shutil.copyfile(mirrored, tmp)
            return cached

    try:
        _download(url, cached, sha256)
    except OSError as err:  # urllib.error.URLError included
        mirror_hint = (
            f"{Path(mirror_dir).expanduser() / name}"
            if mirror_dir
            else f"<dir>/{name} and set {MIRROR_ENV}=<dir>"
        )
        raise ResourceUnavailableError(
            f"cannot download {url} ({err}). Download it on a machine with network "
            f"(sha256 {sha256}) and put it either at {mirror_hint} (a local mirror) "
            f"or at {cached} (the cache)."
        ) from err
    return cached


def _canonical(value: Any, key: str) -> Any:
    """Check a cache-key part is made of strings, numbers, booleans, None and sequences."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_canonical(v, key) for v in value]
    raise ValueError(
        f"cache_key part {key!r} has type {type(value).__name__}; "
        "use strings, numbers, booleans, None or lists of them"
    )


def cache_key(**parts: Any) -> str:
    """Hex sha256 of the parts (strings, numbers, booleans, None, lists), order-independent."""
    canonical = {name: _canonical(value, name) for name, value in parts.items()}
    payload = json.dumps(canonical, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def digest_arrays(*arrays: Any) -> str:
    """Hex sha256 of numpy arrays' dtypes, shapes and bytes (a cache-key part for data)."""
    import numpy as np

    digest = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def _results_dir(root: str | Path | None) -> Path:
    return (Path(root) if root is not None else cache_root()) / "results"


def _load(path: Path) -> Any:
    import torch  # here, so that writing a file (the `circuitlasso` command) does not load it

    return torch.load(path, weights_only=True)


def _load_or_save(path: Path, fn: Callable[[], T]) -> T:
    import torch

    if path.is_file():
        return _load(path)
    value = fn()
    with atomic_path(path) as tmp:
        torch.save(value, tmp)
    return value


def load_or_compute(key: str, fn: Callable[[], T], *, root: str | Path | None = None) -> T:
    """Return the value cached under ``key``; else compute ``fn()``, save it atomically, return it.

    Values are what ``torch.load(weights_only=True)`` reads back: tensors, numbers, strings and
    lists / tuples / dicts of them. ``root`` defaults to :func:`cache_root`.
    """
    return _load_or_save(_results_dir(root) / f"{key}.pt", fn)


def load_or_compute_chunks(
    key: str | None,
    n_chunks: int,
    fn: Callable[[int], T],
    *,
    root: str | Path | None = None,
    desc: str | None = None,
    progress: bool = True,
    executor: str | Executor | None = None,
) -> list[T]:
    """Return ``[fn(0), ..., fn(n_chunks - 1)]``, each chunk cached on its own (resumable).

    Chunk ``i`` is saved atomically to ``results/<key>/chunk_<i>.pt`` as soon as it is computed,
    with the seconds ``fn(i)`` took beside it (:func:`chunk_seconds` reads them back), so a rerun
    after an interruption computes only the missing chunks. ``key`` must already
    determine the chunking (include the chunk size in :func:`cache_key`). ``progress=False``
    hides the progress bar (it counts finished chunks). ``executor``: where the missing chunks
    are computed (:func:`circuitlasso.executor.get_executor`; default here, one after another).
    On a Ray cluster each task saves its own chunk, so ``root`` must then be a folder every
    worker sees (the local disk of a one-machine cluster, else a shared file system).
    ``key=None`` computes every chunk the same way but reads and writes no file.

    Processes of one machine that compute the same ``key`` at once split its chunks: a chunk is
    claimed (``chunk_<i>.claim``, naming the process) while it is computed, the others skip it
    and read it once saved. A claim whose process has ended, or that names another machine, is
    taken over, so a killed run never leaves a chunk waited for.
    """
    if n_chunks < 0:
        raise ValueError(f"n_chunks must be >= 0, got {n_chunks}")
    folder = _results_dir(root) / (key or "")  # not read when key is None
    saved = key is not None
    missing = [i for i in range(n_chunks) if not (saved and _is_saved(folder, i))]
    task = _SavedChunk(fn, folder) if saved else fn
    computed: dict[int, T] = {}
    with tqdm(
        total=n_chunks,
        initial=n_chunks - len(missing),
        desc=desc or f"chunks {(key or 'uncached')[:8]}",
        leave=False,
        disable=not progress,
    ) as bar:
        waiting = []
        for i, value in get_executor(executor).map(task, missing):
            if isinstance(value, _ClaimedElsewhere):
                waiting.append(i)
                continue
            computed[i] = value
            bar.update()
        while waiting:  # chunks another live process of this machine is computing, in order
            i = waiting[0]
            if _is_saved(folder, i) or not _claim_is_live(_claim_path(folder, i)):
                value = task(i)  # read back, or taken over from a process that ended
                if not isinstance(value, _ClaimedElsewhere):
                    computed[i] = value
                    waiting.pop(0)
                    bar.update()
                    continue
            time.sleep(CLAIM_POLL_SECONDS)  # only the first is looked at until it is done
    return [
        computed[i] if i in computed else _load(_chunk_path(folder, i)) for i in range(n_chunks)
    ]


def chunk_seconds(key: str, n_chunks: int, *, root: str | Path | None = None) -> float:
    """Seconds the ``n_chunks`` chunks saved under ``key`` took to compute, summed: the time of a
    first run, read back however the chunks were obtained since (computed or loaded)."""
    folder = _results_dir(root) / key
    unsaved = [i for i in range(n_chunks) if not _is_saved(folder, i)]
    if unsaved:
        raise FileNotFoundError(f"chunks {unsaved[:5]} of {key} are not saved under {folder}")
    return sum(float(_seconds_path(folder, i).read_text()) for i in range(n_chunks))


def _chunk_path(folder: Path, i: int) -> Path:
    return folder / f"chunk_{i:06d}.pt"


def _seconds_path(folder: Path, i: int) -> Path:
    return folder / f"chunk_{i:06d}.seconds"


def _is_saved(folder: Path, i: int) -> bool:
    return _chunk_path(folder, i).is_file() and _seconds_path(folder, i).is_file()


def _claim_path(folder: Path, i: int) -> Path:
    return folder / f"chunk_{i:06d}.claim"


def _this_process() -> str:
    """``host pid start-time``: names this process, and no later one that reuses its pid."""
    return f"{socket.gethostname()} {os.getpid()} {psutil.Process().create_time()!r}"


def _claim_is_live(claim: Path) -> bool:
    """Whether ``claim`` names a running process of this machine."""
    try:
        host, pid, started = claim.read_text().split()
    except FileNotFoundError:  # released
        return False
    except ValueError:  # being written, or its process died before it could write it
        try:
            return time.time() - claim.stat().st_mtime < CLAIM_WRITE_SECONDS
        except FileNotFoundError:
            return False
    if host != socket.gethostname():
        return False
    try:
        return repr(psutil.Process(int(pid)).create_time()) == started
    except psutil.Error:
        return False


def _take_claim(claim: Path) -> bool:
    """Claim a chunk for this process: False where a live process of this machine holds it."""
    me = _this_process()
    for _ in range(2):
        try:
            with open(claim, "x", encoding="utf-8") as held:
                held.write(me)
            return True
        except FileExistsError:
            if _claim_is_live(claim):
                return False
            claim.unlink(missing_ok=True)  # its process ended: taken over
    return False


def _release_claim(claim: Path) -> None:
    """Remove ``claim`` if this process holds it."""
    if claim.is_file() and claim.read_text() == _this_process():
        claim.unlink(missing_ok=True)


def build_once(target: Path, build: Callable[[], object]) -> Path:
    """``target``, made by ``build()`` unless it exists, by one process of this machine at a
    time: under a claim (``<target>.claim``, naming the process, as a chunk's), so that others
    asking meanwhile wait for it rather than build it again, and take the claim over if its
    process ends first. ``build`` must leave ``target`` whole or absent (atomic writes)."""
    claim = target.with_name(target.name + ".claim")
    while not target.exists():
        claim.parent.mkdir(parents=True, exist_ok=True)
        if not _take_claim(claim):
            time.sleep(CLAIM_POLL_SECONDS)
            continue
        try:
            if not target.exists():
                build()
        finally:
            _release_claim(claim)
        if not target.exists():
            raise FileNotFoundError(f"building {target} left no file there")
    return target


class _ClaimedElsewhere:
    """What a chunk task returns when another live process is computing the chunk."""


class _SavedChunk:
    """``fn(i)``, saved atomically to its chunk file before it is returned, its seconds first
    (so a saved chunk always has them); computed under a claim (see
    :func:`load_or_compute_chunks`), read back if another process saved it meanwhile."""

    def __init__(self, fn: Callable[[int], T], folder: Path) -> None:
        self.fn, self.folder = fn, folder

    def __call__(self, i: int) -> Any:
        import torch

        claim = _claim_path(self.folder, i)
        if not _is_saved(self.folder, i):
            claim.parent.mkdir(parents=True, exist_ok=True)
            if not _take_claim(claim):
                return _ClaimedElsewhere()
        try:
            if _is_saved(self.folder, i):
                return _load(_chunk_path(self.folder, i))
            clock = Stopwatch()
            value = self.fn(i)
            seconds = clock.lap("chunk")
            with atomic_path(_seconds_path(self.folder, i)) as tmp:
                tmp.write_text(repr(seconds))
            with atomic_path(_chunk_path(self.folder, i)) as tmp:
                torch.save(value, tmp)
            return value
        finally:
            _release_claim(claim)
