"""Hostile peers of the core manager and of client-mode ports (issue 24).

Since vSPACE, the daemon (root) trusts three more peers: QEMU's QMP socket,
the guest agent, and in client mode the frontend socket it connects to.
Each test here starts a daemon with the core manager on, one VM port
(`evil`) whose peer is a hostile server from hostile_peers.py (a separate
process), and a second VM port (`vm2`) carrying a synthetic guest's traffic
into a sink. Then it attacks, and asserts what issue 24's table asserts:

- the daemon is alive and `vadapt stats` / `vadapt cores` answer;
- vm2 keeps forwarding (the sink's counter moves during the attack);
- no foreign thread moved: two unrelated `sleep` processes and the
  daemon's own main and control threads keep their `Cpus_allowed_list` and
  `/proc/<tid>/cgroup`, during the attack and, for the sleeps, after the
  daemon exited;
- SIGTERM exits with code 0 within 2 s, and the threads the daemon did
  move (the VM's own vCPU threads) are back where they were;
- no daemon log line starts with the forged timestamp.

Each test adds its own row's assertion (periods per second under a slow
peer, log lines per refused `stop`, `cont` retried, the size of
`guest-set-vcpus`, CPU time under a client-mode peer that hangs up). The
checks of one test are collected and reported together, so that a failure
shows every broken promise at once, not only the first.

The QMP peer is accepted as the VM's QEMU when its command line names the
QMP socket (as QEMU's `-qmp unix:PATH,...` does), or when the VM's
`qemu_pidfile` holds its pid; its thread ids are used only if they are its
own threads (`/proc/<pid>/task/<tid>`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import harness

SINK_MAC = "02:00:00:00:00:02"
PEERS = Path(__file__).with_name("hostile_peers.py")
FORGED_TS = "2099-01-01"
FORGED_TEXT = "forged-by-guest"
STOP_REFUSED = "hostile peer refuses to stop the VM"  # hostile_peers.STOP_REFUSED
SIGTERM_DEADLINE = 2.0  # s
# The manager's period is 100 ms: 10 periods/s. The goal is >= 9,
# measured and recorded in docs/reliability.md; the test asserts 8 so that a
# loaded CI machine's scheduling noise does not fail it, while a stalled
# manager (0-1.7 periods/s before the fix) still does.
MIN_PERIODS_PER_S = 8.0
CLIENT_MODE_CPU = 0.20  # of one core, for the daemon under a client-mode peer
# A control character other than tab, raw in a log line: peer text unescaped.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def managed_cpus() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("the core manager needs 2 CPUs")
    return cpus[:2]


def thread_state(tid: int) -> tuple[str, str] | None:
    """(Cpus_allowed_list, /proc/<tid>/cgroup) of a thread; None once gone."""
    try:
        status = Path(f"/proc/{tid}/status").read_text()
        cgroup = Path(f"/proc/{tid}/cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    allowed = next(
        line.split(":", 1)[1].strip()
        for line in status.splitlines()
        if line.startswith("Cpus_allowed_list")
    )
    return allowed, cgroup.strip()


def allowed(tid: int) -> list[int] | None:
    """A thread's Cpus_allowed_list, expanded; None once gone."""
    state = thread_state(tid)
    if state is None:
        return None
    out: list[int] = []
    for part in state[0].split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


