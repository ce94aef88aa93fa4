"""Session fixtures that give the tests real parts instead of mocks.

- ``sshd``: a real OpenSSH ``sshd`` on 127.0.0.1 with a throw-away host key and user key.
- ``sshd_factory``: start more of them, e.g. with a given host key or on a given port.
- ``sshd_other_hostkey``: an sshd whose host key differs from what a known_hosts file says.
- ``sglang_source``: the package directory of real sglang source for a pinned version.
- ``_dryrun_workers`` (automatic): warm dry-run workers started by any test live in a
  temporary run directory and are stopped at the end of the session.

``make test`` runs the suite in one process; with pytest-xdist (``-n 2 --dist loadgroup``, which
``make test TEST_WORKERS="-n 2 --dist loadgroup"`` passes) each worker is a session of its own,
so ``pytest_collection_modifyitems`` below keeps the tests that share an expensive fixture on one
worker (an ``xdist_group`` mark, added here so no test has to remember it).
"""

from __future__ import annotations

import inspect
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis
import pytest

# The real sglang servers are session fixtures of this conftest, not of each module that uses them:
# a fixture imported into several test modules would be one instance per module (one server each).
from _real_server_support import SHARED_SERVERS, own_real_server, qwen35_server, real_server  # noqa: F401

# A command line keeps its SSH connection for the next one (kit.hosts.kept). In the suite every
# command connects on its own, so no test depends on what an earlier one left running; the tests
# of keeping (tests/test_ssh_keep.py) turn it on for themselves.
os.environ["SGL_KIT_SSH_PERSIST"] = "0"
# A doctor rule that raises, or reads a fact it did not declare (kit.doctor.facts), fails the test
# instead of leaving a problem line.
os.environ["SGL_KIT_STRICT_RULES"] = "1"

SSHD = "/usr/sbin/sshd"
LOOPBACK = "127.0.0.1"
ALIAS = "kit-test"
STARTUP_TIMEOUT = 15.0
PORT_ATTEMPTS = 5


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _require(tools: dict[str, str | None]) -> None:
    """Skip (or fail, in CI) when an OpenSSH program is missing.

    CI installs openssh-server through `make test`, so a skip there would hide a broken
    install step rather than a missing optional tool.
    """
    missing = [name for name, path in tools.items() if not path]
    if not missing:
        return
    reason = (
        f"OpenSSH is not installed here ({', '.join(missing)} not found). "
        "`make test` installs openssh-server when run as root; otherwise run "
        "`sudo apt-get install openssh-server`."
    )
    if _in_ci():
        pytest.fail(reason + " CI must run the ssh tests.", pytrace=False)
    pytest.skip(reason)


def _sshd_path() -> str | None:
    return SSHD if os.access(SSHD, os.X_OK) else None


def _current_user() -> str:
    # The uid, not $USER: sshd runs as this uid and can only log in as it when not root,
    # and $USER can be stale under sudo or missing under CI.
    return pwd.getpwuid(os.geteuid()).pw_name


def _openssh_version(sshd: str) -> tuple[int, int]:
    proc = subprocess.run([sshd, "-V"], capture_output=True, text=True, timeout=10)
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", proc.stdout + proc.stderr)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _keygen(path: Path, comment: str) -> str:
    """Create an ed25519 key pair without a passphrase; return the public line (type + key)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    return _public_line(path)


def _public_line(private_key: Path) -> str:
    kind, blob, *_ = Path(f"{private_key}.pub").read_text().split()
    return f"{kind} {blob}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _no_spaces(path: Path) -> str:
    # ssh_config quoting differs between OpenSSH and paramiko; avoid needing it at all.
    text = str(path)
    if any(ch.isspace() for ch in text):
        raise RuntimeError(f"test path contains whitespace, which ssh_config cannot carry safely: {text!r}")
    return text


@dataclass(frozen=True)
class SSHServer:
    """A running sshd and the client-side files that reach it as ``kit-test``."""

    host: str
    port: int
    user: str
    key_path: Path
    host_key_pub: str
    known_hosts: Path
    ssh_config: Path
    log_path: Path
    pid: int
    alias: str = ALIAS

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}"

    def known_hosts_line(self, host_key_pub: str | None = None) -> str:
        """The known_hosts entry for this server's address, with its own key or the one given."""
        return f"[{self.host}]:{self.port} {host_key_pub or self.host_key_pub}"

    def ssh_argv(self, *cmd: str) -> list[str]:
        """argv for the OpenSSH client; like ssh itself, the remote shell joins and parses cmd."""
        return ["ssh", "-F", str(self.ssh_config), self.alias, *cmd]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass(frozen=True)
