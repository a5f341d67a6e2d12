"""Process harness for the interop tests: the vadapt daemon, DPDK testpmd and
QEMU guests, each run in its own process group with bounded waits.

Every process's output is read by a thread into a line list (and copied to a
log file in the test's work directory), so tests wait for a regular
expression with a timeout instead of sleeping. Stopping always signals the
whole process group and escalates to SIGKILL.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("VADAPT_CACHE", Path.home() / ".cache" / "vadapt"))

# Default bound for every wait that has no better-known duration (seconds).
DEFAULT_TIMEOUT = 30.0


class HarnessError(AssertionError):
    """A process did not do what the test waited for (shows its log tail)."""


# --- locating binaries --------------------------------------------------------


def strict() -> bool:
    """Missing prerequisites fail instead of skip (set by scripts/test.sh and CI)."""
    return os.environ.get("VADAPT_INTEROP_STRICT") == "1" or os.environ.get("CI") == "true"


def find_vadapt() -> Path | None:
    """The vadapt binary: $VADAPT_BIN, else the newest of target/{release,debug}."""
    env = os.environ.get("VADAPT_BIN")
    if env:
        return Path(env) if Path(env).is_file() else None
    candidates = [ROOT / "target" / p / "vadapt" for p in ("release", "debug")]
    existing = [c for c in candidates if c.is_file()]
    return max(existing, key=lambda p: p.stat().st_mtime) if existing else None


def help_text(binary: Path, *args: str) -> str:
    """`binary [args] --help` output (stdout + stderr), '' when it cannot run."""
    try:
        r = subprocess.run(
            [str(binary), *args, "--help"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout + r.stderr


def has_subcommand(binary: Path, name: str) -> bool:
    """True when `binary --help` lists subcommand `name`."""
    return re.search(rf"^\s+{re.escape(name)}\b", help_text(binary), re.M) is not None


def guest_files() -> tuple[Path, Path] | None:
    """(kernel, initramfs) built by scripts/guest-image.sh, or None."""
    env = CACHE / "guest" / "current.env"
    if not env.is_file():
        return None
    vals = dict(line.split("=", 1) for line in env.read_text().splitlines() if "=" in line)
    k = Path(vals.get("VADAPT_GUEST_KERNEL", ""))
    i = Path(vals.get("VADAPT_GUEST_INITRD", ""))
    return (k, i) if k.is_file() and i.is_file() else None


def which(name: str) -> str | None:
    return shutil.which(name)


def short_tmpdir(prefix: str) -> Path:
    """A fresh directory under /tmp: unix socket paths must stay < 108 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def ip(*args: str) -> None:
    """`ip ARGS...` (iproute2); a failure fails the test."""
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def net_names(letter: str) -> tuple[str, str, str]:
    """A network namespace's name and a veth pair's (host end, namespace
    end) for one test, told apart by `letter`, the test's pid, and
    VADAPT_TEST_NET_PREFIX (engineers sharing a host keep their names apart
    with it)."""
    tag = os.getpid() % 10000
    pre = os.environ.get("VADAPT_TEST_NET_PREFIX", "")
    return f"{pre}vaw{letter}{tag}", f"{pre}vah{letter}{tag}", f"{pre}vap{letter}{tag}"


def veth_into_namespace(ns: str, host: str, peer: str, cidr: str) -> None:
    """A veth pair whose `peer` end is in `ns` with address `cidr`, both
    ends up."""
    ip("link", "add", host, "type", "veth", "peer", "name", peer)
    ip("link", "set", peer, "netns", ns)
    ip("-n", ns, "addr", "add", cidr, "dev", peer)
    ip("-n", ns, "link", "set", peer, "up")
    ip("link", "set", host, "up")


def poll(cond, timeout: float, step: float = 0.05) -> bool:
    """Whether `cond()` came true within `timeout` seconds, asked every `step`."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(step)


def wait_for(cond, timeout: float, proc: Proc | None, before: str, failed: str) -> None:
    """Wait until `cond()` holds; fail early, saying it `before`, if `proc`
    died meanwhile, or saying `failed` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and not proc.alive():
            raise HarnessError(f"{proc.name} exited before {before}\n{proc.tail()}")
        if time.monotonic() > deadline:
            tail = proc.tail() if proc else ""
            raise HarnessError(f"{failed}\n{tail}")
        time.sleep(0.05)