class Checks:
    """Failed expectations of one test, reported together at the end."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, ok: bool, message: str) -> bool:
        if not ok and message not in self.failures:
            self.failures.append(message)
        return ok

    def done(self, context: str = "") -> None:
        if self.failures:
            lines = "\n".join(f"- {f}" for f in self.failures)
            raise AssertionError(f"{len(self.failures)} broken promise(s):\n{lines}\n{context}")


# --- the hostile peer -------------------------------------------------------------


class Peer:
    """A hostile_peers.py server and the events it recorded."""

    def __init__(
        self,
        group: harness.ProcGroup,
        kind: str,
        behaviour: str,
        socket: Path,
        args: list[str] = (),
        socket_on_cmdline: bool = True,
        pin_own: int | None = None,
    ):
        self.socket = socket
        self.record = group.workdir / f"{kind}-peer.jsonl"
        argv = [sys.executable, str(PEERS), kind, "--record", str(self.record)]
        argv += ["--behaviour", behaviour, *args]
        if pin_own is not None:
            argv += ["--pin-own", str(pin_own)]
        env = None
        if socket_on_cmdline:
            argv += ["--socket", str(socket)]
        else:
            argv += ["--socket-from-env"]
            env = {"HOSTILE_SOCKET": str(socket)}
        self.proc = group.add(harness.Proc(f"{kind}-peer", argv, group.workdir, env=env))
        assert harness.poll(lambda: self.event("ready") is not None, 10), self.proc.tail()
        ready = self.event("ready")
        self.pid: int = ready["pid"]
        self.own_tids: list[int] = ready["own_tids"]
        # Where its threads were before any daemon saw them.
        self.own_before = states(self.own_tids)

    def events(self) -> list[dict]:
        try:
            text = self.record.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
        return out

    def event(self, name: str) -> dict | None:
        return next((e for e in self.events() if e["event"] == name), None)

    def commands(self, execute: str | None = None) -> list[dict]:
        return [
            e
            for e in self.events()
            if e["event"] == "command" and (execute is None or e.get("execute") == execute)
        ]

    def replies(self, execute: str) -> list[dict]:
        return [e for e in self.events() if e["event"] == "reply" and e["execute"] == execute]

    def replies_all(self) -> list[dict]:
        return [e for e in self.events() if e["event"] == "reply"]

    def connects(self) -> int:
        return sum(e["event"] == "connect" for e in self.events())


# --- the daemon, its traffic and the bystanders -----------------------------------------


@dataclass
class Rig:
    binary: Path
    procs: harness.ProcGroup
    cpus: list[int]
    daemon: harness.Vadapt | None = None
    guest: harness.Proc | None = None
    # Threads nobody may move: label -> tid, and their state before.
    bystanders: dict[str, int] = field(default_factory=dict)
    before: dict[int, tuple[str, str]] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.procs.workdir

    @property
    def pid(self) -> int:
        return self.daemon.proc.popen.pid

    @classmethod
    def prepare(cls, binary: Path, procs: harness.ProcGroup) -> Rig:
        """Two unrelated `sleep` processes: one pinned to the first managed
        CPU, one allowed on both."""
        rig = cls(binary, procs, managed_cpus())
        for label, cpus in (("sleep-pinned", {rig.cpus[0]}), ("sleep-free", set(rig.cpus))):
            p = procs.add(harness.Proc(label, ["sleep", "600"], procs.workdir))
            os.sched_setaffinity(p.popen.pid, cpus)
            rig.add_bystander(label, p.popen.pid)
        return rig

    def add_bystander(self, label: str, tid: int) -> None:
        state = thread_state(tid)
        assert state is not None, f"{label} ({tid}) is gone"
        self.bystanders[label] = tid
        self.before[tid] = state

    def start(
        self,
        evil: str,
        mode: str = "p",
        apply: str = "affinity",
        cgroup: Path | None = None,
        traffic: bool = True,
    ) -> Rig:
        """The daemon with ports `evil` (`--vm name=evil,` + `evil`) and vm2,
        a sink, the core manager on the managed CPUs; then vm2's traffic."""
        vm2 = self.dir / "vm2.sock"
        args = [
            "--vm", f"name=evil,{evil}",
            "--vm", f"name=vm2,socket={vm2}",
            "--sink", f"sink0,mac={SINK_MAC}",
            "--policy", "interrupt",
        ]  # fmt: skip
        if apply == "affinity":
            args += ["--cores-cpus", ",".join(map(str, self.cpus)), "--cores-mode", mode]
        else:
            conf = self.dir / "vadapt.toml"
            conf.write_text(
                "[cores]\n"
                f'mode = "{mode}"\n'
                f"cpus = [{', '.join(map(str, self.cpus))}]\n"
                f'apply = "{apply}"\n' + (f'cgroup = "{cgroup}"\n' if cgroup else "")
            )
            args += ["--config", str(conf)]
        self.daemon = harness.Vadapt(self.binary, self.dir, self.procs, args, cpus=None)
        self.daemon.start([vm2])
        self.add_bystander("vadapt main thread", self.pid)
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            comm = (task / "comm").read_text().strip()
            if "control" in comm:
                self.add_bystander(
                    f"vadapt {comm} thread".replace("vadapt vadapt-", "vadapt "), int(task.name)
                )
        assert len(self.bystanders) >= 4, f"no control thread among {self.threads()}"
        if traffic:
            self.start_traffic()
        return self

    def threads(self) -> dict[int, str]:
        out = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                out[int(task.name)] = (task / "comm").read_text().strip()
            except OSError:
                pass
        return out

    def start_traffic(self) -> None:
        argv = [
            str(self.binary), "guest",
            "--socket", str(self.dir / "vm2.sock"),
            "--rate", "2k", "--pacing", "burst",
            "--duration", "120s",
            "--dst-mac", SINK_MAC,
        ]  # fmt: skip
        self.guest = self.procs.add(harness.Proc("guest", argv, self.dir))

    def peer(self, kind: str, behaviour: str, sock: Path, args=(), **kw) -> Peer:
        """A hostile peer; a QMP peer's own vCPU threads start pinned to the
        first managed CPU."""
        if kind == "qmp":
            kw.setdefault("pin_own", self.cpus[0])
        return Peer(self.procs, kind, behaviour, sock, list(args), **kw)

    def placed(self, tids: list[int]) -> bool:
        """Each of `tids` is a vCPU thread of `evil` in `vadapt cores` and
        allowed exactly the vCPU group's CPUs."""
        c = self.cores()
        vm = next((v for v in c["vms"] if v["name"] == "evil"), {})
        want = c["sets"]["vcpu"]
        return all(t in vm.get("vcpu_tids", []) and allowed(t) == want for t in tids)

    def cores(self) -> dict:
        return self.daemon.ask("cores")

    def evil(self) -> dict:
        """`evil`'s entry in `vadapt cores` ({} before the first period)."""
        return next((v for v in self.cores()["vms"] if v["name"] == "evil"), {})

    def sink_rx(self) -> int:
        return harness.total(harness.port(self.daemon.stats(), "sink0"), "rx_packets")

    def log(self) -> list[str]:
        return list(self.daemon.proc.lines)

    # --- the table's assertions ---

    def alive_and_forwarding(self, c: Checks) -> None:
        """The daemon answers, and vm2's frames reach the sink (bounded wait)."""
        if not c.check(self.daemon.proc.alive(), "the daemon died\n" + self.daemon.proc.tail()):
            return
        try:
            self.cores()
            rx0 = self.sink_rx()
            moved = harness.poll(lambda: self.sink_rx() > rx0, 5.0, step=0.25)
            c.check(moved, f"vm2 stopped forwarding: the sink's rx_packets stayed at {rx0}")
        except (harness.HarnessError, json.JSONDecodeError, subprocess.TimeoutExpired) as e:
            c.failures.append(f"the daemon does not answer stats/cores: {e}")

    def bystanders_unchanged(self, c: Checks, when: str, only_alive: bool = False) -> None:
        moved = []
        for label, tid in self.bystanders.items():
            now = thread_state(tid)
            if now is None:
                if not only_alive:
                    moved.append(f"{label} ({tid}) is gone")
                continue
            if now != self.before[tid]:
                moved.append(f"{label} ({tid}): {describe(self.before[tid])} -> {describe(now)}")
        c.check(not moved, f"foreign threads moved {when}: " + "; ".join(moved))

    def sigterm(self, c: Checks, restored: dict[int, tuple[str, str]] | None = None) -> None:
        """SIGTERM: exit 0 within 2 s; then the sleeps untouched and the
        threads the daemon moved (`restored`: tid -> state before) back."""
        popen = self.daemon.proc.popen
        t0 = time.monotonic()
        os.kill(popen.pid, signal.SIGTERM)
        try:
            rc = popen.wait(SIGTERM_DEADLINE)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - t0
        if rc is None:
            try:
                rc = popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()
                rc = popen.wait(5)
            took = time.monotonic() - t0
        said = [x for x in self.log()[-8:] if re.search(r"ERROR|shutdown|stopp", x)]
        c.check(
            rc == 0 and took <= SIGTERM_DEADLINE,
            f"SIGTERM: exit code {rc} after {took:.2f} s (want 0 within {SIGTERM_DEADLINE} s); "
            f"the daemon said: {said}",
        )
        # Exited: its threads are gone, the sleeps must be as they were.
        self.bystanders_unchanged(c, "after the daemon exited", only_alive=True)
        back = []
        for tid, was in (restored or {}).items():
            now = thread_state(tid)
            if now is not None and now != was:
                back.append(f"{tid}: {describe(was)} before, {describe(now)} after exit")
        c.check(not back, "threads the daemon moved are not back after exit: " + "; ".join(back))
        self.no_forged_lines(c)

    def no_forged_lines(self, c: Checks, require: bool = False) -> None:
        """No log line starts with the forged timestamp, and the forged text
        appears only escaped (`\\n` before it) inside the daemon's line."""
        lines = self.log()
        forged = [x for x in lines if x.startswith(FORGED_TS)]
        c.check(not forged, f"forged log lines: {forged[:3]}")
        carriers = [x for x in lines if FORGED_TEXT in x]
        unescaped = [x for x in carriers if "\\n" + FORGED_TS not in x]
        c.check(not unescaped, f"peer text not escaped in the log: {unescaped[:3]}")
        raw = [x for x in lines if RAW_CONTROL.search(x)]
        c.check(not raw, f"raw control characters in log lines: {[repr(x) for x in raw[:3]]}")
        if require:
            c.check(
                bool(carriers),
                "the peer's text never reached the log (expected it escaped in a WARN line); "
                "the attack was not exercised",
            )


