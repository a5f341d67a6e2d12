"""Hugepage-backed QEMU guests (issue 40, item 4): guest memory on 2-MiB
hugepages, as libvirt's `<memoryBacking><hugepages/>` recipe gives it, the
usual one on NFV and OpenStack hosts.

- `memfd-hugetlb`: `memory-backend-memfd,hugetlb=on` (libvirt: `<hugepages/>`
  with `<source type='memfd'/>`). QEMU seals the memfd against shrinking
  (`seal=on` is its default, and hugetlbfs memfds take seals), so a port
  with the defaults maps it.
- `file-hugetlbfs`: `memory-backend-file` on a hugetlbfs mount (libvirt's
  `<hugepages/>` without a memfd source). A file on hugetlbfs cannot be
  sealed: a port with the defaults refuses it in one line that names both
  fixes, and a port with `unsealed_memory=accept` maps it under the SIGBUS
  guard (what the libvirt hook asks for such a domain).

Where vadapt maps the memory, the guest pings an address nobody has: its
frames are flooded to an echo port and come back, so vadapt reads the
guest's transmit buffers and writes its receive buffers, both in hugepages.

The module reserves the hugepages it needs (`/proc/sys/vm/nr_hugepages`) and
mounts a hugetlbfs of its own, and gives both back at the end.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import missing

import vhost_raw as vr
from harness import Guest, Vadapt, port

MAC = "52:54:00:5a:00:41"
PAGE = 2 << 20
REFUSAL = "not sealed against shrinking"
NOT_SHARED = "not shared with vadapt"
SINK = "02:00:00:00:00:42"
UVA = 0x7F13_0000_0000


class HugeGuest(Guest):
    MEM = "256M"


GUEST_PAGES = (256 << 20) // PAGE
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def free_hugepages() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("HugePages_Free:"):
            return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def hugetlbfs():
    """A hugetlbfs mount with room for one guest (the pages reserved here
    are given back afterwards)."""
    if os.geteuid() != 0:
        missing("reserving hugepages needs root")
    if not NR_HUGEPAGES.exists():
        missing("the kernel has no hugetlbfs")
    before = int(NR_HUGEPAGES.read_text())
    short = GUEST_PAGES - free_hugepages()
    if short > 0:
        NR_HUGEPAGES.write_text(str(before + short))
    mnt = Path(tempfile.mkdtemp(prefix="vadapt-huge-"))
    mounted = False
    try:
        if free_hugepages() < GUEST_PAGES:
            missing(f"the kernel could not reserve {GUEST_PAGES} hugepages of 2 MiB")
        subprocess.run(
            ["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "vadapt-test", str(mnt)],
            check=True,
            timeout=10,
        )
        mounted = True
        yield mnt
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)], check=False, timeout=10)
        mnt.rmdir()
        NR_HUGEPAGES.write_text(str(before))


def port_counts(d: Vadapt) -> tuple[int, int]:
    p = port(d.stats(), "vmh")
    return (
        sum(q["tx_packets"] for q in p["queues"]),
        sum(q["rx_packets"] for q in p["queues"]),
    )


def traffic_both_ways(d: Vadapt, timeout: float = 30.0) -> bool:
    tx0, rx0 = port_counts(d)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tx, rx = port_counts(d)
        if tx > tx0 + 5 and rx > rx0 + 5:
            return True
        time.sleep(0.2)
    return False


def start(vadapt_bin, procs, hugetlbfs: Path, backend: str, accept: bool) -> tuple[Vadapt, Guest]:
    sock = procs.workdir / "vmh.sock"
    spec = f"name=vmh,socket={sock}" + (",unsealed_memory=accept" if accept else "")
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", spec, "--echo", "echo0", "--policy", "interrupt"],
    ).start([sock])
    memory = {
        "memfd-hugetlb": "memory-backend-memfd,share=on,hugetlb=on,hugetlbsize=2M",
        "file-hugetlbfs": f"memory-backend-file,share=on,mem-path={hugetlbfs}",
    }[backend]
    g = HugeGuest(procs, "guest", sock, MAC, "10.0.4.1/24", "shell", memory=memory)
    g.booted()
    return d, g


@pytest.mark.parametrize(
    "backend,accept",
    [("memfd-hugetlb", False), ("file-hugetlbfs", True)],
    ids=["memfd-hugetlb", "file-hugetlbfs-accepted"],
)
def test_a_hugepage_guest_is_served(vadapt_bin, qemu, procs, hugetlbfs, backend, accept):
    d, g = start(vadapt_bin, procs, hugetlbfs, backend, accept)
    # A static neighbour where busybox has `arp`; else the ARP requests
    # themselves are the traffic (flooded to the echo port and back).
    g.shell("arp -s 10.0.4.9 02:00:00:00:00:99 2>/dev/null; true")
    g.shell("ping -i 0.05 10.0.4.9 >/dev/null 2>&1 &")
    assert traffic_both_ways(d), f"vmh not served: {port_counts(d)}\n{d.proc.tail()}"
    p = port(d.stats(), "vmh")
    assert p["memory_bytes"] >= 256 << 20, p
    assert not [line for line in d.proc.lines if REFUSAL in line], d.proc.tail()
    # mincore cannot see the guest's writes to hugetlbfs pages: no false
    # "not shared" warning either.
    assert not [line for line in d.proc.lines if NOT_SHARED in line], d.proc.tail()
    assert g.poweroff() == 0


def test_a_hugetlbfs_file_is_refused_by_default_with_the_fixes(vadapt_bin, qemu, procs, hugetlbfs):
    d, g = start(vadapt_bin, procs, hugetlbfs, "file-hugetlbfs", accept=False)
    m, _ = d.proc.wait_for(REFUSAL, 30)
    line = m.string
    assert 'port="vmh"' in line, line
    assert "unsealed_memory" in line, line
    assert "hugetlb=on" in line, line
    assert port_counts(d) == (0, 0)
    assert d.proc.alive()
    assert g.poweroff() == 0


def test_a_hugepage_file_shrunk_under_the_daemon_costs_the_port_only(vadapt_bin, procs, hugetlbfs):
    """A frontend hands an accepting port a hugetlbfs memfd (unsealed, as
    a file on hugetlbfs is), runs a transmit ring on it, then truncates
    the file: the daemon's next access faults. Its SIGBUS guard must
    replace a whole 2-MiB page (a hugetlb mapping cannot be split at 4
    KiB); the daemon lives and closes that port's connection only."""
    sock = procs.workdir / "vmh.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vmh,socket={sock},unsealed_memory=accept", "--sink", f"sink0,mac={SINK}"],
    ).start([sock])
    fe = vr.Frontend(sock)
    fd = os.memfd_create("vadapt-huge", os.MFD_CLOEXEC | os.MFD_HUGETLB)
    kick, call = vr.eventfd(), vr.eventfd()
    try:
        os.ftruncate(fd, PAGE)
        buf = mmap.mmap(fd, PAGE)
        fe.handshake()
        fe.ok(vr.SET_MEM_TABLE, vr.mem_table([vr.Region(0, PAGE, UVA)]), [fd])
        ring = vr.SplitRing(buf, 0, UVA, 0x10000, 256)
        fe.ok(vr.SET_VRING_NUM, vr.vring_state(1, 256))
        fe.ok(vr.SET_VRING_ADDR, vr.vring_addr(1, *ring.addrs()))
        fe.ok(vr.SET_VRING_BASE, vr.vring_state(1, 0))
        fe.ok(vr.SET_VRING_KICK, vr.u64(1), [kick])
        fe.ok(vr.SET_VRING_CALL, vr.u64(1), [call])
        fe.ok(vr.SET_VRING_ENABLE, vr.vring_state(1, 1))
        frame = vr.frame(bytes.fromhex(SINK.replace(":", "")), bytes.fromhex("020000000041"))
        for i in range(2):
            off = 0x40000 + 2048 * i
            buf[off : off + len(frame)] = frame
            ring.push(off, len(frame))
            os.eventfd_write(kick, 1)
            assert ring.wait_used(i + 1), d.proc.tail()
            if i == 0:
                buf.close()  # our own mapping would fault too
                os.ftruncate(fd, 0)
                break
        os.eventfd_write(kick, 1)
        assert fe.closed_within(10), d.proc.tail()
    finally:
        fe.close()
        for f in (kick, call, fd):
            os.close(f)
    d.proc.wait_for('port="vmh".*guest memory shrank under the daemon', 10)
    assert d.proc.alive(), d.proc.tail()
    assert d.stats()["ports"], "the daemon no longer answers"