class ChangedHostKey:
    """A server that presents host key B while the stale files still say key A."""

    server: SSHServer
    stale_host_key_pub: str
    stale_known_hosts: Path
    stale_ssh_config: Path
    alias: str = ALIAS

    def ssh_argv(self, *cmd: str) -> list[str]:
        return ["ssh", "-F", str(self.stale_ssh_config), self.alias, *cmd]


@dataclass
class UserKey:
    path: Path
    public: str
    authorized_keys: Path


def _sshd_config(directory: Path, port: int, host_key: Path, authorized_keys: Path, extra: list[str]) -> Path:
    lines = [
        f"Port {port}",
        f"ListenAddress {LOOPBACK}",
        f"HostKey {host_key}",
        f"PidFile {directory / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized_keys}",
        "StrictModes no",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AuthenticationMethods publickey",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "AllowAgentForwarding no",
        # The kit reaches a server's HTTP port through a forward when it is not exposed.
        "AllowTcpForwarding yes",
        "Subsystem sftp internal-sftp",
        # One paramiko connection opens many channels; a test run opens many connections.
        "MaxSessions 64",
        "MaxStartups 64:30:128",
        "MaxAuthTries 10",
        # VERBOSE logs which key authenticated, which helps when an auth test fails.
        "LogLevel VERBOSE",
        *[line for line in extra if not line.startswith("SetEnv ")],
    ]
    # sshd takes the first SetEnv line only: all of them go on one
    setenv = [line.split(None, 1)[1] for line in extra if line.startswith("SetEnv ")]
    lines += [f"SetEnv {' '.join(setenv)}"] if setenv else []
    path = directory / "sshd_config"
    path.write_text("\n".join(lines) + "\n")
    return path


def _client_files(directory: Path, port: int, user: str, key: Path, host_key_pub: str, tag: str):
    known_hosts = directory / f"known_hosts{tag}"
    known_hosts.write_text(f"[{LOOPBACK}]:{port} {host_key_pub}\n")
    ssh_config = directory / f"ssh_config{tag}"
    ssh_config.write_text(
        "\n".join(
            [
                f"Host {ALIAS}",
                f"    HostName {LOOPBACK}",
                f"    Port {port}",
                f"    User {user}",
                f"    IdentityFile {_no_spaces(key)}",
                "    IdentitiesOnly yes",
                f"    UserKnownHostsFile {_no_spaces(known_hosts)}",
                "    GlobalKnownHostsFile /dev/null",
                "    StrictHostKeyChecking yes",
                "    BatchMode yes",
                "    ConnectTimeout 10",
                "    LogLevel ERROR",
            ]
        )
        + "\n"
    )
    return known_hosts, ssh_config