def describe(state: tuple[str, str] | None) -> str:
    if state is None:
        return "gone"
    cpus, cgroup = state
    cpuset = next((line for line in cgroup.splitlines() if "cpuset" in line), "")
    return f"cpus {cpus}" + (f" cgroup {cpuset.split(':', 2)[2]}" if cpuset else "")


def states(tids) -> dict[int, tuple[str, str]]:
    return {t: thread_state(t) for t in tids}


def foreign_counter(cores: dict) -> int | None:
    """The `vadapt cores` counter of refused foreign tids, if it has one (a
    key with `foreign` in its name, top level or per VM)."""
    found = None
    for obj in [cores, *cores.get("vms", [])]:
        for k, v in obj.items():
            if "foreign" in k and isinstance(v, int):
                found = (found or 0) + v
    return found


# --- cpusets (cgroup v1) ---------------------------------------------------------


def cpuset_v1_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields = post.split()
        if len(fields) >= 3 and fields[0] == "cgroup" and "cpuset" in fields[2].split(","):
            return Path(pre.split()[4])
    return None


@pytest.fixture
def cpuset_parent(procs):
    """A fresh v1 cpuset parent for the daemon's groups; afterwards (the
    processes stopped first) every task left in it goes back to the root,
    and it is removed."""
    root = cpuset_v1_mount()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup v1 cpuset hierarchy (cpuset placement)")
    parent = root / f"vadapt-it-{uuid.uuid4().hex[:8]}"
    parent.mkdir()
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))[:2]))
    (parent / "cpuset.cpus").write_text(cpus)
    (parent / "cpuset.mems").write_text((root / "cpuset.mems").read_text().strip())
    try:
        yield parent
    finally:
        procs.stop_all()
        for _ in range(20):
            children = [d for d in parent.iterdir() if d.is_dir()] if parent.exists() else []
            for d in [*children, parent]:
                if not d.is_dir():
                    continue
                for tid in (d / "tasks").read_text().split() if (d / "tasks").exists() else []:
                    try:
                        (root / "tasks").write_text(tid)
                    except OSError:
                        pass
                try:
                    d.rmdir()
                except OSError:
                    pass
            if not parent.exists():
                break
            time.sleep(0.1)


