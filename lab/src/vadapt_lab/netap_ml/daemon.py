"""The real daemon and synthetic guests, driven from the lab (NetAP-ML's real-host runs).

One ``Testbed`` is a ``vadapt serve`` with ``vms`` VM ports of ``threads``
queue pairs each and a sink port, plus one ``vadapt guest`` per port sending
``threads`` closed-loop streams of ``msg_size``-byte messages to the sink:
one raw frame per message (``--mode stream``, the default, see
``FRAME_HEADERS``) or as a Linux TCP sender with TSO puts them on the ring
(``tcp-stream``, the papers' workload). It
mirrors the benchmarks' set-up (``harness/src/bench/vadapt_proc.rs``):
the daemon and its workers pinned to CPU 1, the guests to CPU 0, the
emulated VM-exit cost left at the guest's default.

Polling at a fixed interval: the daemon's ``fixed-interval`` policy
(``fixed_interval``), the same ``policy/src/fixed.rs`` the simulator's
sweeps run: drain, poll again while work is left, else sleep the interval
with notifications off. (The grid and timeline recorded in docs/netap-ml.md
were measured before the daemon had it, with NetAP searching ``I..=I+1`` µs,
its safety net off, in its place.) Policies are switched at run time with
the control socket's ``set-policy`` request, which takes the parameters.

Counters come from the control socket's ``stats`` request (the JSON of
``vadapt stats --json``); the functions that read them are pure, for tests.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

SINK = "sink0"
SINK_MAC = "02:00:00:00:5e:01"
"""The sink port and its MAC (the benchmarks' ``SINK_MAC``)."""

FRAME_HEADERS = {"stream": 14, "tcp-stream": 14 + 20 + 32}
"""Bytes each frame reaching the sink carries beside the payload, per guest
``--mode``: ``stream`` (one raw frame per message, Ethernet header only) and
``tcp-stream`` (the papers' workload: ``msg_size``-byte writes coalesced
into 64 KiB TSO segments, which the daemon cuts into MSS frames with
Ethernet, IPv4 and TCP-with-timestamps headers).

Raw frames are the default because the recorded grid (``real-grid.csv``)
was measured with them. Before the synthetic guest charged each write its
measured ``send()`` cost, the TCP stream did not depend on the interval:
the one worker core was saturated cutting and copying full 64 KiB segments
(``grid-real --quick --mode tcp-stream``, 2 VMs × 3 threads × 64 B: 36.7,
36.2, 39.3 and 35.7 Gb/s at 50, 1050, 2050 and 3850 µs, worker CPU 99 %,
2026-11-23). With the write cost (guest/README.md) the guests set the rate,
as the papers' netperf senders did, and the same quick run gave 0.551,
0.649, 0.635 and 0.636 Gb/s at host CPU 80, 11.6, 9.4 and 7.7 %
(2026-11-23, rev e2c1b51): the shape NetAP searches. No full grid has been
measured in that mode yet."""

MODES = tuple(FRAME_HEADERS)
"""Guest traffic modes the testbed runs; the first is the default."""

DAEMON_CPU, GUEST_CPU = 1, 0
"""Pinning, as B1/B5: the daemon and its workers on CPU 1, the guests on CPU 0."""


class TestbedError(RuntimeError):
    """The daemon or a guest failed; the message names which and why."""


def fixed_interval(interval_us: int) -> dict:
    """The daemon's fixed-interval policy at ``interval_us``."""
    return {"kind": "fixed-interval", "interval_us": interval_us}


def toml_value(v) -> str:
    """``v`` (bool, int, float, str, list or dict of those) as a TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML form for {v!r}")


def config_text(work: Path, vms: int, threads: int, policy: dict, model: Path | None = None) -> str:
    """The daemon's config file: control socket, CPU, the NetAP-ML forest (``model``;
    default: the shipped one), ``vms`` ports on ``policy``, the sink."""
    lines = [
        f"control = {toml_value(str(work / 'control.sock'))}",
        f"cpus = [{DAEMON_CPU}]",
    ]
    if model is not None:
        lines.append(f"netap_ml_model = {toml_value(str(Path(model).resolve()))}")
    lines.append("")
    for i in range(1, vms + 1):
        lines += [
            "[[vm]]",
            f'name = "vm{i}"',
            f"socket = {toml_value(str(work / f'vm{i}.sock'))}",
            f"queues = {threads}",
            # The synthetic guest's memory is not sealed; it is trusted here.
            'unsealed_memory = "accept"',
            f"policy = {toml_value(policy)}",
            "",
        ]
    lines += ["[[sink]]", f'name = "{SINK}"', f'mac = "{SINK_MAC}"', ""]
    return "\n".join(lines)


def daemon_argv(vadapt: Path, config: Path) -> list[str]:
    """``vadapt serve`` pinned to ``DAEMON_CPU``."""
    return ["taskset", "-c", str(DAEMON_CPU), str(vadapt), "serve", "--config", str(config)]


def guest_argv(
    vadapt: Path, sock: Path, threads: int, msg_size: int, seconds: float, mode: str = MODES[0]
) -> list[str]:
    """One closed-loop guest of ``mode`` to the sink, pinned to ``GUEST_CPU``."""
    if mode not in FRAME_HEADERS:
        raise TestbedError(f"unknown guest mode {mode!r}: use one of {', '.join(MODES)}")
    return [
        "taskset", "-c", str(GUEST_CPU), str(vadapt), "guest", "--socket", str(sock),
        "--threads", str(threads), "--size", str(msg_size), "--rate", "closed",
        "--mode", mode, "--duration", f"{int(seconds * 1000)}ms",
        "--dst-mac", SINK_MAC, "--json",
    ]  # fmt: skip


def request(control: Path, req: dict, timeout: float = 5.0) -> dict:
    """One control-socket request (one JSON line each way); an ``error`` answer raises."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(control))
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    answer = json.loads(buf)
    if answer.get("status") == "error":
        raise TestbedError(f"daemon refused {req}: {answer.get('error')}")
    return answer


