"""Two libvirt domains on vadapt, as docs/libvirt.md sets them up: a real
libvirtd (Debian's libvirt-daemon-system) runs QEMU as libvirt-qemu, the
domains' <interface type='vhostuser'> reach vadapt's sockets through
`--socket-group libvirt-qemu`, their ports are added and removed by the
libvirt hook (packaging/libvirt-hook-qemu) from the domains' XML, and
a ping and an md5-checked TCP stream cross vadapt's switch.

No service manager runs as PID 1 on the development and CI machines: when
nothing answers on qemu:///system, the test starts `virtlogd -d` and
`libvirtd -d` itself and stops them (by their pidfiles) at the end. The
hook is called as libvirt calls it (`qemu DOMAIN prepare begin -` with the
XML on stdin, `release end` after the domain is gone) rather than installed
into /etc/libvirt/hooks, which would change the machine's libvirt.

One cell runs in scripts/test.sh (QEMU connects: mode='client'); the other
(QEMU listens: mode='server') is marked `libvirt_matrix` and runs with
--libvirt-matrix.
"""

from __future__ import annotations

import grp
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import missing

import harness
from harness import ROOT, Vadapt, pattern, poll

URI = "qemu:///system"
HOOK = ROOT / "packaging" / "libvirt-hook-qemu"
GROUP = "libvirt-qemu"
MAC_A, MAC_B = "52:54:00:5b:00:01", "52:54:00:5b:00:02"
IP_A, IP_B = "10.0.1.1", "10.0.1.2"
PORT = 5001
STREAM_N = 200_000
BOOT_S = 180  # two TCG guests booting on 2 shared cores


def virsh(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["virsh", "-c", URI, *args], capture_output=True, text=True, timeout=timeout
    )