def _wait_for_banner(proc: subprocess.Popen, port: int, log_path: Path) -> str | None:
    """Wait until sshd greets on the port; return its log if it died first, None when ready."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return log_path.read_text(errors="replace")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return None
        except OSError:
            pass
        time.sleep(0.05)
    _stop(proc)
    raise RuntimeError(
        f"sshd did not greet on {LOOPBACK}:{port} within {STARTUP_TIMEOUT:g}s; its log:\n"
        + log_path.read_text(errors="replace")
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    # sshd -D runs in its own session (start_new_session), so the group holds only it.
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@dataclass
class SSHDFactory:
    """Starts real sshd processes that share one user key; stops them all at the end."""

    root: Path
    user_key: UserKey
    sshd: str
    extra_config: list[str]
    procs: list[subprocess.Popen] = field(default_factory=list)
    count: int = 0

    def new_host_key(self, name: str = "host") -> tuple[Path, str]:
        self.count += 1
        path = self.root / f"{name}_{self.count}_ed25519"
        return path, _keygen(path, f"kit-test-{name}")

    def start(self, host_key: Path | None = None, port: int | None = None, extra: tuple[str, ...] = ()) -> SSHServer:
        """Start an sshd with the given host key (a new one by default) on a free or given port; ``extra``
        config lines for this one (e.g. ``SetEnv PIP_NO_INDEX=1``: a host whose pip reaches no index)."""
        if host_key is None:
            host_key, host_key_pub = self.new_host_key()
        else:
            host_key_pub = _public_line(host_key)
        self.count += 1
        directory = self.root / f"sshd{self.count}"
        directory.mkdir()
        attempts = 1 if port is not None else PORT_ATTEMPTS
        for _ in range(attempts):
            chosen = port or _free_port()
            server = self._launch(directory, chosen, host_key, host_key_pub, extra)
            if server is not None:
                return server
        raise RuntimeError(
            f"sshd could not bind {LOOPBACK} after {attempts} attempt(s); last log:\n"
            + (directory / "sshd.log").read_text(errors="replace")
        )

    def _launch(self, directory: Path, port: int, host_key: Path, host_key_pub: str,
                extra: tuple[str, ...] = ()) -> SSHServer | None:
        config = _sshd_config(directory, port, host_key, self.user_key.authorized_keys, self.extra_config + list(extra))
        log_path = directory / "sshd.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [self.sshd, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        died_log = _wait_for_banner(proc, port, log_path)
        if died_log is not None:
            if "Address already in use" in died_log:
                return None
            raise RuntimeError(f"sshd exited with code {proc.returncode} on start; its log:\n{died_log}")
        self.procs.append(proc)
        user = _current_user()
        known_hosts, ssh_config = _client_files(directory, port, user, self.user_key.path, host_key_pub, "")
        return SSHServer(
            host=LOOPBACK,
            port=port,
            user=user,
            key_path=self.user_key.path,
            host_key_pub=host_key_pub,
            known_hosts=known_hosts,
            ssh_config=ssh_config,
            log_path=log_path,
            pid=proc.pid,
        )

    def stop(self, server: SSHServer) -> None:
        for proc in self.procs:
            if proc.pid == server.pid:
                _stop(proc)

    def stop_all(self) -> None:
        for proc in self.procs:
            _stop(proc)


def make_sshd_factory(root: Path) -> SSHDFactory:
    """A factory with a fresh user key under ``root``; benchmarks use it too."""
    if os.geteuid() == 0:
        # Privilege separation needs it; Debian creates it only when the service starts.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    key_path = root / "user_ed25519"
    public = _keygen(key_path, "kit-test-user")
    authorized_keys = root / "authorized_keys"
    authorized_keys.write_text(public + "\n")
    # From 9.8, sshd penalises addresses whose connections fail auth; auth tests do exactly that.
    extra = ["PerSourcePenalties no"] if _openssh_version(SSHD) >= (9, 8) else []
    # The "remote" is this user on this machine, with this HOME: sshd would give the passwd entry's home
    # (/root), so a suite run with another HOME (an empty one, `make test-fresh`) would find another kit
    # cache there than its own, and write to the real one. SetEnv comes after sshd's own HOME.
    extra.append(f"SetEnv HOME={_no_spaces(Path.home())}")
    return SSHDFactory(root=root, user_key=UserKey(key_path, public, authorized_keys), sshd=SSHD,
                       extra_config=extra)


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHDFactory]:
    _require({"sshd (openssh-server)": _sshd_path(), "ssh-keygen": shutil.which("ssh-keygen")})
    factory = make_sshd_factory(tmp_path_factory.mktemp("sshd"))
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def sshd(sshd_factory: SSHDFactory) -> SSHServer:
    """A real sshd on 127.0.0.1 that accepts the throw-away user key as the current user."""
    return sshd_factory.start()


@pytest.fixture(scope="session")
def sshd_other_hostkey(sshd_factory: SSHDFactory) -> ChangedHostKey:
    """An sshd presenting key B, with stale known_hosts/ssh_config files that record key A.

    Models a box that was reinstalled (or an impostor): a client that checks host keys
    must refuse ``stale_known_hosts`` and accept ``server.known_hosts``.
    """
    _, stale_pub = sshd_factory.new_host_key("stale")
    server = sshd_factory.start()
    known_hosts, ssh_config = _client_files(
        server.ssh_config.parent, server.port, server.user, server.key_path, stale_pub, "_stale"
    )
    return ChangedHostKey(
        server=server,
        stale_host_key_pub=stale_pub,
        stale_known_hosts=known_hosts,
        stale_ssh_config=ssh_config,
    )


@pytest.fixture(scope="session")
def sglang_source(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """``sglang_source("0.5.11")`` -> the ``.../site-packages/sglang`` dir of that real release.

    Wheels are cached in the kit cache dir ($SGL_KIT_CACHE or ~/.cache/sglang-investigation-kit),
    so only the first run on a machine needs PyPI. Failures are errors, not skips: a test
    that names real sglang source must not pass without it.
    """
    from kit.source import install_package_source

    root = tmp_path_factory.mktemp("sglang-src")
    installed: dict[str, str] = {}

    def get(version: str = "0.5.11") -> str:
        if version not in installed:
            installed[version] = install_package_source(
                package="sglang", version=version, prefix=str(root / version)
            )
        return installed[version]

    return get


@pytest.fixture(autouse=True)
def _shared_real_servers(request):
    """A test that uses a shared real server (tests/_real_server_support.py) gets it alive, answering and on
    the launch it started with, whatever ran before; and a test that leaves it otherwise fails, after the
    server is restarted for the tests that follow."""
    names = [n for n in SHARED_SERVERS if n in request.fixturenames]
    if not names:
        yield
        return
    import warnings

    servers = {n: request.getfixturevalue(n) for n in names}
    for name, server in servers.items():
        if problem := server.problem():
            warnings.warn(f"the shared {name} was not fit before this test: {problem}; restarted it", stacklevel=1)
            server.restore()
    yield
    left = {}
    for name, server in servers.items():
        if problem := server.problem():
            server.restore()
            left[name] = problem
    if left:
        pytest.fail("this test left " + "; ".join(f"the shared {n}: {p}" for n, p in left.items())
                    + ". It was restarted for the tests after it; a test that changes a server takes its own "
                    "(own_real_server)", pytrace=False)


@pytest.fixture(scope="session")
def sglang_trees(sglang_source) -> Callable[[str], object]:
    """``sglang_trees("0.5.11")`` -> a kit.source.SourceTree of that real release, one per version per session
    (its parsed modules are shared by the tests that read it)."""
    from kit.hosts import LocalHost
    from kit.source import SourceTree

    cache: dict[str, object] = {}

    def get(version: str = "0.5.11"):
        if version not in cache:
            cache[version] = SourceTree.at(LocalHost(), sglang_source(version))
        return cache[version]

    return get


@pytest.fixture(scope="session", autouse=True)
def _dryrun_workers(tmp_path_factory):
    """Tests that reach the dry-run (lab, launch files, doctor) start warm workers: keep them out of the
    user's run directory, and stop them when the session ends."""
    run_dir = tmp_path_factory.mktemp("dryrun-run")
    saved = os.environ.get("SGL_KIT_DRYRUN_RUN_DIR")
    os.environ["SGL_KIT_DRYRUN_RUN_DIR"] = str(run_dir)
    yield run_dir
    from kit.dryrun import stop_workers

    stop_workers()
    if saved is None:
        os.environ.pop("SGL_KIT_DRYRUN_RUN_DIR", None)
    else:
        os.environ["SGL_KIT_DRYRUN_RUN_DIR"] = saved