def wait_path(path: Path, timeout: float, proc: Proc | None = None) -> None:
    """Wait until `path` exists; fail early if `proc` died meanwhile."""
    wait_for(
        path.exists, timeout, proc, f"creating {path}", f"{path} did not appear within {timeout} s"
    )


def wait_answers(binary: Path, control: Path, timeout: float, proc: Proc | None = None) -> None:
    """Wait until the daemon behind `control` answers a request (`vadapt
    stats`): real readiness, not just its socket file; fail early if `proc`
    died meanwhile."""
    wait_path(control, timeout, proc)
    argv = [str(binary), "stats", "--control", str(control), "--json"]
    wait_for(
        lambda: subprocess.run(argv, capture_output=True, timeout=10).returncode == 0,
        timeout,
        proc,
        f"answering on {control}",
        f"{control} did not answer within {timeout} s",
    )


# --- processes --------------------------------------------------------------


class Proc:
    """A child process in its own session, its output collected line by line."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_dir: Path,
        stdin: bool = False,
        env: dict[str, str] | None = None,
    ):
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._log = open(self.log_path, "w", buffering=1)
        self._log.write("$ " + " ".join(argv) + "\n")
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in iter(self.popen.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            self._log.write(line + "\n")
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 40) -> str:
        with self._cond:
            lines = self.lines[-n:]
        return f"--- last {len(lines)} lines of {self.log_path} ---\n" + "\n".join(lines)

    def mark(self) -> int:
        """Index of the next line: pass to wait_for(since=) to skip older output."""
        with self._cond:
            return len(self.lines)

    def wait_for(
        self, pattern: str, timeout: float = DEFAULT_TIMEOUT, since: int = 0
    ) -> tuple[re.Match, int]:
        """First line at or after `since` matching `pattern`: (match, index)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        i = since
        with self._cond:
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i])
                    if m:
                        return m, i
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if self.popen.poll() is not None and not self._reader.is_alive():
                    break
                self._cond.wait(min(left, 0.2))
        state = "running" if self.alive() else f"exited rc={self.popen.returncode}"
        raise HarnessError(
            f"{self.name} ({state}): no line matching {pattern!r} within {timeout} s\n"
            + self.tail()
        )

    def send(self, line: str) -> None:
        assert self.popen.stdin is not None, f"{self.name} has no stdin pipe"
        self.popen.stdin.write((line + "\n").encode())
        self.popen.stdin.flush()

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired as e:
            raise HarnessError(f"{self.name} still running after {timeout} s\n{self.tail()}") from e

    def stop(self, sig: int = signal.SIGTERM, grace: float = 5.0) -> int | None:
        """Signal the process group, then SIGKILL it after `grace` seconds."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # The leader may be gone while children linger: always finish the group.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._reader.join(2)
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        self._log.close()
        return self.popen.returncode


class ProcGroup:
    """Every process a test starts; stop_all() runs in the fixture's finally."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.procs: list[Proc] = []
        # Paths to remove after the processes stopped (e.g. DPDK runtime dirs).
        self.leftovers: list[Path] = []

    def add(self, p: Proc) -> Proc:
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        for path in self.leftovers:
            shutil.rmtree(path, ignore_errors=True)


# --- vadapt -------------------------------------------------------------------