# --- QMP: whose threads ------------------------------------------------------------


@pytest.mark.parametrize("apply", ["affinity", "cpuset"])
def test_qmp_naming_foreign_threads_moves_none_of_them(vadapt_bin, procs, request, apply):
    """query-cpus-fast names two `sleep` processes, the daemon's main and
    control threads, and one thread of the QMP peer itself: only the
    peer's own thread is placed (and put back where it was at exit); the
    four others keep their affinity and cgroup during the run and after
    exit; the refusal is a rate-limited WARN naming the VM and the tid."""
    cgroup = request.getfixturevalue("cpuset_parent") if apply == "cpuset" else None
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    qmp = rig.dir / "evil.qmp"
    # The daemon first (the peer names its threads); its first lookup finds
    # no socket and is retried a second later.
    rig.start(f"socket={rig.dir / 'evil.sock'},qmp={qmp}", apply=apply, cgroup=cgroup)
    foreign = list(rig.bystanders.values())
    peer = rig.peer("qmp", "foreign", qmp, ["--tids", ",".join(map(str, foreign))])
    # Positive control: the VM's own vCPU thread is placed.
    c.check(
        harness.poll(lambda: rig.placed(peer.own_tids), 8, step=0.1),
        f"the QMP peer's own vCPU thread {peer.own_tids} was never placed "
        f"(commands seen: {[e['execute'] for e in peer.commands()]}); the test proves nothing",
    )
    time.sleep(0.5)  # a few periods more
    rig.bystanders_unchanged(c, "while QMP names them")
    vm = rig.evil()
    named = sorted(set(vm.get("vcpu_tids", [])) & set(foreign))
    c.check(not named, f"`vadapt cores` lists foreign tids {named} as the VM's vCPU threads: {vm}")
    counted = foreign_counter(rig.cores())
    if counted is not None:
        c.check(counted >= 1, f"refused foreign tids not counted in `vadapt cores`: {counted}")
    warned = [
        x
        for x in rig.log()
        if "WARN" in x and "evil" in x and any(re.search(rf"\b{t}\b", x) for t in foreign)
    ]
    c.check(bool(warned), f"no WARN naming the VM and a refused tid (foreign: {foreign})")
    c.check(len(warned) <= 2 * len(foreign), f"refusals not rate-limited: {len(warned)} WARNs")
    rig.alive_and_forwarding(c)
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


