"""The systemd unit's privileges are enough for everything vadapt does
(issue 40, item 1), shown without systemd as PID 1: `vadapt serve` runs
under exactly the capability bounding set and memory-lock limit that
packaging/vadapt.service gives it (read from the unit, so the test and the
unit cannot drift apart), as systemd would start it for root:
`prlimit --memlock=N setpriv --bounding-set -all,+CAPS --inh-caps=-all`.

Under them, with the unit's other settings played by the test:
- an AF_XDP uplink on a veth pair whose far end is in a namespace made
  here: frames from the wire reach the switch, and a VM port's frames
  reach the wire;
- a VM port, with the synthetic guest as its frontend;
- the vSPACE core manager (`[cores]`), which must run its periods;
- the watchdog (`WatchdogSec=`): WATCHDOG=1 keeps arriving on a fake
  NOTIFY_SOCKET with WATCHDOG_USEC set;
- `ExecReload`: `vadapt reload --config FILE` finds the control socket in
  the file and applies a new port;
- `RuntimeDirectoryPreserve=`: after kill -9, a daemon that finds the
  records in its RUNTIME_DIRECTORY takes its uplink back; one that finds
  the directory emptied refuses the program left on the NIC, which is why
  the unit keeps it;
- `SystemCallFilter=`: every system call the daemon made (strace -c)
  is outside the groups the unit denies (`systemd-analyze syscall-filter`).

Where this machine's hard limit on locked memory is below the unit's
LimitMEMLOCK (no CAP_SYS_RESOURCE to raise it), the test runs under the
hard limit: a lower limit is stricter, so what works under it works under
the unit's. Needs root, `ip netns`, setpriv, prlimit, strace and
systemd-analyze.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
from pathlib import Path

from harness import Proc, ip, net_names, poll, port, total, veth_into_namespace, wait_answers, which

UNIT = Path(__file__).resolve().parents[2] / "packaging" / "vadapt.service"
WIRE_IP = "10.0.40.254"
GUEST_MAC = "52:54:00:5a:00:40"


def unit_settings(path: Path = UNIT) -> dict[str, list[str]]:
    """The unit's `Key=value` lines, each key's values in order."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def bounding_set(unit: dict[str, list[str]]) -> str:
    """setpriv's --bounding-set for the unit's CapabilityBoundingSet."""
    caps = " ".join(unit["CapabilityBoundingSet"]).split()
    assert caps and all(c.startswith("CAP_") for c in caps), caps
    return "-all," + ",".join("+" + c[4:].lower() for c in caps)


def memlock_bytes(unit: dict[str, list[str]]) -> int:
    """LimitMEMLOCK in bytes (systemd's K/M/G are 1024-based)."""
    (value,) = unit["LimitMEMLOCK"]
    m = re.fullmatch(r"(\d+)([KMG]?)", value)
    assert m, f"LimitMEMLOCK={value}: not a size this test reads"
    return int(m.group(1)) * 1024 ** " KMG".index(m.group(2) or " ")