@dataclass
class Vadapt:
    """A `vadapt serve` daemon with its control socket in `workdir`, and its
    state file (run-time ports) in `state_dir` (default: `workdir/NAME.state`,
    never the host's /var/lib/vadapt)."""

    binary: Path
    workdir: Path
    group: ProcGroup
    args: list[str]
    cpus: str | None = "1"
    name: str = "vadapt"
    proc: Proc | None = None
    state_dir: Path | None = None
    control: Path = field(init=False)

    def __post_init__(self) -> None:
        self.control = self.workdir / "control.sock"
        if self.state_dir is None:
            self.state_dir = self.workdir / f"{self.name}.state"

    def start(self, wait_sockets: list[Path] = ()) -> Vadapt:
        argv = [str(self.binary), "serve", "--control", str(self.control)]
        argv += ["--state-dir", str(self.state_dir), *self.args]
        if self.cpus is not None and which("taskset"):
            # Pin the daemon away from the frontend's forwarding core (docs/architecture.md).
            argv = ["taskset", "-c", self.cpus, *argv]
        self.proc = self.group.add(Proc(self.name, argv, self.workdir, env={"RUST_BACKTRACE": "1"}))
        wait_answers(self.binary, self.control, 20, self.proc)
        for s in wait_sockets:
            wait_path(s, 20, self.proc)
        return self

    def ask(self, command: str, *args: str) -> dict:
        """`vadapt COMMAND --json ARGS` against this daemon, parsed."""
        r = subprocess.run(
            [str(self.binary), command, "--control", str(self.control), "--json", *args],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if r.returncode != 0:
            raise HarnessError(f"vadapt {command} failed rc={r.returncode}: {r.stderr}")
        return json.loads(r.stdout)

    def command(self, command: str, *args: str) -> None:
        """`vadapt COMMAND ARGS` against this daemon (a command with no
        JSON answer: add-port, del-port, ...), which must succeed."""
        r = subprocess.run(
            [str(self.binary), command, "--control", str(self.control), *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if r.returncode != 0:
            raise HarnessError(f"vadapt {command} {args} failed rc={r.returncode}: {r.stderr}")

    def stats(self) -> dict:
        return self.ask("stats")

    def wait_stats(self, predicate, timeout: float = 10.0, settle: float = 0.5) -> dict:
        """Poll stats until predicate(stats) holds, or until they stop changing
        for `settle` s (then the caller's asserts show the difference)."""
        deadline = time.monotonic() + timeout
        last, stable_since = None, time.monotonic()
        while True:
            s = self.stats()
            if predicate(s):
                return s
            now = time.monotonic()
            if s != last:
                last, stable_since = s, now
            elif now - stable_since > settle and now > deadline - timeout / 2:
                return s
            if now > deadline:
                return s
            time.sleep(0.1)


def port(stats: dict, name: str) -> dict:
    for p in stats["ports"]:
        if p["name"] == name:
            return p
    raise KeyError(f"no port {name!r} in stats: {[p['name'] for p in stats['ports']]}")


def total(p: dict, key: str) -> int:
    """Sum of a per-queue counter over the port's queues."""
    return sum(q[key] for q in p["queues"])


def dropped(p: dict) -> int:
    return sum(sum(q.get("dropped", {}).values()) for q in p["queues"])


# --- DPDK testpmd -------------------------------------------------------------

TESTPMD = "dpdk-testpmd"


@dataclass
class PortStats:
    """Counters testpmd printed at `stop` (packets)."""

    rx: int
    tx: int
    tx_dropped: int


class Testpmd:
    """dpdk-testpmd in interactive mode (-i), driven over stdin."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        group: ProcGroup,
        name: str,
        eal: list[str],
        app: list[str],
        lcores: str = "0@1,1@0",
    ):
        self.workdir = group.workdir
        prefix = f"{name}-{self.workdir.name}"
        group.leftovers.append(Path("/var/run/dpdk") / prefix)
        argv = [
            # testpmd writes with stdio: line-buffer it, else a pipe holds the
            # `stop` report back until exit.
            "stdbuf",
            "-oL",
            TESTPMD,
            "--lcores",
            lcores,
            "--no-huge",
            "-m",
            "1024",
            "--no-pci",
            f"--file-prefix={prefix}",
            *eal,
            "--",
            "-i",
            "--total-num-mbufs=8192",
            *app,
        ]
        self.proc = group.add(Proc(name, argv, self.workdir, stdin=True))
        self.proc.wait_for(r"testpmd>|Start automatic|Port 0: ", timeout=60)

    def cmd(self, line: str) -> int:
        mark = self.proc.mark()
        self.proc.send(line)
        return mark

    def start(self) -> None:
        mark = self.cmd("start")
        self.proc.wait_for(r"forwarding packets|Packet forwarding already started", since=mark)

    def stop(self) -> PortStats:
        """`stop`: the forward stats since the last `start`."""
        mark = self.cmd("stop")
        _, done = self.proc.wait_for(r"^\s*Done\.", timeout=20, since=mark)
        return parse_testpmd_stats(self.proc.lines[mark:done], self.proc.tail())

    def run_for(self, seconds: float) -> PortStats:
        """`start`, wait `seconds`, `stop`."""
        self.start()
        time.sleep(seconds)
        return self.stop()

    def quit(self, timeout: float = 30) -> int:
        self.proc.send("quit")
        return self.proc.wait_exit(timeout)


def parse_testpmd_stats(lines: list[str], context: str = "") -> PortStats:
    """Last RX-packets / TX-packets lines of a `stop` report: the accumulated
    block when there are several ports, else the one port's block."""
    rx = tx = txd = None
    for line in lines:
        m = re.search(r"RX-packets:\s*(\d+)", line)
        if m:
            rx = int(m.group(1))
        m = re.search(r"TX-packets:\s*(\d+)\s+TX-dropped:\s*(\d+)", line)
        if m:
            tx, txd = int(m.group(1)), int(m.group(2))
    if rx is None or tx is None:
        raise HarnessError("no forward statistics in testpmd output\n" + context)
    return PortStats(rx=rx, tx=tx, tx_dropped=txd)


# --- QEMU guests --------------------------------------------------------------

QEMU = "qemu-system-x86_64"
RESULT = re.compile(r"VADAPT-RESULT (.*)$")


def parse_result(line: str) -> dict[str, str]:
    m = RESULT.search(line)
    assert m, line
    return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)


class Qmp:
    """A minimal QMP client: commands in order, events skipped."""

    def __init__(self, path: Path, timeout: float = 30.0):
        wait_path(path, timeout)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("r")
        json.loads(self.reader.readline())  # the greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name: str, **args) -> object:
        msg = {"execute": name, **({"arguments": args} if args else {})}
        self.sock.sendall((json.dumps(msg) + "\n").encode())
        while True:
            line = self.reader.readline()
            if not line:
                raise HarnessError(f"QMP closed during {name}")
            reply = json.loads(line)
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise HarnessError(f"QMP {name}: {reply['error']}")

    def close(self) -> None:
        self.sock.close()


class Guest:
    """A QEMU TCG guest whose virtio-net device is a vhost-user client of `socket`.

    The guest's /init (tests/interop/guest/init) configures eth0 from
    `ip`, runs `role`, prints `VADAPT-RESULT k=v ...` lines on the serial
    console (our stdout) and powers off.
    """

    MEM = "512M"
    # With a value: `-m MEM,slots=2,maxmem=MAX_MEM`, room for memory hotplug.
    MAX_MEM: str | None = None

    def __init__(
        self,
        group: ProcGroup,
        name: str,
        socket: Path,
        mac: str,
        ip: str,
        role: str,
        params: dict[str, str] | None = None,
        chardev: str = "",
        smp: int = 1,
        extra: list[str] | None = None,
        net_opts: str = "",
        memory: str = "memory-backend-memfd,share=on",
    ):
        """`chardev`: extra options of the vhost-user socket's chardev, e.g.
        `,reconnect=1` (QEMU connects again after the backend went away) or
        `,server=on,wait=off` (QEMU listens; the backend connects). `smp`: vCPUs;
        `extra`: more QEMU arguments (e.g. a QMP socket); `net_opts`: more
        virtio-net-pci properties, e.g. `,guest_tso4=off`; `memory`: the
        guest memory's backend object, less its id and size (it must be
        shared for vhost-user)."""
        files = guest_files()
        assert files, "guest image missing: run scripts/guest-image.sh"
        kernel, initrd = files
        cmdline = ["console=ttyS0", "quiet", "panic=-1", f"vadapt.ip={ip}", f"vadapt.role={role}"]
        cmdline += [f"vadapt.{k}={v}" for k, v in (params or {}).items()]
        argv = [
            QEMU,
            "-nodefaults",
            "-display", "none",
            "-no-reboot",
            "-machine", "pc,accel=tcg",
            "-cpu", "max",
            "-smp", str(smp),
            "-m", self.MEM + (f",slots=2,maxmem={self.MAX_MEM}" if self.MAX_MEM else ""),
            # vhost-user needs guest memory the backend can map.
            "-object", f"{memory},id=mem,size={self.MEM}",
            "-numa", "node,memdev=mem",
            "-chardev", f"socket,id=c0,path={socket}{chardev}",
            "-netdev", "vhost-user,id=n0,chardev=c0",
            # vectors=0: MSI-X off, else QEMU 7.2 under TCG segfaults in
            # msix_set_vector_notifiers (docs/architecture.md, "Facts").
            "-device", f"virtio-net-pci,netdev=n0,vectors=0,mac={mac}{net_opts}",
            "-kernel", str(kernel),
            "-initrd", str(initrd),
            "-serial", "stdio",
            "-append", " ".join(cmdline),
            *(extra or []),
        ]  # fmt: skip
        self.name = name
        self.proc = group.add(Proc(name, argv, group.workdir, stdin=True))

    def result(self, key: str, timeout: float = 60, since: int = 0) -> dict[str, str]:
        """The first VADAPT-RESULT line at or after `since` that has `key`."""
        m, _ = self.proc.wait_for(rf"VADAPT-RESULT .*\b{re.escape(key)}=", timeout, since)
        return parse_result(m.string)

    def booted(self, timeout: float = 90) -> dict[str, str]:
        r = self.result("boot", timeout)
        assert r["boot"] == "ok", self.proc.tail()
        return r

    def shell(self, command: str, timeout: float = 60) -> list[str]:
        """Run one command in the `shell` role; its output lines (rc must be 0)."""
        mark = self.proc.mark()
        self.proc.send(command)
        m, i = self.proc.wait_for(r"VADAPT-DONE rc=(\d+)", timeout, since=mark)
        out = self.proc.lines[mark:i]
        assert m.group(1) == "0", f"{command!r} failed rc={m.group(1)}\n" + self.proc.tail()
        return out

    def shell_result(self, command: str, key: str, timeout: float = 60) -> dict[str, str]:
        for line in self.shell(command, timeout):
            if RESULT.search(line) and f"{key}=" in line:
                return parse_result(line)
        raise HarnessError(f"{command!r} printed no result with {key}=\n" + self.proc.tail())

    def wait_file(self, path: str, key: str, timeout: float) -> dict[str, str]:
        """The result line with `key` that a background command writes to
        `path` in the guest, once it is there."""
        cmd = f"while ! grep -q {key}= {path}; do sleep 0.2; done; cat {path}"
        return self.shell_result(cmd, key, timeout=timeout)

    def poweroff(self, timeout: float = 30) -> int:
        self.proc.send("exit")
        return self.proc.wait_exit(timeout)


# --- what the guests report -----------------------------------------------------


def pattern(n: int) -> tuple[int, str]:
    """(length, md5) of the guests' test stream `seq 1 N` (roles/lib.sh vpattern)."""
    data = "".join(f"{i}\n" for i in range(1, n + 1)).encode()
    return len(data), hashlib.md5(data).hexdigest()


def outage(replies: list[tuple[int, float]], interval_ms: float) -> tuple[int, float]:
    """(pings lost, longest time without a reply in ms) from (seq, rtt_ms)
    pairs. A ping sent while the link is down may wait in the guest's queue
    and be answered late, so a reply's arrival is its send time (seq times
    the interval) plus its round trip, and the outage is the longest
    interval between two arrivals, less the ping interval."""
    got = sorted(dict(replies).items())
    if not got:
        return 0, 0.0
    lost = got[-1][0] - got[0][0] + 1 - len(got)
    arrivals = sorted(seq * interval_ms + rtt for seq, rtt in got)
    gap = max((b - a for a, b in itertools.pairwise(arrivals)), default=interval_ms)
    return lost, max(gap - interval_ms, 0.0)


# --- one-shot commands --------------------------------------------------------


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str


def run_cli(argv: list[str], timeout: float = 10.0) -> CliResult:
    """Run a command that must finish by itself within `timeout` s; a command
    that hangs (e.g. a `serve` that accepted bad input) is killed with its
    process group and reported as a failure."""
    p = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise HarnessError(
            f"{argv} still running after {timeout} s (it should have exited)\n{out}\n{err}"
        ) from e
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return CliResult(p.returncode, out, err)