def test_qmp_peer_that_is_not_the_vms_qemu_is_refused(vadapt_bin, procs):
    """A process serving the QMP socket without naming it on its command
    line (and no `qemu_pidfile`) is not the VM's QEMU: none of the threads
    it names, even its own, is placed."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    qmp = rig.dir / "evil.qmp"
    peer = rig.peer("qmp", "own", qmp, socket_on_cmdline=False)
    own = peer.own_before
    rig.start(f"socket={rig.dir / 'evil.sock'},qmp={qmp}")
    c.check(
        harness.poll(lambda: peer.connects() > 0, 5), "the daemon never connected to the QMP socket"
    )
    time.sleep(1.5)
    moved = {t: s for t, s in states(own).items() if s != own[t]}
    c.check(
        not moved,
        "threads of a QMP peer that is not the VM's QEMU were placed: "
        + "; ".join(f"{t}: {describe(own[t])} -> {describe(s)}" for t, s in moved.items()),
    )
    c.check(
        not set(rig.evil().get("vcpu_tids", [])) & set(peer.own_tids),
        f"`vadapt cores` lists the impostor's threads: {rig.evil()}",
    )
    rig.bystanders_unchanged(c, "while an impostor serves QMP")
    rig.alive_and_forwarding(c)
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


def test_qmp_peer_named_by_qemu_pidfile_is_accepted(vadapt_bin, procs):
    """`qemu_pidfile=PATH` in --vm names the VM's QEMU when its command line
    does not name the socket (libvirt passes QEMU the monitor as a file
    descriptor): its own thread is placed, the `sleep` threads it also
    names are not."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    qmp, pidfile = rig.dir / "evil.qmp", rig.dir / "evil.pid"
    foreign = list(rig.bystanders.values())
    tids = ["--tids", ",".join(map(str, foreign))]
    peer = rig.peer("qmp", "foreign", qmp, tids, socket_on_cmdline=False)
    pidfile.write_text(f"{peer.pid}\n")
    rig.start(f"socket={rig.dir / 'evil.sock'},qmp={qmp},qemu_pidfile={pidfile}")
    c.check(
        harness.poll(lambda: rig.placed(peer.own_tids), 6, step=0.1),
        f"the pidfile's QEMU thread {peer.own_tids} was never placed",
    )
    time.sleep(0.3)
    rig.bystanders_unchanged(c, "while QMP names them")
    rig.alive_and_forwarding(c)
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