@pytest.fixture(scope="session")
def env_0511():
    """The dry-run environment of sglang 0.5.11, built once per machine (about 1.2 GB, cached)."""
    from kit import dryrun

    return dryrun.setup("0.5.11").env


@pytest.fixture(scope="module")
def remote_lab(sshd, tmp_path_factory):
    """The lab on the test sshd's host, reached over SSH (the lab's snapshots: it starts in a second)."""
    from _lab_support import free_port

    from kit.lab.control import Lab
    from kit.target import connect

    mp = pytest.MonkeyPatch()
    mp.setenv("SGL_KIT_LAB_DRYRUN", "0")  # passed on to the remote server: snapshots start it in a second
    host = connect(sshd.alias, config_file=str(sshd.ssh_config))
    lab = Lab(host, directory=str(tmp_path_factory.mktemp("remote-lab")))
    status = lab.up(port=free_port())
    try:
        yield status
    finally:
        lab.down()
        host.close()
        mp.undo()


# Property tests: free exploration on a developer's machine, the same examples on every CI run.
# `derandomize` makes Hypothesis derive its examples from each test's own source, so CI's outcome
# never depends on a lucky draw; no example database is read or written there either.
hypothesis.settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.register_profile("dev", print_blob=True)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _in_ci() else "dev"))


