"""The embedded default: one Labtasker server per workflow directory, on loopback, database on local disk.

When no Labtasker URL is configured, the submitting Snakemake and the workers on the same machine call
`ensure_embedded_server(workflow_dir)`. Both derive the same server root from the workflow directory, so the
first caller starts `labtasker-server serve --connection http --host 127.0.0.1 --daemon` and every later
caller finds it (the daemon start is idempotent and guarded by Labtasker's own root lock). The URL is also
written to <root>/embedded.json for people and scripts.

The database must live on local disk: when the workflow directory is on a network filesystem (NFS, Lustre,
GPFS, ...), the root moves to a local per-user directory and a message says so; when no local directory can
be found, we refuse and ask for a URL.

The server requires a token (invariant 6: queue access is not shell access, and loopback is shared by every
local user): it is generated on first start into <root>/token (mode 0600, owner only), handed to the server
through its environment (LABTASKER_SERVER_TOKEN, never a command line) and read from that file by the submitter,
the workers and `status` of the same workflow directory (`embedded_token`). A server found running without a
token (started by an older version) is restarted with one.

Nothing here imports labtasker: the server is driven through its CLI (`python -m labtasker_server`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from evalwf_contract.loopback import LOOPBACK_HOSTS, free_port, with_loopback_no_proxy

EMBEDDED_DIRNAME = ".labtasker"
TOKEN_FILENAME = "token"  # <root>/token, mode 0600
SERVER_TOKEN_ENV = "LABTASKER_SERVER_TOKEN"  # how the server gets it (environment only: never argv)
CLIENT_TOKEN_ENV = "LABTASKER_TOKEN"  # how a client is given a token for an explicit URL
ROOT_ENV = "EVALWF_LABTASKER_ROOT"  # overrides where the embedded server keeps its database
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "ceph",
        "fuse.ceph",
        "cifs",
        "smb3",
        "smbfs",
        "sshfs",
        "fuse.sshfs",
        "beegfs",
        "wekafs",
        "glusterfs",
        "fuse.glusterfs",
        "panfs",
        "afs",
        "9p",
        "fuse.juicefs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "virtiofs",
    }
)


class EmbeddedServerError(RuntimeError):
    """The embedded Labtasker server could not be started or found."""


def _unescape_mount(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def filesystem_type(path: str | os.PathLike[str]) -> str | None:
    """The type of the filesystem holding `path` (longest mount-point prefix in /proc/mounts), or None."""
    target = os.path.realpath(path)
    best, best_type = "", None
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount_point = _unescape_mount(fields[1])
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, best_type = mount_point, fields[2]
    except OSError:
        return None
    return best_type


def is_network_filesystem(path: str | os.PathLike[str]) -> bool:
    fstype = filesystem_type(path)
    return fstype is not None and (fstype in NETWORK_FILESYSTEMS or fstype.startswith("nfs"))


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def embedded_root(workflow_dir: str | os.PathLike[str], log: Callable[[str], None] = print) -> Path:
    """Where the embedded server for `workflow_dir` keeps its state and database (always local disk)."""
    override = os.environ.get(ROOT_ENV)
    if override:
        root = Path(override).expanduser().resolve()
        if is_network_filesystem(_existing_ancestor(root)):
            raise EmbeddedServerError(
                f"{ROOT_ENV}={root} is on a network filesystem ({filesystem_type(_existing_ancestor(root))}); "
                "the Labtasker database must be on local disk. Point it elsewhere or configure a Labtasker URL."
            )
        return root
    workflow_dir = Path(workflow_dir).resolve()
    preferred = workflow_dir / EMBEDDED_DIRNAME
    if not is_network_filesystem(workflow_dir):
        return preferred
    digest = hashlib.sha256(str(workflow_dir).encode()).hexdigest()[:16]
    state_home = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    candidates = [
        state_home / "evalwf" / "labtasker" / digest,
        Path(os.environ.get("TMPDIR") or "/tmp") / f"evalwf-labtasker-{os.getuid()}" / digest,
    ]
    for candidate in candidates:
        if not is_network_filesystem(_existing_ancestor(candidate)):
            log(
                f"[labtasker] the workflow directory {workflow_dir} is on a network filesystem "
                f"({filesystem_type(workflow_dir)}): the embedded Labtasker server keeps its database on local disk "
                f"at {candidate} instead. Workers on OTHER machines cannot reach it: for a multi-machine campaign "
                "run one labtasker-server and configure its URL (--labtasker-url / LABTASKER_URL)."
            )
            return candidate
    raise EmbeddedServerError(
        f"the workflow directory {workflow_dir} and every fallback location ({', '.join(map(str, candidates))}) "
        "are on network filesystems; the Labtasker database must be on local disk. Set "
        f"{ROOT_ENV} to a local directory or configure a Labtasker URL (--labtasker-url / LABTASKER_URL)."
    )


def _server_cli(*args: str, env: dict[str, str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labtasker_server", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def server_status(root: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    env = dict(with_loopback_no_proxy(dict(os.environ if env is None else env)))
    done = _server_cli("status", "--labtasker-root", str(root), env=env)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise EmbeddedServerError(
            f"`labtasker-server status --labtasker-root {root}` failed (exit {done.returncode}): "
            f"{done.stderr.strip() or done.stdout.strip()}"
        ) from None


def _read_token_file(path: Path) -> str:
    info = os.stat(path, follow_symlinks=False)
    if not stat.S_ISREG(info.st_mode):
        raise EmbeddedServerError(f"{path} is not a regular file; remove it (a new token is generated)")
    if info.st_uid != os.getuid():
        raise EmbeddedServerError(f"{path} belongs to uid {info.st_uid}, not to you; refusing to use its token")
    if info.st_mode & 0o077:
        os.chmod(path, 0o600)  # readable by others: tighten (a token anyone could read guards nothing)
    token = path.read_text(encoding="ascii").strip()
    if not token:
        raise EmbeddedServerError(f"{path} is empty; remove it (a new token is generated on the next start)")
    return token


def embedded_token(server_root: str | os.PathLike[str], *, create: bool = False) -> str | None:
    """The token of the embedded server kept in <root>/token (owner-only), or None when there is none yet;
    `create` writes a new one (0600 from the start: O_EXCL with the mode, never a chmod after writing)."""
    path = Path(server_root) / TOKEN_FILENAME
    try:
        return _read_token_file(path)
    except FileNotFoundError:
        if not create:
            return None
    token = secrets.token_urlsafe(32)  # visible ASCII, as Labtasker requires
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return _read_token_file(path)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(token + "\n")
    return token


def embedded_token_for(workflow_dir: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> str | None:
    """The token a client of `workflow_dir`'s embedded server sends (None if it never started)."""
    server_root = Path(root).resolve() if root else embedded_root(workflow_dir, log=lambda _: None)
    return embedded_token(server_root)