# --- forged log lines -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,behaviour",
    [("qmp", "forge"), ("qga", "forge-desc"), ("qga", "forge-errdata")],
    ids=["qmp-desc", "qga-desc", "qga-err-data"],
)
def test_peer_text_cannot_forge_log_lines(vadapt_bin, procs, kind, behaviour):
    """A newline (and an escape sequence) in a QMP error `desc`, a guest
    agent error `desc` or a guest-exec `err-data` stays inside the daemon's
    own line, escaped: no line of the log starts with the forged timestamp."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    sock = rig.dir / f"evil.{kind}"
    peer = rig.peer(kind, behaviour, sock)
    rig.start(f"socket={rig.dir / 'evil.sock'},{kind}={sock}")
    c.check(harness.poll(lambda: peer.connects() > 0, 5), f"the daemon never connected to {kind}")
    # The refusal is logged (one WARN) within a period or two of the reply.
    harness.poll(lambda: any(FORGED_TEXT in x for x in rig.log()), 4, step=0.1)
    time.sleep(0.2)
    rig.no_forged_lines(c, require=True)
    rig.bystanders_unchanged(c, "during the attack")
    rig.alive_and_forwarding(c)
    rig.sigterm(c)
    c.done(rig.daemon.proc.tail(15))


def test_frontend_and_control_text_cannot_forge_log_lines(vadapt_bin, procs):
    """A client-mode frontend that sends a forged log line instead of
    vhost-user, and control-socket requests that carry one (in a port name,
    a policy name, and as a line that is no JSON): no line of the log
    starts with the forged timestamp, and no raw control character gets in.
    (Neither peer's text is logged today; this keeps it so.)"""
    import socket as sock_mod

    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    sock = rig.dir / "evil.sock"
    peer = rig.peer("frontend", "forge", sock)
    rig.start(f"socket={sock},mode=client")
    c.check(
        harness.poll(lambda: peer.connects() > 0, 5), "the daemon never connected to the frontend"
    )
    forged = "\x1b[1A\r\n2099-01-01T00:00:00.000000Z ERROR forged-by-guest: pwned\n"
    requests = [
        json.dumps({"cmd": "set-policy", "port": "vm2" + forged, "policy": "interrupt"}),
        json.dumps({"cmd": "set-policy", "port": "vm2", "policy": "netap" + forged}),
        json.dumps({"cmd": "retune", "port": forged, "param": forged, "value": 1}),
        "not json" + forged,
    ]
    for line in requests:
        with sock_mod.socket(sock_mod.AF_UNIX, sock_mod.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(rig.daemon.control))
            s.sendall(line.encode() + b"\n")
            try:
                s.recv(65536)
            except OSError:
                pass
    time.sleep(0.5)
    rig.no_forged_lines(c)
    rig.alive_and_forwarding(c)
    rig.sigterm(c)
    c.done(rig.daemon.proc.tail(15))


# --- slow and silent peers ------------------------------------------------------------------


def periods_per_second(rig: Rig, seconds: float) -> tuple[float, list[tuple[float, int]]]:
    """`vadapt cores` periods per second, polled over `seconds`."""
    samples = []
    end = time.monotonic() + seconds
    while True:
        samples.append((time.monotonic(), rig.cores()["periods"]))
        if samples[-1][0] >= end:
            break
        time.sleep(0.25)
    (t0, p0), (t1, p1) = samples[0], samples[-1]
    return (p1 - p0) / (t1 - t0), samples


@pytest.mark.parametrize(
    "kind,behaviour,delay",
    [("qmp", "slow", 1.8), ("qga", "slow", 0.45), ("qga", "slow", 2.0)],
    ids=["qmp-1.8s-late", "qga-0.45s-late", "qga-2s-late"],
)
def test_slow_peer_does_not_stall_the_manager(vadapt_bin, procs, kind, behaviour, delay):
    """A QMP peer answering every message 1.8 s late, or a guest agent
    0.45 s or 2 s late, delays only its own VM: the manager keeps >= 9
    periods/s over 3.5 s from start (the peer is asked in the first
    period)."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    sock = rig.dir / f"evil.{kind}"
    peer = rig.peer(kind, behaviour, sock, ["--delay", str(delay)])
    rig.start(f"socket={rig.dir / 'evil.sock'},{kind}={sock}")
    rate, samples = periods_per_second(rig, 3.5)
    print(f"{kind} {delay} s late: {rate:.2f} periods/s over 3.5 s")
    c.check(
        rate >= MIN_PERIODS_PER_S,
        f"the manager ran {rate:.1f} periods/s while a {kind} peer answers {delay} s late "
        f"(want >= {MIN_PERIODS_PER_S}); periods polled: {[p for _, p in samples]}",
    )
    c.check(peer.connects() > 0, f"the daemon never connected to the {kind} peer")
    rig.bystanders_unchanged(c, "during the attack")
    rig.alive_and_forwarding(c)
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


@pytest.mark.parametrize(
    "kind,behaviour,delay",
    [("qmp", "never", 0.0), ("qmp", "slow", 1.8), ("qga", "slow", 0.45)],
    ids=["qmp-never-answers", "qmp-1.8s-late", "qga-0.45s-late"],
)
def test_sigterm_while_a_peer_does_not_answer(vadapt_bin, procs, kind, behaviour, delay):
    """SIGTERM while the manager waits on a QMP peer that never answers, or
    on a slow QMP peer or guest agent, still exits 0 within 2 s, and the
    peer's thread the daemon placed (if any) is back where it was."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    sock = rig.dir / f"evil.{kind}"
    args = ["--delay", str(delay)]
    if kind == "qmp":
        # The daemon first: vm2 forwards, then the peer's socket appears and
        # the next lookup (a second after the failed one) waits on it.
        rig.start(f"socket={rig.dir / 'evil.sock'},{kind}={sock}")
        rig.alive_and_forwarding(c)
        peer = rig.peer(kind, behaviour, sock, args)
        waiting = harness.poll(lambda: peer.connects() > 0, 5, step=0.01)
    else:
        # The agent is asked in the first period; its seven slow answers
        # (two connections) take about 3 s.
        peer = rig.peer(kind, behaviour, sock, args)
        rig.start(f"socket={rig.dir / 'evil.sock'},{kind}={sock}")
        rig.alive_and_forwarding(c)
        waiting = harness.poll(lambda: len(peer.commands()) > len(peer.replies_all()), 5, step=0.01)
    c.check(waiting, f"the daemon was not waiting on the {kind} peer: {peer.events()[-3:]}")
    time.sleep(0.05)
    rig.bystanders_unchanged(c, "during the attack")
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


# --- vSPACE-R: stop and cont --------------------------------------------------------------


def test_refused_stop_is_retried_with_backoff_and_logged_once(vadapt_bin, procs):
    """Mode R on 2 CPUs leaves no core to a best-effort VM, so it is paused
    (QMP `stop`) every period until it is; a peer refusing `stop` gets it
    retried with backoff, and its error is logged at most twice over 5 s
    (the unfixed daemon: a connection and a WARN every period, 10/s)."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    qmp = rig.dir / "evil.qmp"
    peer = rig.peer("qmp", "refuse-stop", qmp)
    rig.start(f"socket={rig.dir / 'evil.sock'},qmp={qmp},role=be", mode="r")
    c.check(harness.poll(lambda: peer.commands("stop"), 5), "mode R never sent `stop` to the BE VM")
    time.sleep(5)
    stops = len(peer.commands("stop"))
    logged = [x for x in rig.log() if STOP_REFUSED in x]
    c.check(
        len(logged) <= 2,
        f"the refused `stop` was logged {len(logged)} times in about 5 s (want <= 2): {logged[:2]}",
    )
    c.check(stops >= 2, f"a refused `stop` was not retried ({stops} sent)")
    c.check(
        stops <= 25,
        f"`stop` was sent {stops} times in about 5 s: retried every period, without backoff",
    )
    rig.bystanders_unchanged(c, "during the attack")
    rig.alive_and_forwarding(c)
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


def test_cont_refused_once_is_retried_until_it_succeeds(vadapt_bin, procs):
    """A best-effort VM paused in mode R is resumed when the mode changes
    to P; the peer refuses the first `cont`, and the daemon retries until
    one succeeds (the unfixed daemon leaves the VM paused)."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    qmp = rig.dir / "evil.qmp"
    peer = rig.peer("qmp", "refuse-cont", qmp)
    rig.start(f"socket={rig.dir / 'evil.sock'},qmp={qmp},role=be", mode="r")
    paused = harness.poll(lambda: rig.evil().get("paused"), 6, step=0.1)
    if not paused:
        pytest.fail(
            f"mode R never paused the BE VM (commands: {[e['execute'] for e in peer.commands()]})"
            "\n" + rig.daemon.proc.tail(15),
            pytrace=False,
        )
    subprocess.run(
        [str(rig.binary), "set-cores", "--mode", "p", "--control", str(rig.daemon.control)],
        check=True,
        capture_output=True,
        timeout=10,
    )
    resumed = harness.poll(lambda: any(r["ok"] for r in peer.replies("cont")), 5, step=0.1)
    conts = peer.replies("cont")
    c.check(
        resumed,
        f"`cont` refused once was not retried: {len(conts)} sent, "
        f"{sum(r['ok'] for r in conts)} accepted; the VM stays paused",
    )
    if resumed:
        c.check(
            harness.poll(lambda: rig.evil().get("paused") is False, 2, step=0.1),
            f"`vadapt cores` still says paused: {rig.evil()}",
        )
    rig.bystanders_unchanged(c, "during the attack")
    rig.alive_and_forwarding(c)
    rig.sigterm(c, restored=peer.own_before)
    c.done(rig.daemon.proc.tail(15))


# --- guest agent: vCPU lists ------------------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour,entries",
    [("many", 15000), ("dups", 5000)],
    ids=["15000-vcpus", "5000-duplicates"],
)
def test_guest_vcpu_list_is_capped_and_deduplicated(vadapt_bin, procs, behaviour, entries):
    """An agent listing 15,000 vCPUs, or one vCPU 5,000 times: the
    guest-set-vcpus the daemon sends back (if any) has at most 1,024
    entries (the cap: the VM's configured vCPU count, or 1,024) and no
    duplicate logical id."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    qga = rig.dir / "evil.qga"
    peer = rig.peer("qga", behaviour, qga, ["--vcpus", str(entries)])
    rig.start(f"socket={rig.dir / 'evil.sock'},qga={qga}")
    asked = harness.poll(lambda: peer.commands("guest-get-vcpus"), 5)
    c.check(asked, "the daemon never asked the agent for its vCPUs: the attack was not exercised")
    # Its answer is read and any guest-set-vcpus follows at once.
    harness.poll(lambda: peer.commands("guest-set-vcpus"), 1.5)
    for req in peer.commands("guest-set-vcpus"):
        c.check(
            req["entries"] <= 1024 and req["duplicates"] == 0,
            f"guest-set-vcpus with {req['entries']} entries ({req['duplicates']} duplicates, "
            f"{req['bytes']} bytes) sent back to an agent listing {entries}",
        )
    rig.bystanders_unchanged(c, "during the attack")
    rig.alive_and_forwarding(c)
    rig.sigterm(c)
    c.done(rig.daemon.proc.tail(15))


# --- client mode --------------------------------------------------------------------------------


def cpu_ticks(pid: int, tid: int | None = None) -> int:
    """utime + stime of a process (or one of its threads), clock ticks."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.parametrize("behaviour", ["accept-close", "listen-only", "stale"])
