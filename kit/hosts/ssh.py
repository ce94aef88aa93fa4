"""SSHHost: a GPU box reached over SSH with paramiko.

One transport per host, kept open. On it, one channel runs the kit's helper
(see ``kit/_remote/helper.py``); port forwards open their own channels. When the
remote has no python3 the host falls back to one channel per command
(``exec_fallback.py``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import select
import shlex
import socket
import threading
from pathlib import Path

import paramiko

from kit.errors import (
    AuthenticationFailed,
    ConnectError,
    ConnectionRefused,
    HostError,
    HostKeyChanged,
    HostUnreachable,
    UnknownHostKey,
)

from .base import Host
from .exec_fallback import ExecFallback
from .wire import BOOT, HelperConnection, NoPython

__all__ = ["SSHHost", "fingerprint"]

# paramiko logs transport failures ("Error reading SSH protocol banner", "Secsh channel 0 open
# FAILED") that the kit reports itself, as errors with what to do; without a handler Python
# would print them to stderr. A NullHandler silences them unless the caller configures logging.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_DEFAULT_CONFIG = "~/.ssh/config"
_DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
_SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


def fingerprint(key: paramiko.PKey) -> str:
    """The key's fingerprint as OpenSSH prints it (``SHA256:...``)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _known_hosts_name(hostname: str, port: int) -> str:
    return hostname if port == 22 else f"[{hostname}]:{port}"


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Reject unknown keys with a useful error, or record them if the caller opted in."""

    def __init__(self, owner: SSHHost) -> None:
        self.owner = owner

    def missing_host_key(self, client, hostname, key) -> None:
        owner = self.owner
        entry = hostname if hostname.startswith("[") else _known_hosts_name(hostname, owner.port)
        if not owner.trust_new_host:
            raise UnknownHostKey(
                f"{owner.name} is not in {owner.known_hosts_file}: it offered "
                f"{key.get_name()} key {fingerprint(key)}",
                host=owner.name,
                hint="verify that fingerprint out of band, then connect once with trust_new_host=True "
                f"to record it, or run `ssh-keyscan -p {owner.port} {owner.hostname} >> {owner.known_hosts_file}`",
                cli_hint="verify that fingerprint out of band, then run the command once with --trust-new-host "
                f"to record it, or run `ssh-keyscan -p {owner.port} {owner.hostname} >> {owner.known_hosts_file}`",
            )
        client.get_host_keys().add(entry, key.get_name(), key)
        path = Path(owner.known_hosts_file)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(f"{entry} {key.get_name()} {key.get_base64()}\n")


class SSHHost(Host):
    """A host reached over SSH.

    ``host`` is a hostname, ``user@host``, or an alias from ``~/.ssh/config``
    (HostName, User, Port, IdentityFile, ProxyJump, ProxyCommand and
    UserKnownHostsFile are honoured; the SSH agent is used when present).
    Host keys are checked against known_hosts; an unknown host is refused
    unless ``trust_new_host=True``, which records the key it saw.
    """

    def __init__(
        self,
        host: str,
        *,
        port: int | None = None,
        user: str | None = None,
        key_filename: str | list[str] | None = None,
        password: str | None = None,
        config_file: str | None = _DEFAULT_CONFIG,
        known_hosts: str | None = None,
        trust_new_host: bool = False,
        allow_agent: bool = True,
        look_for_keys: bool = True,
        proxy_jump: str | None = None,
        connect_timeout: float = 10.0,
        default_timeout: float = 60.0,
        helper_python: str = "python3",
        use_helper: bool = True,
        persist: float | None = None,
    ) -> None:
        from .kept import key_options

        # As given: the same ones name the same kept connection (kit.hosts.kept), before any lookup.
        self._given = key_options(host, port=port, user=user, key_filename=key_filename, config_file=config_file,
                                  known_hosts=known_hosts, allow_agent=allow_agent, look_for_keys=look_for_keys,
                                  proxy_jump=proxy_jump, connect_timeout=connect_timeout, helper_python=helper_python)
        if "@" in host and user is None:
            user, host = host.rsplit("@", 1)
        self.alias = host
        cfg = self._lookup_config(host, config_file)
        self.hostname = cfg.get("hostname", host)
        self.port = int(port or cfg.get("port", 22))
        self.user = user or cfg.get("user") or _local_user()
        self.key_filenames = _as_list(key_filename) + [
            os.path.expanduser(p) for p in cfg.get("identityfile", [])
        ]
        self.password = password
        self.known_hosts_file = os.path.expanduser(
            known_hosts or (cfg.get("userknownhostsfile") or _DEFAULT_KNOWN_HOSTS).split()[0]
        )
        self.trust_new_host = trust_new_host
        self.allow_agent = allow_agent
        self.look_for_keys = look_for_keys
        jump = proxy_jump if proxy_jump is not None else cfg.get("proxyjump")
        self.proxy_jump = None if (jump or "").lower() in ("", "none") else jump
        self.proxy_command = cfg.get("proxycommand") if not self.proxy_jump else None
        self.config_file = config_file
        self.connect_timeout = connect_timeout
        self.default_timeout = default_timeout
        self.helper_python = helper_python
        self.use_helper = use_helper
        # Keep the connection for the next process (kit.hosts.kept): never with a password, or without the helper.
        self.persist = persist if persist and use_helper and password is None else None
        self._kept = False  # whether the helper is one a keeper holds (no transport of our own)
        self.name = f"{self.user}@{self.hostname}:{self.port}"
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHHost | None = None
        self._conn = None
        self._lock = threading.RLock()
        self._forwards: dict[tuple[str, int], _Forward] = {}

    @staticmethod
    def _lookup_config(host: str, config_file: str | None) -> dict:
        if not config_file:
            return {}
        path = os.path.expanduser(config_file)
        if not os.path.exists(path):
            return {}
        return dict(paramiko.SSHConfig.from_path(path).lookup(host))

    # -- transport ----------------------------------------------------------
    @property
    def transport(self) -> paramiko.Transport | None:
        return self._client.get_transport() if self._client else None

    @property
    def connected(self) -> bool:
        t = self.transport
        return bool(t and t.is_active())

    def connect(self) -> SSHHost:
        """Open the SSH transport now (otherwise the first call does it)."""
        with self._lock:
            if not self.connected:
                self._open_transport()
        return self

    def _open_transport(self) -> None:
        self._close_transport()
        client = paramiko.SSHClient()
        for path in (_SYSTEM_KNOWN_HOSTS, self.known_hosts_file):
            if os.path.exists(path):
                client.get_host_keys().load(path)
        client.set_missing_host_key_policy(_HostKeyPolicy(self))
        sock = self._open_socket()
        try:
            client.connect(
                self.hostname,
                port=self.port,
                username=self.user,
                password=self.password,
                key_filename=self.key_filenames or None,
                sock=sock,
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                channel_timeout=self.connect_timeout,
                allow_agent=self.allow_agent,
                look_for_keys=self.look_for_keys,
            )
        except BaseException as exc:
            transport = client.get_transport()
            # paramiko reports a handshake that never happened (no banner) as
            # "No existing session"; say what actually went wrong.
            no_handshake = (
                transport is not None
                and not transport.initial_kex_done
                and type(exc) is paramiko.SSHException
            )
            client.close()
            sock.close()
            raise self._connect_error(TimeoutError() if no_handshake else exc) from None
        client.get_transport().set_keepalive(15)
        self._client = client

    def _open_socket(self):
        where = f"{self.hostname}:{self.port}"
        if self.proxy_jump:
            return self._jump_channel()
        if self.proxy_command:
            return paramiko.ProxyCommand(self.proxy_command)
        try:
            return socket.create_connection((self.hostname, self.port), timeout=self.connect_timeout)
        except ConnectionRefusedError:
            raise ConnectionRefused(
                f"connection refused by {where} (tried for {self.name})",
                host=self.name,
                hint="sshd is not listening there: check the port (-p / Port in ~/.ssh/config) "
                "and that sshd runs",
            ) from None
        except socket.gaierror as exc:
            raise HostUnreachable(
                f"cannot resolve {self.hostname!r}: {exc.strerror}",
                host=self.name,
                hint="check the hostname, or the alias's Host block in "
                f"{self.config_file or 'your ssh config'}",
            ) from None
        except TimeoutError:
            raise HostUnreachable(
                f"no answer from {where} within {self.connect_timeout:g}s",
                host=self.name,
                hint="the host may be down or firewalled; check it with `ping` or your VPN",
            ) from None
        except OSError as exc:  # refused above; here: no route, network down, ... (at once, not a timeout)
            raise HostUnreachable(
                f"cannot reach {where}: {exc.strerror or exc}",
                host=self.name,
                hint="check the address, your network and VPN; `ping` the host",
            ) from None

    def _jump_channel(self):
        chain = [h.strip() for h in self.proxy_jump.split(",") if h.strip()]
        hop = SSHHost(
            chain[-1],
            config_file=self.config_file,
            known_hosts=self.known_hosts_file,
            trust_new_host=self.trust_new_host,
            allow_agent=self.allow_agent,
            proxy_jump=",".join(chain[:-1]) or None,
            connect_timeout=self.connect_timeout,
            key_filename=self.key_filenames or None,
            use_helper=False,
        )
        hop.connect()
        self._jump = hop
        try:
            return hop.transport.open_channel(
                "direct-tcpip", (self.hostname, self.port), ("127.0.0.1", 0), timeout=self.connect_timeout
            )
        except (paramiko.ChannelException, paramiko.SSHException) as exc:
            raise HostUnreachable(
                f"jump host {hop.name} could not reach {self.hostname}:{self.port}: {exc}",
                host=self.name,
                hint="check ProxyJump and that the jump host allows TCP forwarding (AllowTcpForwarding)",
            ) from None

    def _connect_error(self, exc: BaseException) -> Exception:
        if isinstance(exc, ConnectError):
            return exc
        if isinstance(exc, paramiko.BadHostKeyException):
            return HostKeyChanged(
                f"HOST KEY CHANGED for {self.name}: known_hosts ({self.known_hosts_file}) has "
                f"{fingerprint(exc.expected_key)}, the server offered {fingerprint(exc.key)}. "
                "Someone may be intercepting the connection, or the host was reinstalled.",
                host=self.name,
                hint="confirm the new key with the host's owner, then remove the old entry with "
                f"`ssh-keygen -R '{_known_hosts_name(self.hostname, self.port)}' "
                f"-f {self.known_hosts_file}` and connect again",
            )
        if isinstance(exc, paramiko.AuthenticationException):
            tried = ", ".join(self.key_filenames) or "none given"
            agent = "yes" if (self.allow_agent and os.environ.get("SSH_AUTH_SOCK")) else "no"
            return AuthenticationFailed(
                f"{self.name} rejected our credentials ({exc}); key files: {tried}; "
                f"agent: {agent}; default keys in ~/.ssh: {'yes' if self.look_for_keys else 'no'}",
                host=self.name,
                hint="check the user name and IdentityFile, or load the key with `ssh-add`; "
                f"`ssh -v {self.user}@{self.hostname} -p {self.port}` shows what the server accepts",
            )
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return HostUnreachable(
                f"{self.name} did not complete the SSH handshake within {self.connect_timeout:g}s",
                host=self.name,
                hint="the host is overloaded, or the port is not an SSH server",
            )
        if isinstance(exc, paramiko.SSHException) and "No authentication methods available" in str(exc):
            return AuthenticationFailed(
                f"{self.name}: no key or agent to log in with (tried key files: "
                f"{', '.join(self.key_filenames) or 'none'}; default keys in ~/.ssh: "
                f"{'none found' if self.look_for_keys else 'not looked for'}; agent: "
                f"{'none running' if not os.environ.get('SSH_AUTH_SOCK') else 'no keys'})",
                host=self.name,
                hint="give a key with -i FILE (or IdentityFile in ~/.ssh/config), or load one into the agent "
                     "with `ssh-add`",
            )
        if isinstance(exc, (paramiko.SSHException, OSError, EOFError)):
            return ConnectError(
                f"SSH to {self.name} failed: {type(exc).__name__}: {exc}",
                host=self.name,
                hint="check the port is an SSH server; `ssh -v` shows the details",
            )
        return exc if isinstance(exc, Exception) else ConnectError(str(exc), host=self.name)

    # -- helper -------------------------------------------------------------
    def _helper(self):
        with self._lock:
            if self._conn is None or not (self._kept or self.connected):
                return self._restart()
            return self._conn

    def _restart(self):
        """Start a fresh helper: a kept one when a keeper holds this connection, else on our own
        transport (reconnecting it once if it dropped), leaving a keeper behind for the next process."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._kept = False
            path = self._keep_path()
            if path is not None and not self.connected:
                from .kept import attach

                conn = attach(path, self.name)
                if conn is not None:
                    self._conn, self._kept = conn, True
                    return conn
            if not self.connected:
                self._open_transport()
            self._conn = self._start_helper() if self.use_helper else ExecFallback(self)
            if path is not None and not isinstance(self._conn, ExecFallback):
                from .kept import spawn

                spawn(path, self._keep_options(), self.persist)
            return self._conn

    @property
    def kept(self) -> bool:
        """Whether this host talks to a helper that a keeper holds (kit.hosts.kept) rather than its own."""
        return self._kept

    def _keep_options(self) -> dict:
        """The options a keeper connects with: this host's, as given (never a password)."""
        return dict(self._given)

    def _keep_path(self):
        if not self.persist:
            return None
        from .kept import socket_path

        return socket_path(self._keep_options())

    def helper_channel(self):
        """A session channel on the transport running the helper's boot line (HelperConnection.start follows)."""
        chan = self.transport.open_session(timeout=self.connect_timeout)
        chan.settimeout(max(self.connect_timeout, 20.0))
        py = shlex.quote(self.helper_python)
        chan.exec_command(
            f"if command -v {py} >/dev/null 2>&1; then exec {py} -u -c {shlex.quote(BOOT)}; "
            "else echo __SGLKIT_NO_PYTHON__; fi"
        )
        return chan

    def _start_helper(self):
        chan = self.helper_channel()
        conn = HelperConnection(chan.recv, chan.sendall, chan.close, self.name)
        try:
            conn.start(timeout=max(self.connect_timeout, 20.0))
        except NoPython:
            chan.close()
            return ExecFallback(self)
        except (EOFError, TimeoutError, OSError) as exc:
            chan.close()
            raise HostError(
                f"the kit's helper did not start on {self.name} ({type(exc).__name__})",
                host=self.name,
                hint=f"check that `{self.helper_python} -c pass` works there; "
                "pass use_helper=False to run one channel per command",
                cli_hint=f"check that `{self.helper_python} -c pass` works there (--python PY picks another)",
            ) from None
        chan.settimeout(None)
        return conn

    @property
    def python(self) -> str:
        """The interpreter that runs the kit's scripts on this host."""
        return self.helper_python

    @property
    def mode(self) -> str:
        """``helper`` or ``exec`` (one channel per command), once connected."""
        conn = self._helper()
        return "exec" if isinstance(conn, ExecFallback) else "helper"

    # -- forwards -----------------------------------------------------------
    def forward(self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0) -> int:
        """A local port on 127.0.0.1 that reaches ``remote_host:remote_port`` as seen from the host.

        It lives as long as this SSHHost (``sgl-kit forward`` keeps one open until Ctrl-C).
        ``local_port`` asks for a given port here; 0 takes a free one.
        """
        with self._lock:
            key = (remote_host, int(remote_port))
            fwd = self._forwards.get(key)
            if fwd is None or not fwd.alive or (local_port and fwd.local_port != local_port):
                self.connect()
                fwd = _Forward(self, remote_host, int(remote_port), int(local_port))
                self._forwards[key] = fwd
            return fwd.local_port

    def forward_failure(self, remote_port: int, remote_host: str = "127.0.0.1") -> str | None:
        """Why the forward to ``remote_host:remote_port`` dropped its last connection (None: it did not)."""
        fwd = self._forwards.get((remote_host, int(remote_port)))
        return fwd.failure if fwd is not None else None

    # -- close --------------------------------------------------------------
    def _close_transport(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._jump is not None:
            self._jump.close()
            self._jump = None

    def close(self) -> None:
        with self._lock:
            for fwd in self._forwards.values():
                fwd.close()
            self._forwards.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._kept = False
            self._close_transport()


def _local_user() -> str:
    import getpass

    return getpass.getuser()


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [os.path.expanduser(value)] if isinstance(value, str) else [os.path.expanduser(v) for v in value]


# RFC 4254 5.1: why an SSH server refuses to open a direct-tcpip channel, by reason code
_OPEN_FAILED = {1: "the SSH server forbids port forwarding (AllowTcpForwarding)",
                2: "nothing listens on that port there, or the address is unreachable from the host",
                4: "the SSH server is out of resources"}


class _Forward:
    """A local listening socket whose connections tunnel to the remote port."""

    def __init__(self, host: SSHHost, remote_host: str, remote_port: int, local_port: int = 0) -> None:
        self.host = host
        self.remote = (remote_host, remote_port)
        try:
            self.server = socket.create_server(("127.0.0.1", local_port))
        except OSError as exc:
            raise HostError(f"cannot listen on 127.0.0.1:{local_port} for a forward to {host.name}: "
                            f"{exc.strerror or exc}", host=host.name,
                            hint="pick another local port, or leave it out to take a free one") from None
        self.local_port = self.server.getsockname()[1]
        self.alive = True
        self.failure: str | None = None  # why the last connection could not be tunnelled (None: it was)
        threading.Thread(target=self._accept, daemon=True, name=f"kit-forward-{self.local_port}").start()

    def _accept(self) -> None:
        while self.alive:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        chan = None
        for attempt in (1, 2):
            try:
                # connect() opens a new transport when the one the forward was made on went away
                transport = self.host.connect().transport
                chan = transport.open_channel(
                    "direct-tcpip", self.remote, client.getpeername(), timeout=self.host.connect_timeout
                )
                break
            except paramiko.ChannelException as exc:  # the host answered: it could not reach the port
                why = _OPEN_FAILED.get(exc.code, "")
                self.failure = f"{self.host.name} could not connect to {self.remote[0]}:{self.remote[1]}" \
                               f"{': ' + why if why else ''} (the SSH server's answer: {exc.text or exc})"
                break
            except Exception as exc:  # noqa: BLE001 - a dead transport or a timeout: once more on a new one
                self.failure = f"no channel to {self.remote[0]}:{self.remote[1]} through {self.host.name} " \
                               f"(attempt {attempt} of 2: {type(exc).__name__}: {exc})"
        if chan is None:
            client.close()
            return
        self.failure = None
        _pump(client, chan)

    def close(self) -> None:
        self.alive = False
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept() of its thread; close() alone may not
        except OSError:
            pass
        self.server.close()


def _pump(sock: socket.socket, chan) -> None:
    try:
        while True:
            ready, _, _ = select.select([sock, chan], [], [], 30)
            if sock in ready:
                data = sock.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan in ready:
                data = chan.recv(65536)
                if not data:
                    break
                sock.sendall(data)
    except (OSError, EOFError, paramiko.SSHException):  # the connection went away under the forward
        pass
    finally:
        # closing a channel sends a message: on a transport already gone that raises, and there is nothing to close
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            chan.close()
        sock.close()