def denied_syscalls(unit: dict[str, list[str]]) -> set[str]:
    """The system calls the unit's deny-list SystemCallFilter names."""
    (value,) = unit["SystemCallFilter"]
    assert value.startswith("~"), f"SystemCallFilter={value}: not a deny list"
    names: set[str] = set()
    for group in value[1:].split():
        r = subprocess.run(
            ["systemd-analyze", "syscall-filter", group],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        for line in r.stdout.splitlines():
            word = line.strip()
            if word and not word.startswith(("#", "@")) and " " not in word:
                names.add(word)
    assert names, value
    return names


def sysfs_in(ns: str, dev: str, name: str) -> str:
    """/sys/class/net/DEV/NAME as namespace `ns` sees it, stripped."""
    r = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{dev}/{name}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return r.stdout.strip()


def peer_rx_packets(ns: str, dev: str) -> int:
    return int(sysfs_in(ns, dev, "statistics/rx_packets"))


def vadapt(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=20)


def exercise(vadapt_bin, procs, control, config, ports, vm_sock, ns, peer, peer_mac, run):
    """Frames both ways through the uplink and the VM port, the core
    manager's periods, and a reload through the configured socket."""
    # The VM port's guest sends to the wire's MAC: through the switch
    # (unknown until the wire speaks: flooded) and out of the uplink.
    before = peer_rx_packets(ns, peer)
    guest = procs.add(
        Proc(
            f"guest-{run}",
            [
                str(vadapt_bin),
                "guest",
                "--socket",
                str(vm_sock),
                "--mac",
                GUEST_MAC,
                "--dst-mac",
                peer_mac,
                "--rate",
                "2k",
                "--duration",
                "3s",
            ],
            procs.workdir,
        )
    )
    assert guest.wait_exit(30) == 0, guest.tail()
    arrived = peer_rx_packets(ns, peer) - before
    assert arrived >= 1000, f"{arrived} of the guest's ~6000 frames reached the wire"

    # The wire speaks: ARP requests from the namespace enter the uplink.
    subprocess.run(
        ["ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.0.40.1"],
        capture_output=True,
        timeout=20,
    )
    s = stats(vadapt_bin, control)
    assert total(port(s, "up0"), "rx_packets") >= 3, port(s, "up0")
    assert total(port(s, "vm"), "tx_packets") + total(port(s, "vm"), "rx_packets") >= 1000

    # The core manager runs its periods.
    def periods() -> int:
        r = vadapt(vadapt_bin, "cores", "--json", "--control", str(control))
        assert r.returncode == 0, r.stderr
        return int(json.loads(r.stdout).get("periods", 0))

    first = periods()
    assert poll(lambda: periods() > first, 10), f"no core manager period after {first}"

    # ExecReload: the socket from the file; the file's new port applied.
    config.write_text(ports + '[[sink]]\nname = "sink9"\n')
    r = vadapt(vadapt_bin, "reload", "--config", str(config))
    assert r.returncode == 0, r.stderr
    names = [p["name"] for p in stats(vadapt_bin, control)["ports"]]
    assert "sink9" in names, names
    config.write_text(ports)


def stats(binary: Path, control: Path) -> dict:
    r = vadapt(binary, "stats", "--json", "--control", str(control))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_units_privileges_run_an_uplink_a_vm_port_and_cores(vadapt_bin, procs):
    from conftest import missing

    if os.geteuid() != 0:
        missing("a network namespace, a veth pair and setpriv need root")
    for tool in ("setpriv", "prlimit", "strace", "systemd-analyze", "ethtool"):
        if not which(tool):
            missing(f"{tool} not installed")
    unit = unit_settings()
    caps = bounding_set(unit)
    memlock = memlock_bytes(unit)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY and hard < memlock:
        memlock = hard
    denied = denied_syscalls(unit)

    ns, host, peer = net_names("u")
    ip("netns", "add", ns)
    try:
        veth_into_namespace(ns, host, peer, f"{WIRE_IP}/24")
        peer_mac = sysfs_in(ns, peer, "address")
        run_under_the_unit(vadapt_bin, procs, caps, memlock, denied, ns, host, peer, peer_mac)
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def run_under_the_unit(vadapt_bin, procs, caps, memlock, denied, ns, host, peer, peer_mac):
    work: Path = procs.workdir
    runtime = work / "runtime"
    runtime.mkdir()
    control = work / "control.sock"
    vm_sock = work / "vm.sock"
    config = work / "vadapt.toml"
    ports = (
        f'control = "{control}"\n'
        '[cores]\nmode = "e"\ncpus = [0, 1]\n'
        f'[[vm]]\nname = "vm"\nsocket = "{vm_sock}"\nmac = "{GUEST_MAC}"\n'
        f'[[uplink]]\nname = "up0"\niface = "{host}"\npolicy = {{ kind = "eekbp" }}\n'
    )
    config.write_text(ports)
    notify_path = work / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(0.2)
    # Read as systemd does, all the time: a unix datagram socket's queue is
    # short (10), and a full one blocks the daemon's sender.
    messages: list[str] = []
    reading = threading.Event()
    reading.set()

    def read_notify() -> None:
        while reading.is_set():
            try:
                messages.append(notify.recv(4096).decode())
            except TimeoutError:
                pass

    reader = threading.Thread(target=read_notify, daemon=True)
    reader.start()
    strace_out = work / "syscalls.txt"

    def serve(name: str, traced: bool) -> Proc:
        argv = [
            "prlimit",
            f"--memlock={memlock}",
            "setpriv",
            f"--bounding-set={caps}",
            "--inh-caps=-all",
            str(vadapt_bin),
            "serve",
            "--config",
            str(config),
        ]
        if traced:
            argv = ["strace", "-f", "-c", "-U", "name,calls", "-o", str(strace_out), *argv]
        env = {
            "RUNTIME_DIRECTORY": str(runtime),
            "NOTIFY_SOCKET": str(notify_path),
            "WATCHDOG_USEC": "400000",
        }
        return procs.add(Proc(name, argv, work, env=env))

    # Untraced: the watchdog, every feature, and a clean stop.
    d = serve("vadapt", traced=False)
    wait_answers(vadapt_bin, control, 30, d)
    assert poll(lambda: any("uplink open" in line for line in d.lines), 20), d.tail()
    # READY=1, then WATCHDOG=1 every 200 ms.
    poll(lambda: sum("WATCHDOG=1" in m for m in messages) >= 3, 10)
    assert any("READY=1" in m for m in messages), messages
    assert sum("WATCHDOG=1" in m for m in messages) >= 3, messages
    # EE-KBP's IRQ deferral, written under the unit's capabilities.
    defer = Path(f"/sys/class/net/{host}/napi_defer_hard_irqs")
    assert defer.read_text().strip() == "2", d.tail()
    exercise(vadapt_bin, procs, control, config, ports, vm_sock, ns, peer, peer_mac, "1")
    assert d.stop(signal.SIGTERM, grace=10) == 0, d.tail()
    assert defer.read_text().strip() == "0", "the IRQ deferral restored at stop"

    # Traced: the same again under strace, for every system call it makes.
    # (Its stop is not checked: under ptrace the shutdown can outlast the
    # daemon's own 1.5 s deadline.)
    d = serve("vadapt-traced", traced=True)
    wait_answers(vadapt_bin, control, 30, d)
    assert poll(lambda: any("uplink open" in line for line in d.lines), 20), d.tail()
    exercise(vadapt_bin, procs, control, config, ports, vm_sock, ns, peer, peer_mac, "2")
    d.stop(signal.SIGTERM, grace=10)
    made = set()
    for line in strace_out.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            made.add(words[0])
    assert "bpf" in made and "setsockopt" in made, sorted(made)
    assert not made & denied, f"calls the unit's SystemCallFilter denies: {sorted(made & denied)}"

    # A crash: kill -9 with the program on the NIC. With the records kept
    # (RuntimeDirectoryPreserve=yes), the next daemon takes its uplink back.
    d = serve("vadapt-2", traced=False)
    wait_answers(vadapt_bin, control, 30, d)
    assert poll(lambda: any("uplink open" in line for line in d.lines), 20), d.tail()
    os.kill(d.popen.pid, signal.SIGKILL)
    d.wait_exit(10)
    assert list(runtime.iterdir()), "the killed daemon left no records"
    d = serve("vadapt-3", traced=False)
    wait_answers(vadapt_bin, control, 30, d)
    assert poll(lambda: any("uplink open" in line for line in d.lines), 20), d.tail()
    os.kill(d.popen.pid, signal.SIGKILL)
    d.wait_exit(10)
    # Without them (a RuntimeDirectory emptied at the stop), the program
    # the dead daemon left looks foreign: the start is refused.
    for f in runtime.iterdir():
        f.unlink()
    d = serve("vadapt-4", traced=False)
    assert d.wait_exit(30) != 0, d.tail()
    assert any("no vadapt attached" in line for line in d.lines), d.tail()
    reading.clear()
    reader.join()
    notify.close()