# pytest-xdist: tests that share a fixture wider than one test run on the same worker, so the
# fixture is set up once. The session fixtures of this suite named in _PER_WORKER are cheap to have
# once per worker (an sshd, unpacked sources, the dry-run environments under their build locks);
# every other session fixture defined here (the real sglang server: a minute to start, 2.4 GB of
# environment; any server a module adds later) puts its tests in one group, "session-servers", on
# one worker. A module- or class-scoped fixture (a lab, a notebook run, a Prometheus) keeps its
# module's users together. Tests using only function-scoped fixtures are spread freely.
_PER_WORKER = {"sshd_factory", "sshd", "sshd_other_hostkey", "sglang_source", "_dryrun_workers", "env_0511"}
_MODULE_SCOPES = {"module", "class", "package"}
_TESTS = Path(__file__).resolve().parent


def _defined_here(fixturedef) -> bool:
    try:
        return Path(inspect.getsourcefile(fixturedef.func) or "").resolve().is_relative_to(_TESTS)
    except TypeError:
        return False


def _xdist_group(item: pytest.Item) -> str | None:
    info = getattr(item, "_fixtureinfo", None)
    module_scoped = False
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if not defs:
            continue
        scope = defs[-1].scope
        if scope == "session" and name not in _PER_WORKER and _defined_here(defs[-1]):
            return "session-servers"
        module_scoped = module_scoped or scope in _MODULE_SCOPES
    return item.nodeid.split("::")[0] if module_scoped else None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): run on the same pytest-xdist worker as its group")
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        import tempfile

        os.environ[GROUPS_ENV] = tempfile.mkdtemp(prefix="sgl-kit-xdist-groups-")  # the workers inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and os.environ.get(GROUPS_ENV):
        shutil.rmtree(os.environ.pop(GROUPS_ENV), ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist, fill the kit cache's shared downloads once, before the workers start.

    Every worker's first lab fetches the sglang wheel into ``<cache>/wheels`` and the source reads
    unpack it into ``<cache>/trees``; an SSH lab also builds the kit's wheel in ``<cache>/lab-wheels``.
    None of these takes a lock (one process at a time is their normal case), so on a fresh machine
    two workers would write the same files at once. After this they find them done. Failures are
    left to the tests that need the files, which say what went wrong.
    """
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from kit._paths import tree_dir
    from kit._wheels import install_package_source
    from kit.lab.control import SGLANG_VERSION
    from kit.lab.packaging import kit_wheel

    for step in (lambda: install_package_source("sglang", SGLANG_VERSION,
                                                prefix=str(tree_dir("sglang", SGLANG_VERSION))), kit_wheel):
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - the tests that need it report it
            print(f"conftest: could not prepare the kit cache before the workers start: {exc}")


# xdist's own loadgroup passes a group to its scheduler by appending "@group" to the node id, which
# pytest 9.2's structured node ids ignore (pytest-xdist issue 1386): the groups would silently not
# group. So each worker writes its {node id: group} table to GROUPS_ENV's directory, and the
# scheduler below, which starts once every worker has collected, reads it.
GROUPS_ENV = "SGL_KIT_TEST_XDIST_GROUPS"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    table = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := _xdist_group(item)):
            item.add_marker(pytest.mark.xdist_group(group))
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            table[item.nodeid] = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    worker = getattr(config, "workerinput", None)
    if worker is not None and os.environ.get(GROUPS_ENV):
        path = Path(os.environ[GROUPS_ENV]) / f"{worker['workerid']}.json"
        path.write_text(json.dumps(table))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup" or not os.environ.get(GROUPS_ENV):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """Like xdist's loadgroup: a group is one unit of work, every other test a unit of its own."""

        groups: dict[str, str] = {}

        def schedule(self) -> None:
            for path in sorted(Path(os.environ[GROUPS_ENV]).glob("*.json")):
                self.groups.update(json.loads(path.read_text()))
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)