def libvirt_answers() -> bool:
    try:
        return virsh("version", timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def pid_of(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def libvirtd():
    """A libvirtd answering on qemu:///system: the machine's, or one started here."""
    for prog in ("/usr/sbin/libvirtd", "/usr/sbin/virtlogd"):
        if not Path(prog).is_file():
            missing(f"{prog} not installed (scripts/install-deps.sh)")
    if not harness.which("virsh"):
        missing("virsh not installed (scripts/install-deps.sh)")
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        missing(f"no group {GROUP} (libvirt-daemon-system makes it)")
    started: list[Path] = []
    if not libvirt_answers():
        for prog, pidfile in (
            ("/usr/sbin/virtlogd", Path("/run/virtlogd.pid")),
            ("/usr/sbin/libvirtd", Path("/run/libvirtd.pid")),
        ):
            pid = pid_of(pidfile)
            if pid is not None and Path(f"/proc/{pid}").exists():
                continue  # running already (virtlogd of an earlier run): not ours to stop
            subprocess.run([prog, "-d"], check=True, timeout=30)
            started.append(pidfile)
        if not poll(libvirt_answers, 30, 0.5):
            pytest.fail("libvirtd started but does not answer on " + URI)
    try:
        yield
    finally:
        for pidfile in reversed(started):
            pid = pid_of(pidfile)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
                poll(lambda p=pid: not Path(f"/proc/{p}").exists(), 10, 0.1)


def domain_xml(
    name: str, mac: str, sock: Path, mode: str, boot: tuple[Path, Path, str], console: Path
) -> str:
    """docs/libvirt.md's domain, booting the interop guest's kernel directly
    (`boot`: kernel, initramfs, command line) with its serial console in a file."""
    reconnect = "<reconnect enabled='yes' timeout='1'/>" if mode == "client" else ""
    kernel, initrd, cmdline = boot
    return f"""<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <memoryBacking>
    <source type='memfd'/>
    <access mode='shared'/>
  </memoryBacking>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <cpu mode='maximum'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <interface type='vhostuser'>
      <mac address='{mac}'/>
      <source type='unix' path='{sock}' mode='{mode}'>{reconnect}</source>
      <model type='virtio'/>
      <alias name='ua-net0'/>
    </interface>
    <serial type='file'>
      <source path='{console}'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
  <qemu:override>
    <qemu:device alias='ua-net0'>
      <qemu:frontend>
        <qemu:property name='vectors' type='unsigned' value='0'/>
      </qemu:frontend>
    </qemu:device>
  </qemu:override>
</domain>
"""


def hook(vadapt: Vadapt, domain: str, op: str, sub: str, xml: str) -> None:
    r = subprocess.run(
        [str(HOOK), domain, op, sub, "-"],
        input=xml,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "VADAPT": str(vadapt.binary), "VADAPT_CONTROL": str(vadapt.control)},
    )
    assert r.returncode == 0, f"hook {op} {sub} for {domain}: {r.stderr}"


def result(console: Path, key: str, timeout: float) -> dict[str, str]:
    """The first `VADAPT-RESULT ... key=...` line of a domain's console file."""
    pat = re.compile(rf"VADAPT-RESULT .*\b{re.escape(key)}=")
    found: list[str] = []

    def seen() -> bool:
        text = console.read_text(errors="replace") if console.exists() else ""
        found[:] = [line for line in text.splitlines() if pat.search(line)]
        return bool(found)

    if not poll(seen, timeout, 0.5):
        tail = console.read_text(errors="replace")[-3000:] if console.exists() else "(none)"
        raise harness.HarnessError(f"no {key}= on {console.name} within {timeout} s\n{tail}")
    return harness.parse_result(found[0])


class Domains:
    """Transient domains this test created; destroyed whatever happens."""

    def __init__(self):
        self.names: list[str] = []

    def create(self, name: str, xml_path: Path) -> None:
        r = virsh("create", str(xml_path), timeout=120)
        assert r.returncode == 0, f"virsh create {name}: {r.stderr}"
        self.names.append(name)

    def destroy_all(self) -> None:
        for n in self.names:
            virsh("destroy", n, timeout=30)


def run_cell(vadapt_bin, procs, qemu_mode: str) -> None:
    files = harness.guest_files()
    work = procs.workdir
    # QEMU runs as libvirt-qemu: the work dir must be traversable and the
    # guest's kernel readable (the cache under /root is not).
    work.chmod(0o755)
    kernel, initrd = work / "vmlinuz", work / "initrd.gz"
    shutil.copyfile(files[0], kernel)
    shutil.copyfile(files[1], initrd)
    for f in (kernel, initrd):
        f.chmod(0o644)
    gid = grp.getgrnam(GROUP).gr_gid
    vhost = work / "vhost"  # made by vadapt: 0750, group libvirt-qemu
    if qemu_mode == "server":
        # QEMU creates its sockets: a folder its group may write (docs/libvirt.md).
        sockdir = work / "qemu"
        sockdir.mkdir()
        os.chown(sockdir, 0, gid)
        sockdir.chmod(0o770)
    else:
        sockdir = vhost
    d = Vadapt(
        vadapt_bin,
        work,
        procs,
        # The daemon starts with one port of its own; the hook adds the domains'.
        ["--socket-group", GROUP, "--vm", f"name=idle,socket={vhost / 'idle.sock'}"],
        cpus=None,
    ).start([vhost / "idle.sock"])
    st = vhost.stat()
    assert (st.st_mode & 0o777, st.st_gid) == (0o750, gid), oct(st.st_mode)

    tag = work.name.replace("vadapt-it-", "")[-6:]
    domains = Domains()
    doms = {}
    for role, mac, ip, extra in (
        ("b", MAC_B, IP_B, {"vadapt.role": "server", "vadapt.port": str(PORT)}),
        (
            "a",
            MAC_A,
            IP_A,
            {
                "vadapt.role": "client",
                "vadapt.peer": IP_B,
                "vadapt.port": str(PORT),
                "vadapt.count": str(STREAM_N),
            },
        ),
    ):
        name = f"vadapt-{tag}-{role}"
        console = work / f"{role}.console"
        cmdline = ["console=ttyS0", "quiet", "panic=-1", f"vadapt.ip={ip}/24"]
        cmdline += [f"{k}={v}" for k, v in extra.items()]
        boot = (kernel, initrd, " ".join(cmdline))
        xml = domain_xml(name, mac, sockdir / f"vm{role}.sock", qemu_mode, boot, console)
        (work / f"{name}.xml").write_text(xml)
        doms[role] = (name, xml, console)
    try:
        # B first: A pings and streams to it as soon as it boots.
        for role in ("b", "a"):
            name, xml, console = doms[role]
            hook(d, name, "prepare", "begin", xml)
            domains.create(name, work / f"{name}.xml")
            if role == "b":
                assert result(console, "boot", BOOT_S)["boot"] == "ok"
                result(console, "listening", 60)
        st = d.stats()
        names = {p["name"] for p in st["ports"]}
        assert {f"{doms['a'][0]}-0", f"{doms['b'][0]}-0"} <= names, names

        a_console, b_console = doms["a"][2], doms["b"][2]
        pinged = result(a_console, "ping_rx", BOOT_S)
        assert int(pinged["ping_rx"]) == int(pinged["ping_tx"]) > 0, pinged
        want_bytes, want_md5 = pattern(STREAM_N)
        sent = result(a_console, "send_bytes", 150)
        got = result(b_console, "recv_bytes", 60)
        assert sent["rc"] == "0", sent
        assert (int(sent["send_bytes"]), sent["send_md5"]) == (want_bytes, want_md5)
        assert (int(got["recv_bytes"]), got["recv_md5"]) == (want_bytes, want_md5)
        # The stream crossed vadapt's switch.
        a_port = harness.port(d.stats(), f"{doms['a'][0]}-0")
        assert harness.total(a_port, "tx_bytes") >= want_bytes, a_port
    finally:
        domains.destroy_all()
    # The domains are gone: the hook removes their ports.
    for role in ("a", "b"):
        name, xml, _ = doms[role]
        hook(d, name, "release", "end", xml)
    names = {p["name"] for p in d.stats()["ports"]}
    assert names == {"idle"}, names
    assert d.proc.alive(), d.proc.tail()
    assert "is not shared" not in "\n".join(d.proc.lines), d.proc.tail()


def test_two_domains_qemu_connects(vadapt_bin, qemu, libvirtd, procs):
    """mode='client': QEMU connects to vadapt's socket (with reconnect)."""
    run_cell(vadapt_bin, procs, "client")


@pytest.mark.libvirt_matrix
def test_two_domains_qemu_listens(vadapt_bin, qemu, libvirtd, procs):
    """mode='server': QEMU listens in a folder its group may write; vadapt connects."""
    run_cell(vadapt_bin, procs, "server")


def test_hook_ignores_other_operations_and_refuses_unsafe_paths(vadapt_bin, procs):
    """The hook does nothing for operations other than prepare/release, and a
    socket path a port spec cannot carry fails `prepare` without touching vadapt."""
    xml = "<domain><name>x</name><devices><interface type='vhostuser'>"
    xml += "<source type='unix' path='/tmp/a,b.sock' mode='client'/></interface></devices></domain>"
    env = {**os.environ, "VADAPT": str(vadapt_bin), "VADAPT_CONTROL": "/nonexistent/c.sock"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(HOOK), *args], input=xml, capture_output=True, text=True, env=env, timeout=30
        )

    assert run("x", "started", "begin", "-").returncode == 0
    r = run("x", "prepare", "begin", "-")
    assert r.returncode == 1 and "a,b.sock" in r.stderr, r.stderr
    assert run("x", "release", "end", "-").returncode == 0