def _port_free(port: int) -> bool:
    """Whether the server could listen on `port`: checked the way it binds (SO_REUSEADDR), so the port of a
    server that just died, still held by TIME_WAIT connections, counts as free and a restart keeps it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def _root_lock(root: Path) -> Iterator[None]:
    lock_path = root / "evalwf-embedded.lock"
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _running_url(status: dict[str, object], root: Path) -> str | None:
    if status.get("state") != "running":
        return None
    if status.get("connection") != "http" or not status.get("port"):
        raise EmbeddedServerError(
            f"a Labtasker server is running for {root} but not over HTTP on loopback ({status}); stop it with "
            f"`labtasker-server stop --labtasker-root {root}` or configure its URL"
        )
    host = str(status.get("host") or "127.0.0.1")
    if host not in LOOPBACK_HOSTS:
        raise EmbeddedServerError(f"the server running for {root} listens on {host}, not loopback; configure its URL")
    return f"http://{'[::1]' if host == '::1' else host}:{status['port']}"


def _healthy(url: str, timeout_s: float = 3.0) -> bool:
    """A Labtasker server answers /health at `url` (proxies bypassed: loopback)."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/health", timeout=timeout_s) as response:
            return response.status == 200 and json.loads(response.read()).get("status") == "ok"
    except (OSError, ValueError):
        return False


def _requires_token(url: str, timeout_s: float = 3.0) -> bool:
    """The server at `url` refuses an API request that carries no token."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/api/v2/queues", timeout=timeout_s):
            return False
    except urllib.error.HTTPError as error:
        return error.code == 401
    except (OSError, ValueError):
        return False


def recorded_url(server_root: Path) -> str | None:
    """The URL in the server's record (<root>/embedded.json) if a healthy server that requires a token answers
    there.

    Found by its record and a health check, not by PID: a worker that is PID 1 of its own PID namespace (a
    container) cannot see the server's process, but reaches its port."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        url = str(json.loads((server_root / "embedded.json").read_text())["url"])
        if _healthy(url) and _requires_token(url):
            return url
    return None


