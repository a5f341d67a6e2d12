"""A hostile vhost-user frontend against a live daemon.

One daemon serves the whole module: `vm1` (default: sealed guest memory
only) and `vm3` (`unsealed_memory=accept`) take the attacks, from the raw
client in vhost_raw.py; `vm2` carries a synthetic guest's traffic to a sink
all along. After every case (the autouse `invariants` fixture):

- the daemon is alive and `vadapt stats --json` answers;
- vm2's transmit counter still moves (bounded wait, no timing assertion);
- the daemon's open descriptors are back to what it had before the suite
  (within FD_TOLERANCE; they are closed asynchronously, so this polls);
- its RSS grew by at most RSS_BUDGET over the suite.

Each case also checks that the daemon refused or survived the attack the
way it promises: a REPLY_ACK refusal, a closed connection, and the log line
that names the port (the real lines of dataplane/src/vmport/handler.rs).

"""

from __future__ import annotations

import json
import math
import mmap
import os
import random
import re
import select
import shutil
import socket
import struct
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import harness
import vhost_raw as vr
from vhost_raw import CLOSED, Frontend, Region

SINK_MAC = "02:00:00:00:00:02"
FD_TOLERANCE = 1  # descriptors the daemon may hold beyond its idle count
RSS_BUDGET = 20 << 20  # bytes of RSS growth allowed over the whole suite
MOVE_TIMEOUT = 5.0  # s to wait for vm2's counter to move after a case
NO_HANG = 3.0  # s a backend gets to answer or close before the client "hangs"
# A peer's log lines, per port and per reason: a burst, then so many a
# second (dataplane/src/log_limit.rs, PEER_BURST and PEER_PER_SECOND).
LINES_BURST = 20
LINES_PER_S = 10

# Guest memory of the ring cases: one sealed 2 MiB region at gpa 0 whose
# frontend address is UVA; the transmit ring and one frame inside it.
MEM_SIZE = 2 << 20
UVA = 0x7F12_0000_0000
RING_OFF = 0x10000
DATA_OFF = 0x40000
RING_SIZE = 256
TXQ = 1  # ring 1 is queue pair 0's transmit ring


# Log lines of the daemon (dataplane/src/vmport/handler.rs, mod.rs, queues.rs).
MALFORMED = "malformed vhost-user message; closing the connection"
REFUSED = "vhost-user request refused"
DISCONNECTED = "frontend disconnected; port reset"
CLOSING = "closing the frontend's connection; port reset"
# Any of the three ways a connection ends and the port resets.
ENDED_VM1 = r"(port reset|resetting the port).*port=\"vm1\""


def on(port: str) -> str:
    return f'port="{port}"'


# --- the daemon and its traffic -----------------------------------------------