def test_hook_accepts_unsealed_memory_only_for_domains_whose_memory_is_in_files(vadapt_bin, procs):
    """A domain's <memoryBacking> decides its ports' `unsealed_memory`: memfd
    memory (hugepages or not) is sealed and keeps the default; hugepages
    without a memfd source (files on hugetlbfs) and <source type='file'/>
    cannot be sealed, so their ports accept it (under vadapt's SIGBUS
    guard). Seen in the ports the daemon records (its state file)."""
    d = Vadapt(vadapt_bin, procs.workdir, procs, []).start()
    backings = {
        "plain": "",
        "memfd": "<source type='memfd'/><access mode='shared'/>",
        "hugememfd": "<hugepages/><source type='memfd'/><access mode='shared'/>",
        "hugefile": "<hugepages/><access mode='shared'/>",
        "file": "<source type='file'/><access mode='shared'/>",
    }
    env = {**os.environ, "VADAPT": str(vadapt_bin), "VADAPT_CONTROL": str(d.control)}
    for name, backing in backings.items():
        sock = procs.workdir / f"{name}.sock"
        xml = f"<domain><name>{name}</name><memoryBacking>{backing}</memoryBacking><devices>"
        xml += f"<interface type='vhostuser'><source type='unix' path='{sock}' mode='client'/>"
        xml += "</interface></devices></domain>"
        r = subprocess.run(
            [str(HOOK), name, "prepare", "begin", "-"],
            input=xml,
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
    text = (d.state_dir / "ports.toml").read_text()
    accepted = set(re.findall(r'name = "([a-z]+)-0"[^\[]*unsealed_memory = "accept"', text))
    assert accepted == {"hugefile", "file"}, text