# --- reading a stats snapshot (pure) ------------------------------------------


def sink_payload_bytes(stats: dict, mode: str = MODES[0]) -> int:
    """Payload bytes the sink has received: frame bytes less ``mode``'s headers."""
    hdr = FRAME_HEADERS[mode]
    for p in stats["ports"]:
        if p["name"] == SINK:
            return sum(q["rx_bytes"] - hdr * q["rx_packets"] for q in p["queues"])
    raise TestbedError(f"no port {SINK} in the stats")


def worker_totals(stats: dict) -> tuple[float, int]:
    """(CPU seconds, wake-ups) summed over the queue workers."""
    cpu = sum(w["cpu_seconds"] for w in stats["workers"])
    wakeups = sum(sum(w["wakeups"].values()) for w in stats["workers"])
    return cpu, wakeups


def port_intervals(stats: dict) -> dict[str, int]:
    """Polling interval of each VM port, µs."""
    return {p["name"]: p["poll_interval_us"] for p in stats["ports"] if p["kind"] == "vm"}


def vm_ports_connected(stats: dict) -> bool:
    """True when every VM port has its frontend."""
    return all(p["connected"] for p in stats["ports"] if p["kind"] == "vm")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads), s."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of proc(5), counted from the state (field 3) here.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """CPU model, CPU count and kernel: where a real-daemon figure was measured."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} x {model}, Linux {platform.release()}"


# --- processes ------------------------------------------------------------------