@dataclass
class Rig:
    daemon: harness.Vadapt
    guest: harness.Proc
    socks: dict[str, Path]
    metrics: str
    fd0: int = 0
    rss0: int = 0
    mark: int = 0
    dead: str | None = None
    fd_log: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.daemon.proc.popen.pid

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def fd_targets(self) -> list[str]:
        out = []
        for n in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                out.append(os.readlink(f"/proc/{self.pid}/fd/{n}"))
            except OSError:
                pass
        return sorted(out)

    def rss(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def connect(self, port: str = "vm1", timeout: float = 3.0) -> Frontend:
        return Frontend(self.socks[port], timeout=timeout)

    def log(self, *parts: str, timeout: float = 5.0) -> str:
        """The first daemon log line since the case began that has every part."""
        pattern = "".join(f"(?=.*{re.escape(p)})" for p in parts)
        m, _ = self.daemon.proc.wait_for(pattern, timeout, since=self.mark)
        return m.string

    def log_re(self, pattern: str, timeout: float = 5.0) -> str:
        m, _ = self.daemon.proc.wait_for(pattern, timeout, since=self.mark)
        return m.string

    def count_lines(self, n: int, *parts: str, timeout: float = 5.0) -> int:
        """Wait until at least `n` log lines since the case began have every
        part (the log is read asynchronously); how many there are."""

        def count() -> int:
            lines = self.daemon.proc.lines[self.mark :]
            return sum(all(p in x for p in parts) for x in lines)

        harness.poll(lambda: count() >= n, timeout)
        return count()

    def vm2_tx(self) -> int:
        return harness.total(harness.port(self.daemon.stats(), "vm2"), "tx_packets")

    def port_stats(self, name: str) -> dict:
        return harness.port(self.daemon.stats(), name)


@pytest.fixture(scope="module")
def rig(vadapt_bin, request):
    workdir = harness.short_tmpdir("vadapt-hostile-")
    group = harness.ProcGroup(workdir)
    failed_before = request.session.testsfailed
    socks = {n: workdir / f"{n}.sock" for n in ("vm1", "vm2", "vm3")}
    try:
        d = harness.Vadapt(
            vadapt_bin,
            workdir,
            group,
            [
                "--vm",
                f"name=vm1,socket={socks['vm1']}",
                "--vm",
                f"name=vm3,socket={socks['vm3']},unsealed_memory=accept",
                "--vm",
                f"name=vm2,socket={socks['vm2']}",
                "--sink",
                f"sink0,mac={SINK_MAC}",
                "--metrics",
                "127.0.0.1:0",
            ],
        ).start(list(socks.values()))
        m, _ = d.proc.wait_for(r"http://(127\.0\.0\.1:\d+)/metrics", 10)
        guest = group.add(
            harness.Proc(
                "guest",
                [
                    str(vadapt_bin),
                    "guest",
                    "--socket",
                    str(socks["vm2"]),
                    "--rate",
                    "20k",
                    "--duration",
                    "600s",
                    "--dst-mac",
                    SINK_MAC,
                ],
                workdir,
            )
        )
        r = Rig(d, guest, socks, m.group(1))
        st = d.wait_stats(lambda s: harness.total(harness.port(s, "sink0"), "rx_packets") > 0)
        assert harness.total(harness.port(st, "sink0"), "rx_packets") > 0, guest.tail()
        # The idle count: the least of a few samples (a stats connection
        # just answered may not be closed yet).
        r.fd0 = min(r.fds() for _ in range(5) if time.sleep(0.05) is None)
        r.rss0 = r.rss()
        r.fd_log = r.fd_targets()
        yield r
    finally:
        group.stop_all()
        if request.session.testsfailed == failed_before:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\nlogs kept in {workdir}")


@pytest.fixture(autouse=True)
def invariants(rig):
    """The daemon before and after every case (see the module docs)."""
    if rig.dead or not rig.daemon.proc.alive():
        why = rig.dead or f"rc={rig.daemon.proc.popen.returncode}"
        pytest.fail(f"the daemon died in an earlier case ({why})", pytrace=False)
    rig.mark = rig.daemon.proc.mark()
    yield
    proc = rig.daemon.proc
    if not proc.alive():
        rig.dead = f"rc={proc.popen.returncode}"
        pytest.fail(f"the daemon died: rc={proc.popen.returncode}\n{proc.tail()}", pytrace=False)
    tx0 = rig.vm2_tx()  # stats answer
    assert rig.guest.alive(), "the synthetic guest on vm2 exited\n" + rig.guest.tail()
    assert harness.poll(lambda: rig.vm2_tx() > tx0, MOVE_TIMEOUT, 0.1), (
        f"vm2 stopped forwarding (tx stuck at {tx0})\n" + proc.tail()
    )
    limit = rig.fd0 + FD_TOLERANCE
    if not harness.poll(lambda: rig.fds() <= limit, 5.0):
        now = rig.fd_targets()
        extra = [t for t in now if t not in rig.fd_log or now.count(t) > rig.fd_log.count(t)]
        pytest.fail(
            f"daemon holds {rig.fds()} fds, {rig.fd0} before the suite; new: {extra}",
            pytrace=False,
        )
    grown = rig.rss() - rig.rss0
    assert grown <= RSS_BUDGET, f"daemon RSS grew by {grown >> 20} MiB over the suite"


# --- helpers -------------------------------------------------------------------


def assert_closed(fe: Frontend, timeout: float = 5.0) -> None:
    assert fe.closed_within(timeout), f"the daemon kept the connection open for {timeout} s"


def refused_then_closed(r: int | str, fe: Frontend) -> None:
    """A REPLY_ACK refusal (or an immediate close), then a closed connection."""
    assert r == CLOSED or r != 0, "the daemon acknowledged the request as a success"
    assert_closed(fe)


def answered_or_closed(fe: Frontend, request: int) -> vr.Msg | str:
    """The reply to `request`, or CLOSED; a Hang fails the case."""
    m = fe.answer(NO_HANG)
    if m != CLOSED:
        assert m.request == request, f"reply to {m.request}, expected {request}"
    return m


def still_in_sync(fe: Frontend) -> None:
    """The connection still parses messages: GET_FEATURES gets its reply."""
    assert fe.get_u64(vr.GET_FEATURES) & vr.F_PROTOCOL_FEATURES


def memory_table(fe: Frontend, size: int = MEM_SIZE, sealed: bool = True):
    """SET_MEM_TABLE of one memfd region of `size` at gpa 0 / UVA, which
    must be accepted; returns (memfd, our mapping of it)."""
    fd = vr.memfd(size, sealed)
    buf = mmap.mmap(fd, size)
    fe.ok(vr.SET_MEM_TABLE, vr.mem_table([Region(0, size, UVA)]), [fd])
    return fd, buf


@dataclass
class TxRing:
    fe: Frontend
    memfd: int
    buf: mmap.mmap
    ring: vr.SplitRing
    kick: int
    call: int

    def send_frame(self, src_last: int = 1) -> int:
        """One frame to the sink through the transmit ring, and a kick; the
        avail index afterwards."""
        off = DATA_OFF + 128 * (self.ring.avail_idx % 64)
        data = vr.frame(
            bytes.fromhex(SINK_MAC.replace(":", "")), bytes([2, 0, 0, 0, 0x10, src_last])
        )
        self.buf[off : off + len(data)] = data
        self.ring.push(off, len(data))
        os.eventfd_write(self.kick, 1)
        return self.ring.avail_idx

    def close(self) -> None:
        self.fe.close()
        for fd in (self.kick, self.call):
            os.close(fd)
        try:
            self.buf.close()
        except (BufferError, ValueError):
            pass
        os.close(self.memfd)


def tx_ring(rig: Rig, port: str, sealed: bool = True, blocking: bool = False) -> TxRing:
    """One running transmit ring, set up in the order a frontend does:
    features, memory table, ring size, addresses inside the region, base 0,
    kick and call eventfds, enable."""
    fe = rig.connect(port)
    fe.handshake()
    memfd, buf = memory_table(fe, sealed=sealed)
    ring = vr.SplitRing(buf, 0, UVA, RING_OFF, RING_SIZE)
    fe.ok(vr.SET_VRING_NUM, vr.vring_state(TXQ, RING_SIZE))
    fe.ok(vr.SET_VRING_ADDR, vr.vring_addr(TXQ, *ring.addrs()))
    fe.ok(vr.SET_VRING_BASE, vr.vring_state(TXQ, 0))
    kick, call = vr.eventfd(blocking), vr.eventfd(blocking)
    fe.ok(vr.SET_VRING_KICK, vr.u64(TXQ), [kick])
    fe.ok(vr.SET_VRING_CALL, vr.u64(TXQ), [call])
    fe.ok(vr.SET_VRING_ENABLE, vr.vring_state(TXQ, 1))
    return TxRing(fe, memfd, buf, ring, kick, call)


def line_bound(elapsed: float) -> int:
    """The most lines of one reason a port may log over `elapsed` s: the
    burst, and the rate for every started second."""
    return LINES_BURST + LINES_PER_S * math.ceil(elapsed)


def settled_count(rig: Rig, *parts: str) -> int:
    """Lines since the case began with every part, once the log has
    caught up (it is read asynchronously)."""
    rig.count_lines(1, *parts)
    time.sleep(0.5)
    return rig.count_lines(0, *parts, timeout=0)


def let_limits_refill() -> None:
    """After a case that used up one of vm1's line limits: let it refill
    (for more than the lines of any one case), so that the next case's
    lines are not held back."""
    time.sleep(1.1)


# --- framing -------------------------------------------------------------------


@pytest.mark.parametrize("n", range(12))
def test_truncated_header_then_close(rig, n):
    """0..11 bytes of a GET_FEATURES header, then EOF: the port resets."""
    with rig.connect() as fe:
        fe.send_raw(struct.pack("<III", vr.GET_FEATURES, vr.VERSION, 0)[:n])
    rig.log(DISCONNECTED, on("vm1"))


@pytest.mark.parametrize("size", [0x1001, 0x10000, 0xFFFF_FFFF])
def test_size_field_huge(rig, size):
    with rig.connect() as fe:
        fe.handshake()
        fe.send(vr.SET_FEATURES, vr.u64(0), size=size, need_reply=True)
        assert_closed(fe)
    rig.log(MALFORMED, on("vm1"))


def test_payload_shorter_than_its_size(rig):
    """The header announces 4096 bytes, 8 follow: closed, not waited for."""
    with rig.connect() as fe:
        fe.handshake()
        fe.send(vr.SET_FEATURES, vr.u64(0), size=4096, need_reply=True)
        assert_closed(fe)
    rig.log(MALFORMED, on("vm1"))


@pytest.mark.parametrize("code", [0, 39, 45, 0x7FFF_FFFF, 0xFFFF_FFFF])
def test_unknown_request_code(rig, code):
    with rig.connect() as fe:
        fe.handshake()
        fe.send(code, vr.u64(0), need_reply=True)
        assert_closed(fe)
    rig.log(MALFORMED, on("vm1"))


@pytest.mark.parametrize(
    "flags",
    [0x0, 0x2, 0x3, vr.NEED_REPLY, vr.VERSION | vr.REPLY, vr.VERSION | 0x10],
    ids=["none", "version2", "version3", "need_reply-only", "reply-bit", "reserved-bit"],
)
def test_flags_without_version_one(rig, flags):
    """Only version 1 without the reply bit or reserved bits is a request."""
    with rig.connect() as fe:
        fe.handshake()
        fe.send(vr.GET_FEATURES, flags=flags)
        m = fe.answer(5.0)
        assert m == CLOSED, f"the daemon answered a message with flags {flags:#x}: {m}"
    rig.log(MALFORMED, on("vm1"))


@pytest.mark.parametrize("seed", range(4))
def test_random_byte_flood(rig, seed):
    rnd = random.Random(seed)
    with rig.connect() as fe:
        for _ in range(16):
            if not fe.send_raw(rnd.randbytes(4096)):
                break
        assert_closed(fe)
    rig.log(MALFORMED, on("vm1"))


@pytest.mark.parametrize("seed", range(3))
def test_random_message_flood(rig, seed):
    """Well-framed messages (version 1, size ≤ 4096) with random codes and
    payloads: whatever the daemon does with each, it ends the connection
    cleanly when it must, and resets the port when the client goes."""
    rnd = random.Random(1000 + seed)
    with rig.connect() as fe:
        for _ in range(200):
            code = rnd.randrange(1, 45)
            payload = rnd.randbytes(rnd.choice([0, 8, 8, 8, 12, 40, rnd.randrange(4097)]))
            flags = vr.VERSION | rnd.choice([0, vr.NEED_REPLY])
            if not fe.send(code, payload, flags=flags):
                break
            # Take whatever came back, so the daemon never blocks on us.
            while select.select([fe.sock], [], [], 0)[0]:
                try:
                    if not fe.sock.recv(65536):
                        break
                except ConnectionResetError:
                    break
    rig.log_re(ENDED_VM1)


# --- negotiation ---------------------------------------------------------------


@pytest.mark.parametrize(
    "features", [2**64 - 1, 1 << 63, 1 << 31], ids=["every-bit", "bit63", "bit31"]
)
def test_features_never_offered(rig, features):
    with rig.connect() as fe:
        offered = fe.handshake()
        assert features & ~offered
        assert fe.ack(vr.SET_FEATURES, vr.u64(features)) not in (0, CLOSED)
        still_in_sync(fe)
    rig.log("frontend acked features we never offered", on("vm1"))


def test_protocol_features_garbage(rig):
    """Every protocol bit: refused with an error ack and a log line naming
    the bits, and the connection stays usable."""
    with rig.connect() as fe:
        fe.handshake()
        r = fe.ack(vr.SET_PROTOCOL_FEATURES, vr.u64(2**64 - 1))
        assert r not in (0, CLOSED)
        still_in_sync(fe)
        fe.send(vr.GET_QUEUE_NUM)
        assert fe.reply(vr.GET_QUEUE_NUM).u64() == FIRST_BAD_RING
    rig.log("protocol features 0xffffffffffffffff, some never offered", on("vm1"))


def test_set_owner_twice(rig):
    with rig.connect() as fe:
        fe.handshake()
        a, b = fe.ack(vr.SET_OWNER), fe.ack(vr.SET_OWNER)
        assert a == 0 and b != CLOSED
        still_in_sync(fe)


def test_reset_owner_releases_everything(rig):
    """RESET_OWNER with a running ring: memory, kick and call are given back
    while the connection stays open, and the port takes a new table."""
    t = tx_ring(rig, "vm1")
    try:
        assert t.ring.wait_used(0)
        t.fe.ok(vr.RESET_OWNER)
        # Only the connection (and its clone for shutdown) remain.
        assert harness.poll(lambda: rig.fds() <= rig.fd0 + 2, 5.0), rig.fd_targets()
        still_in_sync(t.fe)
        fd, buf = memory_table(t.fe)
        buf.close()
        os.close(fd)
    finally:
        t.close()
    rig.log("guest memory mapped", on("vm1"))


# --- memory tables -------------------------------------------------------------


def test_mem_table_zero_regions(rig):
    with rig.connect() as fe:
        fe.handshake()
        refused_then_closed(fe.ack(vr.SET_MEM_TABLE, vr.mem_table([])), fe)
    rig.log(MALFORMED, on("vm1"))


def test_mem_table_nine_regions(rig):
    """More than QEMU's 8 but within the daemon's documented 32: mapped."""
    fds = [vr.memfd(1 << 20, True) for _ in range(9)]
    try:
        with rig.connect() as fe:
            fe.handshake()
            regs = [Region(i << 24, 1 << 20, UVA + (i << 24)) for i in range(9)]
            assert fe.ack(vr.SET_MEM_TABLE, vr.mem_table(regs), fds) == 0
            still_in_sync(fe)
    finally:
        for fd in fds:
            os.close(fd)
    rig.log("guest memory mapped", on("vm1"), "regions=9")


@pytest.mark.parametrize("nregions,nfds", [(1, 2), (2, 1)], ids=["more-fds", "fewer-fds"])
def test_mem_table_fd_count_mismatch(rig, nregions, nfds):
    fds = [vr.memfd(1 << 20, True) for _ in range(nfds)]
    regs = [Region(i << 20, 1 << 20, UVA + (i << 20)) for i in range(nregions)]
    try:
        with rig.connect() as fe:
            fe.handshake()
            refused_then_closed(fe.ack(vr.SET_MEM_TABLE, vr.mem_table(regs), fds), fe)
    finally:
        for fd in fds:
            os.close(fd)
    rig.log(MALFORMED, on("vm1"))


@pytest.mark.parametrize("field_", ["offset", "gpa", "uva"])
def test_mem_table_address_overflow(rig, field_):
    top = 2**64 - 4096
    reg = {
        "offset": Region(0, 8192, UVA, top),
        "gpa": Region(top, 8192, UVA),
        "uva": Region(0, 8192, top),
    }[field_]
    fd = vr.memfd(1 << 20, True)
    try:
        with rig.connect() as fe:
            fe.handshake()
            refused_then_closed(fe.ack(vr.SET_MEM_TABLE, vr.mem_table([reg]), [fd]), fe)
    finally:
        os.close(fd)
    rig.log(MALFORMED, on("vm1"))


@pytest.mark.parametrize(
    "size,offset,needed",
    [(8 << 20, 0, 8 << 20), (4 << 20, 2 << 20, 6 << 20)],
    ids=["8MiB-region", "offset-past-end"],
)
def test_region_larger_than_its_memfd(rig, size, offset, needed):
    fd = vr.memfd(4 << 20, True)
    try:
        with rig.connect() as fe:
            fe.handshake()
            r = fe.ack(vr.SET_MEM_TABLE, vr.mem_table([Region(0, size, UVA, offset)]), [fd])
            refused_then_closed(r, fe)
    finally:
        os.close(fd)
    rig.log("memory table refused: region 0", f"needs {needed} bytes", "has 4194304", on("vm1"))
    rig.log(CLOSING, on("vm1"))


def test_unsealed_memfd_refused_by_strict_port(rig):
    fd = vr.memfd(MEM_SIZE, sealed=False)
    try:
        with rig.connect("vm1") as fe:
            fe.handshake()
            r = fe.ack(vr.SET_MEM_TABLE, vr.mem_table([Region(0, MEM_SIZE, UVA)]), [fd])
            refused_then_closed(r, fe)
    finally:
        os.close(fd)
    rig.log("memory table refused", "not sealed against shrinking", on("vm1"))


@pytest.mark.parametrize(
    "port,sealed",
    [("vm3", False), ("vm1", True), ("vm3", True)],
    ids=["vm3-unsealed", "vm1-sealed", "vm3-sealed"],
)
def test_memfd_accepted(rig, port, sealed):
    fd = vr.memfd(MEM_SIZE, sealed)
    try:
        with rig.connect(port) as fe:
            fe.handshake()
            assert fe.ack(vr.SET_MEM_TABLE, vr.mem_table([Region(0, MEM_SIZE, UVA)]), [fd]) == 0
            still_in_sync(fe)
    finally:
        os.close(fd)
    rig.log("guest memory mapped", on(port), f"bytes={MEM_SIZE}")


def test_mem_table_overlapping_regions(rig):
    """Refused (the connection may stay: nothing was mapped for good)."""
    fds = [vr.memfd(1 << 20, True) for _ in range(2)]
    try:
        with rig.connect() as fe:
            fe.handshake()
            regs = [Region(0, 1 << 20, UVA), Region(1 << 19, 1 << 20, UVA + (1 << 24))]
            assert fe.ack(vr.SET_MEM_TABLE, vr.mem_table(regs), fds) not in (0, CLOSED)
            still_in_sync(fe)
    finally:
        for fd in fds:
            os.close(fd)
    rig.log("memory table rejected", "overlap", on("vm1"))


# --- rings ---------------------------------------------------------------------


@pytest.mark.parametrize("num", [0, 3, 65536])
def test_ring_size_refused(rig, num):
    with rig.connect() as fe:
        fe.handshake()
        assert fe.ack(vr.SET_VRING_NUM, vr.vring_state(0, num)) not in (0, CLOSED)
        still_in_sync(fe)
    rig.log(REFUSED, on("vm1"))


# vm1 has one queue pair: rings 0 and 1, and its control queue at 2 (the
# ring a frontend that forwards its control queue gives it); 3 is the
# first index no ring has.
FIRST_BAD_RING = 3


def _bad_index_request(req: str, index: int) -> tuple[int, bytes, list[int]]:
    if req == "NUM":
        return vr.SET_VRING_NUM, vr.vring_state(index, 256), []
    if req == "ADDR":
        return vr.SET_VRING_ADDR, vr.vring_addr(index, UVA, UVA + 0x2000, UVA + 0x1000), []
    if req == "BASE":
        return vr.SET_VRING_BASE, vr.vring_state(index, 0), []
    if req == "ENABLE":
        return vr.SET_VRING_ENABLE, vr.vring_state(index, 1), []
    code = {"KICK": vr.SET_VRING_KICK, "CALL": vr.SET_VRING_CALL, "ERR": vr.SET_VRING_ERR}[req]
    return code, vr.u64(index), [vr.eventfd()]


@pytest.mark.parametrize(
    "req,index",
    [
        ("NUM", FIRST_BAD_RING),
        ("NUM", 0xFFFF_FFFF),
        ("ADDR", FIRST_BAD_RING),
        ("BASE", FIRST_BAD_RING),
        ("ENABLE", 0x8000_0000),
        ("KICK", FIRST_BAD_RING),
        ("CALL", 255),
        ("ERR", FIRST_BAD_RING),
    ],
)
def test_vring_index_out_of_range(rig, req, index):
    """vm1 has rings 0 and 1 and its control queue, 2; nothing above."""
    code, payload, fds = _bad_index_request(req, index)
    try:
        with rig.connect() as fe:
            fe.handshake()
            assert fe.ack(code, payload, fds) not in (0, CLOSED)
            still_in_sync(fe)
    finally:
        for fd in fds:
            os.close(fd)
    rig.log(REFUSED, on("vm1"))


@pytest.mark.parametrize("index", [FIRST_BAD_RING, 0xFFFF_FFFF])
def test_get_vring_base_bad_index_is_answered(rig, index):
    with rig.connect() as fe:
        fe.handshake()
        fe.send(vr.GET_VRING_BASE, vr.vring_state(index, 0), need_reply=True)
        answered_or_closed(fe, vr.GET_VRING_BASE)


@pytest.mark.parametrize("where", ["outside", "straddling-the-end"])
def test_vring_addr_outside_guest_memory(rig, where):
    with rig.connect() as fe:
        fe.handshake()
        memfd, buf = memory_table(fe)
        try:
            fe.ok(vr.SET_VRING_NUM, vr.vring_state(TXQ, RING_SIZE))
            if where == "outside":
                addrs = (0x1000, 0x3000, 0x2000)  # desc, used, avail: no region there
            else:
                end = UVA + MEM_SIZE
                addrs = (end - 0x1000, end + 0x1000, end - 0x10)
            r = fe.ack(vr.SET_VRING_ADDR, vr.vring_addr(TXQ, *addrs))
            assert r != 0, "ring addresses outside guest memory acknowledged as a success"
        finally:
            buf.close()
            os.close(memfd)


@pytest.mark.parametrize("base", [0x10000, 0xFFFF_FFFF])
def test_vring_base_beyond_the_ring(rig, base):
    with rig.connect() as fe:
        fe.handshake()
        assert fe.ack(vr.SET_VRING_BASE, vr.vring_state(0, base)) not in (0, CLOSED)
        still_in_sync(fe)
    rig.log(REFUSED, on("vm1"))


def _not_an_eventfd(kind: str) -> tuple[int, list[int]]:
    """(fd to send, fds to close afterwards)."""
    if kind == "pipe":
        r, w = os.pipe()
        return r, [r, w]
    if kind == "memfd":
        fd = vr.memfd(4096, True)
        return fd, [fd]
    r, w = os.pipe()  # closed-pipe: the write end is gone, the read end says EOF forever
    os.close(w)
    return r, [r]


@pytest.mark.parametrize("kind", ["pipe", "memfd", "closed-pipe"])
def test_kick_fd_not_an_eventfd(rig, kind):
    fd, to_close = _not_an_eventfd(kind)
    try:
        with rig.connect() as fe:
            fe.handshake()
            refused_then_closed(fe.ack(vr.SET_VRING_KICK, vr.u64(0), [fd]), fe)
    finally:
        for f in to_close:
            os.close(f)
    rig.log("kick descriptor of ring 0 is not an eventfd", on("vm1"))
    rig.log(CLOSING, on("vm1"))


@pytest.mark.parametrize("which", ["call", "err"])
def test_call_or_err_fd_is_a_pipe(rig, which):
    code = {"call": vr.SET_VRING_CALL, "err": vr.SET_VRING_ERR}[which]
    r, w = os.pipe()
    try:
        with rig.connect() as fe:
            fe.handshake()
            refused_then_closed(fe.ack(code, vr.u64(1), [w]), fe)
    finally:
        os.close(r)
        os.close(w)
    rig.log(f"{which} descriptor of ring 1 is not an eventfd", on("vm1"))


def test_blocking_eventfds_as_kick_and_call(rig):
    """Kick and call without O_NONBLOCK (cleared again after the daemon set
    it on the shared file): frames are still served and the ring still
    stops on GET_VRING_BASE, so no daemon thread blocked on them."""
    tx0 = harness.total(rig.port_stats("vm1"), "tx_packets")
    t = tx_ring(rig, "vm1", blocking=True)
    try:
        for i in (1, 2):
            vr.set_blocking(t.kick)
            vr.set_blocking(t.call)
            assert t.send_frame() == i
            assert t.ring.wait_used(i), f"frame {i} not served (used idx {t.ring.used_idx()})"
        t.fe.send(vr.GET_VRING_BASE, vr.vring_state(TXQ, 0))
        assert vr.VRING_STATE.unpack(t.fe.reply(vr.GET_VRING_BASE).payload) == (TXQ, 2)
    finally:
        t.close()
    assert harness.total(rig.port_stats("vm1"), "tx_packets") == tx0 + 2


def test_call_counter_driven_to_its_maximum(rig):
    """A call eventfd at 0xfffffffffffffffe: a write would block; the worker
    serves the frame anyway and the ring stops when asked."""
    tx0 = harness.total(rig.port_stats("vm1"), "tx_packets")
    t = tx_ring(rig, "vm1")
    try:
        os.eventfd_write(t.call, 0xFFFF_FFFF_FFFF_FFFE)
        assert t.send_frame() == 1
        assert t.ring.wait_used(1)
        t.fe.send(vr.GET_VRING_BASE, vr.vring_state(TXQ, 0))
        assert vr.VRING_STATE.unpack(t.fe.reply(vr.GET_VRING_BASE).payload) == (TXQ, 1)
        assert os.eventfd_read(t.call) == 0xFFFF_FFFF_FFFF_FFFE
    finally:
        t.close()
    assert harness.total(rig.port_stats("vm1"), "tx_packets") == tx0 + 1


def _more_than_32_fds(rig, code: int, payload: bytes, fds: list[int]) -> None:
    """The kernel truncates the fds (MSG_CTRUNC): the daemon must refuse the
    message or close, never read on out of sync and leave us waiting."""
    try:
        with rig.connect() as fe:
            fe.handshake()
            fe.send(code, payload, fds, need_reply=True)
            m = answered_or_closed(fe, code)
            if m != CLOSED:
                assert m.u64() != 0, "a truncated fd list acknowledged as a success"
                still_in_sync(fe)
    finally:
        for fd in fds:
            os.close(fd)


def test_more_than_32_fds_on_a_kick(rig):
    fds = [vr.eventfd() for _ in range(vr.MAX_FDS + 1)]
    _more_than_32_fds(rig, vr.SET_VRING_KICK, vr.u64(0), fds)


def test_more_than_32_fds_on_a_memory_table(rig):
    """33 regions and 33 fds. This passes today only by luck: after the fds
    are cut, the daemon reads the table's first bytes as the next header
    (request 33, flags 0), which is invalid, so it closes."""
    n = vr.MAX_FDS + 1
    fds = [vr.memfd(1 << 20, True) for _ in range(n)]
    regs = [Region(i << 24, 1 << 20, UVA + (i << 24)) for i in range(n)]
    _more_than_32_fds(rig, vr.SET_MEM_TABLE, vr.mem_table(regs), fds)
    rig.log_re(ENDED_VM1)


def test_ftruncate_attack_on_accepting_port(rig):
    """vm3 accepts an unsealed memfd; the frontend shrinks it under a running
    ring: the daemon survives the SIGBUS, closes vm3's connection only."""
    t = tx_ring(rig, "vm3", sealed=False)
    try:
        assert t.send_frame(3) == 1
        assert t.ring.wait_used(1)
        t.buf.close()  # our own mapping would fault too
        os.ftruncate(t.memfd, 4096)
        os.eventfd_write(t.kick, 1)
        assert_closed(t.fe)
    finally:
        t.close()
    rig.log("closing the frontend's connection", on("vm3"), "guest memory shrank under the daemon")
    rig.log(DISCONNECTED, on("vm3"))


# --- the dirty-page log is guest memory too (issue 36, finding 4) ------------


@pytest.mark.parametrize("kind", ["unsealed-memfd", "regular-file"])
def test_dirty_log_that_could_shrink_is_refused_by_default(rig, kind):
    """vm1 (default: sealed memory only) refuses a log it could lose under
    it, as it refuses such guest memory: the issue's unsealed 512-byte
    memfd, and a regular file. The frontend sees the connection closed
    (SET_LOG_BASE's reply cannot say no)."""
    if kind == "unsealed-memfd":
        fd = vr.memfd(512, sealed=False)
    else:
        fd = os.open(str(rig.daemon.workdir), os.O_TMPFILE | os.O_RDWR, 0o600)
        os.ftruncate(fd, 4096)
    try:
        with rig.connect("vm1") as fe:
            fe.handshake(protocol=vr.PF_REPLY_ACK | vr.PF_LOG_SHMFD)
            fe.send(vr.SET_LOG_BASE, vr.LOG.pack(512, 0), [fd], need_reply=True)
            assert answered_or_closed(fe, vr.SET_LOG_BASE) == CLOSED, "the log was taken"
    finally:
        os.close(fd)
    rig.log("SET_LOG_BASE refused", "not sealed against shrinking", on("vm1"))
    rig.log(CLOSING, on("vm1"))


def test_shrunk_dirty_log_ends_logging_and_the_port_goes_on(rig):
    """The issue's repro on vm3 (unsealed_memory=accept): LOG_ALL and
    LOG_SHMFD, an unsealed 512-byte memfd as the log (taken, under the
    SIGBUS guard), traffic, ftruncate(log, 0), more traffic. The daemon
    lives (it died of SIGBUS, exit 135, before), vm3 keeps forwarding,
    one ERROR line says logging ended, and the port counts it; vm2 goes
    on (the autouse invariants)."""
    fe = rig.connect("vm3")
    fe.handshake(
        features=vr.F_PROTOCOL_FEATURES | vr.F_VERSION_1 | vr.F_LOG_ALL,
        protocol=vr.PF_REPLY_ACK | vr.PF_LOG_SHMFD,
    )
    memfd, buf = memory_table(fe)
    ring = vr.SplitRing(buf, 0, UVA, RING_OFF, RING_SIZE)
    fe.ok(vr.SET_VRING_NUM, vr.vring_state(TXQ, RING_SIZE))
    fe.ok(vr.SET_VRING_ADDR, vr.vring_addr(TXQ, *ring.addrs()))
    fe.ok(vr.SET_VRING_BASE, vr.vring_state(TXQ, 0))
    kick, call = vr.eventfd(), vr.eventfd()
    fe.ok(vr.SET_VRING_KICK, vr.u64(TXQ), [kick])
    fe.ok(vr.SET_VRING_CALL, vr.u64(TXQ), [call])
    t = TxRing(fe, memfd, buf, ring, kick, call)
    log = vr.memfd(512, sealed=False)
    try:
        fe.send(vr.SET_LOG_BASE, vr.LOG.pack(512, 0), [log], need_reply=True)
        fe.reply(vr.SET_LOG_BASE)
        rig.log("dirty-page log set", "covers_mib=16", on("vm3"))
        assert ring.wait_used(t.send_frame())
        view = mmap.mmap(log, 512)
        marked = any(view[:])
        view.close()  # our own mapping would fault too
        assert marked, "the used ring's page is not marked in the log"
        os.ftruncate(log, 0)
        for _ in range(3):
            assert ring.wait_used(t.send_frame()), "vm3 stopped forwarding"
        still_in_sync(fe)
        rig.log("dirty-page log shrank under the daemon", "logging ended", on("vm3"))
        assert settled_count(rig, "dirty-page log shrank", on("vm3")) == 1
        assert rig.port_stats("vm3")["dirty_log_shrank"] == 1
        rig.log("dirty-page log set", "sealed=false", on("vm3"))  # under the guard
    finally:
        t.close()
        os.close(log)


# --- requests that owe a reply -------------------------------------------------


@pytest.mark.parametrize(
    "oversize",
    ["size-past-config-space", "offset-plus-size-overflows", "message-past-max"],
)
def test_get_config_oversize(rig, oversize):
    with rig.connect() as fe:
        fe.handshake()
        if oversize == "size-past-config-space":
            payload = vr.CONFIG.pack(0, 0xFFFF_0000, 0)
        elif oversize == "offset-plus-size-overflows":
            payload = vr.CONFIG.pack(0xFFFF_FFFF, 1, 0) + bytes(1)
        else:
            payload = vr.CONFIG.pack(0, 0x2000, 0) + bytes(0x2000)
        fe.send(vr.GET_CONFIG, payload, need_reply=True)
        m = answered_or_closed(fe, vr.GET_CONFIG)
        if m != CLOSED:
            # An error is a reply without config bytes (vhost-user.rst).
            assert vr.CONFIG.unpack(m.payload[:12])[1] == 0 and len(m.payload) == 12, m
            still_in_sync(fe)
    rig.log_re(ENDED_VM1)


@pytest.mark.parametrize(
    "req",
    [
        "SET_LOG_BASE",
        "SET_LOG_BASE-past-its-file",
        "SET_LOG_BASE-offset-overflows",
        "GET_MAX_MEM_SLOTS",
        "ADD_MEM_REG",
        "SET_VRING_ENABLE-2",
    ],
)
def test_refused_request_is_answered(rig, req):
    """need_reply with REPLY_ACK: an answer (or a close) is owed, whatever
    the daemon thinks of the request."""
    fd = vr.memfd(1 << 20, True)
    code, payload, fds = {
        "SET_LOG_BASE": (vr.SET_LOG_BASE, vr.LOG.pack(1 << 20, 0), [fd]),
        # A log area longer than its file would fault the daemon when written.
        "SET_LOG_BASE-past-its-file": (vr.SET_LOG_BASE, vr.LOG.pack(1 << 21, 0), [fd]),
        "SET_LOG_BASE-offset-overflows": (
            vr.SET_LOG_BASE,
            vr.LOG.pack(2, 0xFFFF_FFFF_FFFF_FFFF),
            [fd],
        ),
        "GET_MAX_MEM_SLOTS": (vr.GET_MAX_MEM_SLOTS, b"", []),
        "ADD_MEM_REG": (vr.ADD_MEM_REG, bytes(8) + Region(0, 1 << 20, UVA).pack(), [fd]),
        "SET_VRING_ENABLE-2": (vr.SET_VRING_ENABLE, vr.vring_state(0, 2), []),
    }[req]
    try:
        with rig.connect() as fe:
            fe.handshake()
            fe.send(code, payload, fds, need_reply=True)
            answered_or_closed(fe, code)
    finally:
        os.close(fd)


@pytest.mark.parametrize("nfds", [0, 2])
def test_memory_slot_requests_with_the_wrong_descriptors_are_answered(rig, nfds):
    """ADD_MEM_REG carries exactly one descriptor. With none or two and
    NEED_REPLY, the vhost crate refused it without the ack it owes, and
    the frontend waited for ever (issue 36, finding 7): now an error ack,
    and the connection goes on. REM_MEM_REG (which should carry none; the
    crate closes any) is answered either way."""
    fd = vr.memfd(1 << 20, True)
    region = bytes(8) + Region(1 << 30, 1 << 20, UVA + (1 << 32)).pack()
    try:
        with rig.connect("vm1") as fe:
            fe.handshake(protocol=vr.PF_REPLY_ACK | vr.PF_CONFIGURE_MEM_SLOTS)
            assert fe.ack(vr.ADD_MEM_REG, region, [fd] * nfds) not in (0, CLOSED)
            still_in_sync(fe)
            # Not there: refused, and answered.
            assert fe.ack(vr.REM_MEM_REG, region, [fd] * nfds) not in (0, CLOSED)
            still_in_sync(fe)
            # One descriptor: taken; then removed with two riding along.
            assert fe.ack(vr.ADD_MEM_REG, region, [fd]) == 0
            assert fe.ack(vr.REM_MEM_REG, region, [fd] * nfds) == 0
            still_in_sync(fe)
    finally:
        os.close(fd)


def test_memory_slots_and_the_dirty_log_refuse_what_would_hurt(rig):
    """Memory hotplug and the dirty-page log, negotiated, on a port whose
    transmit ring runs: an overlapping region, a region in use by the ring,
    a region that is not there, and log areas past their file are refused
    without harm (an error, or the connection closed where the request
    owes an answer the vhost crate does not send); a good region comes and
    goes; frames keep flowing."""
    fe = rig.connect("vm1")
    fe.handshake(
        protocol=vr.PF_REPLY_ACK
        | vr.PF_MQ
        | vr.PF_CONFIG
        | vr.PF_CONFIGURE_MEM_SLOTS
        | vr.PF_LOG_SHMFD
    )
    memfd, buf = memory_table(fe)
    ring = vr.SplitRing(buf, 0, UVA, RING_OFF, RING_SIZE)
    fe.ok(vr.SET_VRING_NUM, vr.vring_state(TXQ, RING_SIZE))
    fe.ok(vr.SET_VRING_ADDR, vr.vring_addr(TXQ, *ring.addrs()))
    fe.ok(vr.SET_VRING_BASE, vr.vring_state(TXQ, 0))
    kick, call = vr.eventfd(False), vr.eventfd(False)
    fe.ok(vr.SET_VRING_KICK, vr.u64(TXQ), [kick])
    fe.ok(vr.SET_VRING_CALL, vr.u64(TXQ), [call])
    tx = TxRing(fe, memfd, buf, ring, kick, call)
    try:
        assert ring.wait_used(tx.send_frame())
        assert fe.get_u64(vr.GET_MAX_MEM_SLOTS) == 32
        other = vr.memfd(1 << 20, True)
        try:
            far = Region(1 << 30, 1 << 20, UVA + (1 << 32))
            # Overlapping the table's region in guest-physical addresses.
            overlap = Region(MEM_SIZE // 2, 1 << 20, UVA + (1 << 32))
            assert fe.ack(vr.ADD_MEM_REG, bytes(8) + overlap.pack(), [other]) not in (0, CLOSED)
            still_in_sync(fe)
            assert fe.ack(vr.ADD_MEM_REG, bytes(8) + far.pack(), [other]) == 0
            assert fe.ack(vr.REM_MEM_REG, bytes(8) + far.pack()) == 0
            # Gone already; and the region the ring lies in.
            assert fe.ack(vr.REM_MEM_REG, bytes(8) + far.pack()) not in (0, CLOSED)
            inuse = Region(0, MEM_SIZE, UVA)
            assert fe.ack(vr.REM_MEM_REG, bytes(8) + inuse.pack()) not in (0, CLOSED)
            assert ring.wait_used(tx.send_frame()), "the ring still runs"
            # A log area inside its file is taken and answered.
            fe.send(vr.SET_LOG_BASE, vr.LOG.pack(1 << 12, 0), [other], need_reply=True)
            m = answered_or_closed(fe, vr.SET_LOG_BASE)
            assert m != CLOSED
            assert ring.wait_used(tx.send_frame())
        finally:
            os.close(other)
    finally:
        tx.close()
    for size, offset in [(1 << 21, 0), (2, 0xFFFF_FFFF_FFFF_FFFF)]:
        with rig.connect("vm1") as fe:
            fe.handshake(protocol=vr.PF_REPLY_ACK | vr.PF_LOG_SHMFD)
            fd = vr.memfd(1 << 20, True)
            try:
                fe.send(vr.SET_LOG_BASE, vr.LOG.pack(size, offset), [fd], need_reply=True)
                m = answered_or_closed(fe, vr.SET_LOG_BASE)
                assert m == CLOSED, f"a log area past its file was taken: {m}"
            finally:
                os.close(fd)
    rig.log("SET_LOG_BASE refused", on("vm1"))


def test_send_rarp_and_set_log_fd(rig):
    """The two requests the vhost crate does not dispatch. SEND_RARP, with
    RARP acked, puts one broadcast RARP frame from the given MAC into the
    switch (the sink sees it) and is acked; for a group address, or without
    RARP acked, it is refused and the connection goes on. SET_LOG_FD takes
    its eventfd and is acked. Either one with a payload of the wrong size,
    bad flags, or the wrong descriptors ends the connection."""
    # A sink of its own, out of the way of vm2's traffic to sink0: only
    # broadcasts reach it.
    rarp_sink = "02:00:00:00:00:77"
    rig.daemon.command("add-port", "--sink", f"rarp0,mac={rarp_sink}")

    def sink_rx() -> int:
        return harness.total(harness.port(rig.daemon.stats(), "rarp0"), "rx_packets")

    before = sink_rx()
    mac = bytes.fromhex("525400abcdef")
    with rig.connect("vm1") as fe:
        fe.handshake(protocol=vr.PF_REPLY_ACK | vr.PF_RARP)
        assert fe.ack(vr.SEND_RARP, mac + bytes(2)) == 0
        assert harness.poll(lambda: sink_rx() == before + 1, timeout=5), "no RARP at the sink"
        assert fe.ack(vr.SEND_RARP, bytes([1]) + mac[1:] + bytes(2)) not in (0, CLOSED)
        still_in_sync(fe)
        ev = vr.eventfd()
        try:
            assert fe.ack(vr.SET_LOG_FD, vr.u64(0), [ev]) == 0
        finally:
            os.close(ev)
        still_in_sync(fe)
    rig.log("announced the VM's MAC", "52:54:00:ab:cd:ef", on("vm1"))
    with rig.connect("vm1") as fe:
        fe.handshake()  # no RARP
        assert fe.ack(vr.SEND_RARP, mac + bytes(2)) not in (0, CLOSED)
        still_in_sync(fe)
    assert sink_rx() == before + 1, "a refused SEND_RARP sent a frame"
    ev = vr.eventfd()
    try:
        for code, payload, fds, flags in [
            (vr.SEND_RARP, mac, [], None),  # 6 bytes, not 8
            (vr.SEND_RARP, mac + bytes(2), [ev], None),
            (vr.SET_LOG_FD, vr.u64(0), [], None),
            (vr.SET_LOG_FD, vr.u64(0), [ev, ev], None),
            (vr.SEND_RARP, mac + bytes(2), [], vr.VERSION | vr.REPLY),
        ]:
            with rig.connect("vm1") as fe:
                fe.handshake(protocol=vr.PF_REPLY_ACK | vr.PF_RARP)
                fe.send(code, payload, fds, flags=flags)
                assert_closed(fe)
    finally:
        os.close(ev)
        rig.daemon.command("del-port", "rarp0")


# --- lines a peer can cause (issue 36, finding 6) --------------------------------

CTRL = 2  # vm1's control queue: ring 2 x queue pairs (1)


def ctrl_ring(rig: Rig) -> TxRing:
    """vm1's control queue running (CTRL_VQ and MQ acked), with nothing
    else: the daemon serves it on a thread of its own."""
    fe = rig.connect("vm1")
    fe.handshake(features=vr.F_PROTOCOL_FEATURES | vr.F_VERSION_1 | vr.F_CTRL_VQ | vr.F_MQ)
    memfd, buf = memory_table(fe)
    ring = vr.SplitRing(buf, 0, UVA, RING_OFF, RING_SIZE)
    fe.ok(vr.SET_VRING_NUM, vr.vring_state(CTRL, RING_SIZE))
    fe.ok(vr.SET_VRING_ADDR, vr.vring_addr(CTRL, *ring.addrs()))
    fe.ok(vr.SET_VRING_BASE, vr.vring_state(CTRL, 0))
    kick, call = vr.eventfd(), vr.eventfd()
    fe.ok(vr.SET_VRING_KICK, vr.u64(CTRL), [kick])
    fe.ok(vr.SET_VRING_CALL, vr.u64(CTRL), [call])
    return TxRing(fe, memfd, buf, ring, kick, call)


def vq_pairs_set(t: TxRing, pairs: int, n: int) -> None:
    """`n` VQ_PAIRS_SET commands (class 4, command 0) asking for `pairs`,
    100 at a time; each batch answered before the next."""
    while n > 0:
        k = min(100, n)
        for i in range(k):
            off = DATA_OFF + 8 * i
            t.buf[off : off + 4] = bytes([4, 0, pairs, 0])
            t.ring.push_chain([(off, 4, False), (off + 4, 1, True)])
        os.eventfd_write(t.kick, 1)
        assert t.ring.wait_used(t.ring.avail_idx), "control commands not answered"
        n -= k


def test_control_queue_floods_log_a_bounded_number_of_lines(rig):
    """10,000 accepted VQ_PAIRS_SET (10,000 INFO lines before), then 200
    times 20 refused ones and a SET_VRING_ENABLE, which restarts the
    queue's thread (2,000 WARN lines before: each thread began a fresh
    limit). The limits are the port's, per reason."""
    t = ctrl_ring(rig)
    try:
        start = time.monotonic()
        vq_pairs_set(t, 1, 10_000)
        for _ in range(200):
            vq_pairs_set(t, 0, 20)  # 0 pairs: VIRTIO_NET_ERR
            t.fe.ok(vr.SET_VRING_ENABLE, vr.vring_state(CTRL, 1))
        elapsed = time.monotonic() - start
        p = rig.port_stats("vm1")
        assert p["ctrl_accepted"] >= 10_000 and p["ctrl_refused"] >= 4_000, p
        for what in ("control command accepted", "control command refused"):
            n = settled_count(rig, what, on("vm1"))
            assert 1 <= n <= line_bound(elapsed), f"{n} lines {what!r} in {elapsed:.1f} s"
        # Once the limit has refilled, the next line of each says how many
        # were held back.
        let_limits_refill()
        vq_pairs_set(t, 1, 1)
        vq_pairs_set(t, 0, 1)
        rig.log_re(r"control command accepted.*held_back=[1-9]")
        rig.log_re(r"control command refused.*held_back=[1-9]")
    finally:
        t.close()
    let_limits_refill()


def test_features_and_rarp_requests_log_a_bounded_number_of_lines(rig):
    """SET_FEATURES and SEND_RARP, each taken, 300 times: one line each
    before, without limit."""
    mac = bytes.fromhex("525400ab3601")
    with rig.connect("vm1") as fe:
        fe.handshake(protocol=vr.PF_REPLY_ACK | vr.PF_RARP)
        start = time.monotonic()
        for _ in range(300):
            fe.ok(vr.SET_FEATURES, vr.u64(vr.F_PROTOCOL_FEATURES | vr.F_VERSION_1))
            assert fe.ack(vr.SEND_RARP, mac + bytes(2)) == 0
        elapsed = time.monotonic() - start
    for what in ("features negotiated", "announced the VM's MAC"):
        n = settled_count(rig, what, on("vm1"))
        assert 1 <= n <= line_bound(elapsed), f"{n} lines {what!r} in {elapsed:.1f} s"
    let_limits_refill()


def test_refusals_across_reconnects_log_a_bounded_number_of_lines(rig):
    """50 connections of 20 refused requests each (features never
    offered): the refusal limit was the connection's, so a frontend got
    10 more lines with each reconnect, and the reason's own line had no
    limit at all."""
    start = time.monotonic()
    for _ in range(50):
        with rig.connect("vm1") as fe:
            fe.handshake()
            for _ in range(20):
                assert fe.ack(vr.SET_FEATURES, vr.u64(1 << 63)) not in (0, CLOSED)
    elapsed = time.monotonic() - start
    for what in (REFUSED, "frontend acked features we never offered", "frontend connected"):
        n = settled_count(rig, what, on("vm1"))
        assert 1 <= n <= line_bound(elapsed), f"{n} lines {what!r} in {elapsed:.1f} s"
    let_limits_refill()


# --- connections ---------------------------------------------------------------


def test_reconnect_loop(rig):
    """50 connections in a row, each served; their lines are limited per
    port (issue 36: a frontend can reconnect at will)."""
    start = time.monotonic()
    for i in range(50):
        with rig.connect() as fe:
            assert fe.get_u64(vr.GET_FEATURES), f"connection {i}"
    elapsed = time.monotonic() - start
    rig.log(DISCONNECTED, on("vm1"))
    for what in ("frontend connected", DISCONNECTED):
        n = settled_count(rig, what, on("vm1"))
        assert 1 <= n <= line_bound(elapsed), f"{n} lines {what!r} in {elapsed:.1f} s"
    let_limits_refill()


def test_idle_connection_holds_only_its_port(rig):
    """A frontend that connects and says nothing keeps vm1 (one frontend at a
    time): a second client waits, vm3 serves others meanwhile, and the second
    is served as soon as the first goes."""
    idle = rig.connect("vm1")
    try:
        assert harness.poll(lambda: rig.port_stats("vm1")["connected"], 5.0)
        second = rig.connect("vm1")
        try:
            second.send(vr.GET_FEATURES)
            with pytest.raises(vr.Hang):
                second.answer(1.0)
            with rig.connect("vm3") as other:
                assert other.get_u64(vr.GET_FEATURES)
            assert idle.get_u64(vr.GET_FEATURES)
            idle.close()
            assert second.reply(vr.GET_FEATURES, 5.0).u64()
        finally:
            second.close()
    finally:
        idle.close()
    assert rig.count_lines(2, "frontend connected", on("vm1")) == 2


# --- the daemon's local servers ------------------------------------------------


def test_idle_control_connections_do_not_lock_out_stats(rig):
    idle = []
    try:
        for _ in range(70):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(rig.daemon.control))
            idle.append(s)
        assert rig.daemon.stats()["ports"]
        # The oldest idle ones were closed to make room.
        idle[0].settimeout(5)
        assert idle[0].recv(1) == b""
    finally:
        for s in idle:
            s.close()
    rig.log("too many open connections: closed the oldest", 'server="control"')


def test_idle_metrics_connections_do_not_lock_out_a_scrape(rig):
    host, port = rig.metrics.split(":")
    idle = []
    try:
        for _ in range(70):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        with urllib.request.urlopen(f"http://{rig.metrics}/metrics", timeout=10) as r:
            assert r.status == 200 and b"vadapt_queue_packets" in r.read()
        idle[0].settimeout(5)
        try:
            assert idle[0].recv(1) == b""
        except ConnectionResetError:
            pass
    finally:
        for s in idle:
            s.close()
    rig.log("too many open connections: closed the oldest", 'server="metrics"')


@pytest.mark.parametrize("kind", ["text", "binary"])
def test_garbage_on_the_control_socket(rig, kind):
    """A line that is not a request: a JSON error, or (not even UTF-8) a
    closed connection; stats still answer afterwards (the fixture)."""
    rnd = random.Random(7)
    if kind == "text":
        line = "".join(rnd.choice('{}[]:,"abcxyz0123 ') for _ in range(512)).encode()
    else:
        line = rnd.randbytes(512).replace(b"\n", b" ")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(rig.daemon.control))
        s.sendall(line + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    if kind == "text" or data:
        resp = json.loads(data)
        assert "bad request" in resp.get("error", ""), resp