def ensure_embedded_server(
    workflow_dir: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
) -> str:
    """Start (idempotently) the embedded Labtasker server for `workflow_dir`; return its URL.

    A server that died is started again on the port it had (clients that keep the URL reconnect by
    themselves); every client calls this again when the server stops answering (EmbeddedServerKeeper below)."""
    server_root = Path(root).resolve() if root else embedded_root(workflow_dir, log)
    server_root.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(server_root, 0o700)  # database, token and log: the owner's only
    env = dict(with_loopback_no_proxy(dict(os.environ)))
    env.pop(SERVER_TOKEN_ENV, None)
    info_path = server_root / "embedded.json"
    url = recorded_url(server_root)
    if url is not None:
        return url
    with _root_lock(server_root):
        url = recorded_url(server_root)
        if url is None:
            status = server_status(server_root, env)
            url = _running_url(status, server_root)
            if url is not None and status.get("authentication_enabled") is not True:
                log(f"[labtasker] the embedded server at {url} runs without a token; restarting it with one")
                _server_cli("stop", "--labtasker-root", str(server_root), "--force", env=env, timeout_s=60.0)
                url = None
        if url is None:
            # the server reads its token from the environment: never on a command line (ps) or in a log
            env[SERVER_TOKEN_ENV] = str(embedded_token(server_root, create=True))
            port = None
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                port = int(json.loads(info_path.read_text())["port"])
            if port is None or not _port_free(port):
                port = free_port()
            done = _server_cli(
                "serve",
                "--connection",
                "http",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--labtasker-root",
                str(server_root),
                "--database-filesystem",
                "local",
                "--daemon",
                env=env,
                timeout_s=90.0,
            )
            if done.returncode != 0:
                raise EmbeddedServerError(
                    f"could not start the embedded Labtasker server (root {server_root}, port {port}): "
                    f"{done.stderr.strip() or done.stdout.strip()}; log: {server_root / 'server.log'}"
                )
            url = _running_url(server_status(server_root, env), server_root)
            if url is None:
                raise EmbeddedServerError(f"the embedded Labtasker server for {server_root} did not stay up")
            log(f"[labtasker] embedded server started at {url} (database {server_root / 'server.db'})")
        info = {"url": url, "port": int(url.rsplit(":", 1)[1]), "labtasker_root": str(server_root)}
        with contextlib.suppress(OSError):
            tmp = info_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(info, indent=2) + "\n")
            os.replace(tmp, info_path)
    return url


def stop_embedded_server(root: str | os.PathLike[str]) -> None:
    """Stop the embedded server of `root` (used by tests and `make` targets)."""
    env = dict(with_loopback_no_proxy(dict(os.environ)))
    _server_cli("stop", "--labtasker-root", str(root), "--force", env=env, timeout_s=60.0)


class EmbeddedServerKeeper:
    """For a running client of the embedded server (the submitter, a worker): when the server stops answering,
    find it again or start it again (on the same port, same database), at most once per `interval_s`, so that
    a killed server never strands a campaign whose clients keep running."""

    def __init__(
        self,
        workflow_dir: str | os.PathLike[str],
        url: str,
        *,
        root: str | os.PathLike[str] | None = None,
        log: Callable[[str], None] = print,
        interval_s: float = 3.0,
    ):
        self.workflow_dir, self.root, self.log, self.interval_s = workflow_dir, root, log, interval_s
        self.url = url
        self._lock = threading.Lock()
        self._last_try = 0.0

    def recover(self) -> str:
        """The server's URL after making sure one answers (unchanged if it could not be brought back yet)."""
        with self._lock:
            if time.monotonic() - self._last_try < self.interval_s:
                return self.url
            self._last_try = time.monotonic()
            try:
                url = ensure_embedded_server(self.workflow_dir, root=self.root, log=self.log)
            except (EmbeddedServerError, OSError, subprocess.SubprocessError) as error:
                self.log(f"[labtasker] the embedded server is not answering and could not be restarted yet: {error}")
                return self.url
            if url != self.url:
                self.log(f"[labtasker] the embedded server moved from {self.url} to {url}; reconnecting")
                self.url = url
            return url