def test_client_mode_peer_that_hangs_up_costs_no_cpu(vadapt_bin, procs, behaviour):
    """`mode=client` against a frontend that accepts and closes at once,
    one that listens and never accepts, and a socket file nobody listens
    on: the daemon reconnects with backoff and uses under 20 % of a core
    (its traffic port's worker aside) over 3 s."""
    c = Checks()
    rig = Rig.prepare(vadapt_bin, procs)
    sock = rig.dir / "evil.sock"
    peer = rig.peer("frontend", behaviour, sock)
    rig.start(f"socket={sock},mode=client")
    rig.alive_and_forwarding(c)
    workers = [t for t, comm in rig.threads().items() if comm.endswith("-vm2")]
    hz = os.sysconf("SC_CLK_TCK")
    t0, p0 = time.monotonic(), cpu_ticks(rig.pid)
    w0 = sum(cpu_ticks(rig.pid, t) for t in workers)
    n0 = peer.connects()
    time.sleep(3)
    took = time.monotonic() - t0
    whole = (cpu_ticks(rig.pid) - p0) / hz / took
    worker = (sum(cpu_ticks(rig.pid, t) for t in workers) - w0) / hz / took
    c.check(
        whole - worker < CLIENT_MODE_CPU,
        f"the daemon used {whole - worker:.0%} of a core ({whole:.0%} with vm2's worker) "
        f"over {took:.1f} s against a `{behaviour}` frontend: a reconnect spin",
    )
    if behaviour == "accept-close":
        n = peer.connects() - n0
        c.check(n < 100, f"{n} connections in {took:.1f} s: reconnecting without backoff")
    rig.bystanders_unchanged(c, "during the attack")
    rig.alive_and_forwarding(c)
    rig.sigterm(c)
    c.done(rig.daemon.proc.tail(15))