class Testbed:
    """A daemon with ``vms`` ports on ``policy``, a sink and one guest per port.

    Use as a context manager: entering starts the daemon, then the guests,
    and waits until every port has its guest; leaving stops the guests
    (SIGTERM: they print their report), then the daemon, and raises if one
    of them had failed. Logs go to ``work``.
    """

    def __init__(
        self,
        vadapt: Path,
        work: Path,
        vms: int,
        threads: int,
        msg_size: int,
        policy: dict,
        guest_s: float,
        mode: str = MODES[0],
        model: Path | None = None,
    ):
        self.vadapt, self.work, self.model = vadapt, work, model
        self.vms, self.threads, self.msg_size, self.mode = vms, threads, msg_size, mode
        self.policy, self.guest_s = policy, guest_s
        self.control = work / "control.sock"
        self.config = work / "daemon.toml"
        self.daemon: subprocess.Popen | None = None
        self.guests: list[subprocess.Popen] = []
        self.ports = [f"vm{i}" for i in range(1, vms + 1)]

    def commands(self) -> str:
        """The command lines, config summarised, for a result's provenance."""
        sock = Path("$WORK/vmN.sock")
        g = guest_argv(Path("vadapt"), sock, self.threads, self.msg_size, self.guest_s, self.mode)
        serve = shlex.join(daemon_argv(Path("vadapt"), Path("daemon.toml")))
        vm = f"[[vm]] queues={self.threads} policy={json.dumps(self.policy)}"
        guests = f"{self.vms} x {shlex.join(g)}"
        model = f"netap_ml_model={self.model}, " if self.model is not None else ""
        return f"{serve} [daemon.toml: {model}{self.vms} x {vm}, [[sink]] {SINK}] & {guests}"

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        # The child keeps its own descriptor of the log; the parent's closes here.
        with open(self.work / f"{name}.log", "w") as log:
            log.write("$ " + shlex.join(argv) + "\n")
            log.flush()
            return subprocess.Popen(
                argv,
                stdout=log if name == "vadapt" else subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                text=True,
            )

    def _log_tail(self, name: str, n: int = 15) -> str:
        try:
            return "\n".join((self.work / f"{name}.log").read_text().splitlines()[-n:])
        except OSError:
            return ""

    def _wait(self, what: str, ready, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.daemon.poll() is not None:
                raise TestbedError(
                    f"vadapt serve exited ({self.daemon.returncode}) before {what}:\n"
                    + self._log_tail("vadapt")
                )
            for i, g in enumerate(self.guests):
                if g.poll() is not None:
                    raise TestbedError(
                        f"guest of vm{i + 1} exited ({g.returncode}) before {what}:\n"
                        + self._log_tail(f"guest-vm{i + 1}")
                    )
            if time.monotonic() > deadline:
                raise TestbedError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    def __enter__(self) -> Testbed:
        self.work.mkdir(parents=True, exist_ok=True)
        for p in self.work.glob("*.sock"):
            p.unlink()
        self.config.write_text(
            config_text(self.work, self.vms, self.threads, self.policy, self.model)
        )
        self.daemon = self._spawn("vadapt", daemon_argv(self.vadapt, self.config))
        try:
            socks = [self.work / f"{p}.sock" for p in self.ports]
            self._wait(
                "its sockets appeared", lambda: all(s.exists() for s in [self.control, *socks])
            )
            for port, sock in zip(self.ports, socks, strict=True):
                argv = guest_argv(
                    self.vadapt, sock, self.threads, self.msg_size, self.guest_s, self.mode
                )
                self.guests.append(self._spawn(f"guest-{port}", argv))
            self._wait("every guest connected", lambda: vm_ports_connected(self.stats()))
        except BaseException:
            self._stop()
            raise
        return self

    def stats(self) -> dict:
        """The daemon's counters (``vadapt stats --json``)."""
        return request(self.control, {"cmd": "stats"})["stats"]

    def set_policy(self, port: str, policy: dict) -> None:
        """Switch ``port`` to ``policy`` (a ``PolicyConfig`` as JSON): a fresh policy."""
        request(self.control, {"cmd": "set-policy", "port": port, "policy": policy})

    def set_policy_all(self, policy: dict) -> None:
        """``set_policy`` on every VM port."""
        for p in self.ports:
            self.set_policy(p, policy)

    def guest_cpu_seconds(self) -> float:
        """CPU of all guest processes so far, s."""
        return sum(process_cpu_seconds(g.pid) for g in self.guests)

    def _stop(self) -> list[str]:
        problems = []
        for i, g in enumerate(self.guests):
            if g.poll() is None:
                g.send_signal(signal.SIGTERM)
            try:
                out, _ = g.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                g.kill()
                out, _ = g.communicate()
                problems.append(f"guest of vm{i + 1} ignored SIGTERM")
            try:
                report = json.loads(out[out.index("{") :]) if "{" in out else {}
            except json.JSONDecodeError:
                report = {}
            if report.get("error"):
                problems.append(f"guest of vm{i + 1} ended early: {report['error']}")
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
                problems.append("vadapt serve ignored SIGTERM")
        return problems

    def __exit__(self, exc_type, exc, tb) -> None:
        problems = self._stop()
        if problems and exc_type is None:
            raise TestbedError("; ".join(problems) + "\n" + self._log_tail("vadapt"))
