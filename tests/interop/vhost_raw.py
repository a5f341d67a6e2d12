"""A raw vhost-user frontend (standard library only) for the hostile tests.

It speaks the wire format of QEMU's docs/interop/vhost-user.rst byte by
byte, so a test can send anything: truncated headers, wrong sizes, wrong
fds, bad indices. Every receive has a timeout; `answer()` tells a reply
from a closed connection and turns "neither within the timeout" into a
test failure (a backend must never leave a frontend hanging).

Also here: memfds (sealed or not) for memory tables, `SplitRing`, the
driver side of one split virtqueue in such a memfd, enough to hand the
daemon a transmit descriptor and see it come back used, and `PackedRing`,
the same for a packed virtqueue, able to write any descriptor and flag
combination.
"""

from __future__ import annotations

import array
import errno
import fcntl
import mmap
import os
import socket
import struct
import time
from dataclasses import dataclass

# Requests (vhost-user.rst, "Front-end message types").
GET_FEATURES = 1
SET_FEATURES = 2
SET_OWNER = 3
RESET_OWNER = 4
SET_MEM_TABLE = 5
SET_LOG_BASE = 6
SET_LOG_FD = 7
SET_VRING_NUM = 8
SET_VRING_ADDR = 9
SET_VRING_BASE = 10
GET_VRING_BASE = 11
SET_VRING_KICK = 12
SET_VRING_CALL = 13
SET_VRING_ERR = 14
GET_PROTOCOL_FEATURES = 15
SET_PROTOCOL_FEATURES = 16
GET_QUEUE_NUM = 17
SET_VRING_ENABLE = 18
SEND_RARP = 19
GET_CONFIG = 24
SET_CONFIG = 25
GET_MAX_MEM_SLOTS = 36
ADD_MEM_REG = 37
REM_MEM_REG = 38

# Header flags.
VERSION = 0x1
REPLY = 0x4
NEED_REPLY = 0x8

HEADER = struct.Struct("<III")
U64 = struct.Struct("<Q")
VRING_STATE = struct.Struct("<II")
VRING_ADDR = struct.Struct("<IIQQQQ")
MEMORY = struct.Struct("<II")
REGION = struct.Struct("<QQQQ")
CONFIG = struct.Struct("<III")
LOG = struct.Struct("<QQ")

NO_FD = 0x100  # "u64 with index | 0x100 = no fd" (KICK/CALL/ERR)

# Virtio feature bits.
F_CTRL_VQ = 1 << 17
F_MQ = 1 << 22
F_LOG_ALL = 1 << 26
F_INDIRECT_DESC = 1 << 28
F_EVENT_IDX = 1 << 29
F_PROTOCOL_FEATURES = 1 << 30
F_VERSION_1 = 1 << 32
F_RING_PACKED = 1 << 34

# Protocol feature bits.
PF_MQ = 1 << 0
PF_LOG_SHMFD = 1 << 1
PF_RARP = 1 << 2
PF_REPLY_ACK = 1 << 3
PF_CONFIG = 1 << 9
PF_CONFIGURE_MEM_SLOTS = 1 << 15

# fcntl constants (the fcntl module lacks them before Python 3.9 / on some libcs).
F_ADD_SEALS = getattr(fcntl, "F_ADD_SEALS", 1033)
F_SEAL_SHRINK = getattr(fcntl, "F_SEAL_SHRINK", 2)

MAX_FDS = 32  # the most fds a vhost-user message may carry (VHOST_MEMORY_MAX_NREGIONS)


class Hang(AssertionError):
    """The backend neither answered nor closed the connection in time."""


@dataclass
class Msg:
    request: int
    flags: int
    payload: bytes

    def u64(self) -> int:
        assert len(self.payload) == 8, f"reply payload is {len(self.payload)} bytes, not a u64"
        return U64.unpack(self.payload)[0]


CLOSED = "closed"


def u64(v: int) -> bytes:
    return U64.pack(v & 0xFFFF_FFFF_FFFF_FFFF)


def vring_state(index: int, num: int) -> bytes:
    return VRING_STATE.pack(index & 0xFFFF_FFFF, num & 0xFFFF_FFFF)


def vring_addr(index: int, desc: int, used: int, avail: int, flags: int = 0, log: int = 0):
    return VRING_ADDR.pack(index & 0xFFFF_FFFF, flags, desc, used, avail, log)


@dataclass
class Region:
    gpa: int
    size: int
    uva: int
    offset: int = 0

    def pack(self) -> bytes:
        m = 0xFFFF_FFFF_FFFF_FFFF
        return REGION.pack(self.gpa & m, self.size & m, self.uva & m, self.offset & m)


def mem_table(regions: list[Region], nregions: int | None = None) -> bytes:
    n = len(regions) if nregions is None else nregions
    return MEMORY.pack(n, 0) + b"".join(r.pack() for r in regions)


def memfd(size: int, sealed: bool, name: str = "vadapt-hostile") -> int:
    """A memfd of `size` bytes; `sealed`: F_SEAL_SHRINK added (as QEMU does)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealed else 0))
    os.ftruncate(fd, size)
    if sealed:
        fcntl.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)
    return fd


def eventfd(blocking: bool = False) -> int:
    flags = os.EFD_CLOEXEC | (0 if blocking else os.EFD_NONBLOCK)
    return os.eventfd(0, flags)


def set_blocking(fd: int) -> None:
    """Clear O_NONBLOCK on the open file (shared with whoever else holds it)."""
    fl = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)


class Frontend:
    """One connection to a vhost-user socket."""

    def __init__(self, path, timeout: float = 3.0, connect_timeout: float = 5.0):
        self.path = str(path)
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(connect_timeout)
        self.sock.connect(self.path)
        self.sock.settimeout(timeout)
        self.reply_ack = False

    # --- context manager -------------------------------------------------------

    def __enter__(self) -> Frontend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # --- sending ---------------------------------------------------------------

    def send_raw(self, data: bytes, fds: list[int] = ()) -> bool:
        """Send bytes (fds as SCM_RIGHTS on the first byte); False if the
        backend had already closed the connection."""
        try:
            if fds:
                anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                n = self.sock.sendmsg([data], anc)
                if n < len(data):
                    self.sock.sendall(data[n:])
            else:
                self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.ECONNRESET):
                return False
            raise

    def send(
        self,
        request: int,
        payload: bytes = b"",
        fds: list[int] = (),
        flags: int | None = None,
        size: int | None = None,
        need_reply: bool = False,
    ) -> bool:
        if flags is None:
            flags = VERSION | (NEED_REPLY if need_reply else 0)
        size = len(payload) if size is None else size
        return self.send_raw(HEADER.pack(request, flags, size) + payload, fds)

    # --- receiving -------------------------------------------------------------

    def _recv_exact(self, n: int, deadline: float) -> bytes | None:
        buf = b""
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def answer(self, timeout: float | None = None) -> Msg | str:
        """The next message from the backend, or CLOSED if it closed the
        connection; Hang if neither happens within `timeout` s."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        try:
            hdr = self._recv_exact(HEADER.size, deadline)
            if hdr is None:
                return CLOSED
            req, flags, size = HEADER.unpack(hdr)
            payload = self._recv_exact(size, deadline) if size else b""
            if payload is None:
                return CLOSED
        except TimeoutError as e:
            raise Hang(f"no reply and no close within {timeout} s: the frontend hangs") from e
        return Msg(req, flags, payload)

    def reply(self, request: int, timeout: float | None = None) -> Msg:
        """A reply to `request` (the connection must stay open)."""
        m = self.answer(timeout)
        assert m != CLOSED, f"backend closed the connection instead of answering {request}"
        assert m.request == request, f"reply to {m.request}, expected {request}"
        assert m.flags & REPLY and m.flags & 0x3 == VERSION, f"bad reply flags {m.flags:#x}"
        return m

    def ack(self, request: int, payload: bytes = b"", fds: list[int] = ()) -> int | str:
        """Send with need_reply: the REPLY_ACK value (0 = ok), or CLOSED."""
        assert self.reply_ack, "negotiate REPLY_ACK first (handshake())"
        if not self.send(request, payload, fds, need_reply=True):
            return CLOSED
        m = self.answer()
        if m == CLOSED:
            return CLOSED
        assert m.request == request, f"reply to {m.request}, expected {request}"
        return m.u64()

    def ok(self, request: int, payload: bytes = b"", fds: list[int] = ()) -> None:
        r = self.ack(request, payload, fds)
        assert r == 0, f"request {request} refused ({r})"

    def closed_within(self, timeout: float = 5.0) -> bool:
        """True if the backend closes the connection within `timeout` s
        (anything it sends meanwhile is read and discarded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = self.answer(max(0.01, deadline - time.monotonic()))
            except Hang:
                return False
            if m == CLOSED:
                return True
        return False

    def get_u64(self, request: int) -> int:
        self.send(request)
        return self.reply(request).u64()

    # --- negotiation -----------------------------------------------------------

    def handshake(self, features: int | None = None, protocol: int | None = None) -> int:
        """GET_FEATURES, PROTOCOL_FEATURES with REPLY_ACK, SET_FEATURES:
        afterwards every need_reply message is answered. Returns the
        features offered."""
        offered = self.get_u64(GET_FEATURES)
        assert offered & F_PROTOCOL_FEATURES, f"backend offers no PROTOCOL_FEATURES: {offered:#x}"
        poff = self.get_u64(GET_PROTOCOL_FEATURES)
        assert poff & PF_REPLY_ACK, f"backend offers no REPLY_ACK: {poff:#x}"
        if protocol is None:
            protocol = poff & (PF_REPLY_ACK | PF_MQ | PF_CONFIG)
        self.send(SET_PROTOCOL_FEATURES, u64(protocol))
        self.reply_ack = bool(protocol & PF_REPLY_ACK)
        if features is None:
            features = F_PROTOCOL_FEATURES | (offered & F_VERSION_1)
        if self.reply_ack:
            self.ok(SET_FEATURES, u64(features))
        else:
            self.send(SET_FEATURES, u64(features))
        return offered


# --- a split virtqueue in guest memory -----------------------------------------

DESC = struct.Struct("<QIHH")  # addr, len, flags, next
VIRTQ_DESC_F_WRITE = 2


class SplitRing:
    """The driver side of one split virtqueue of `size` entries laid out at
    `offset` in `buf` (a mapping of the region whose guest-physical address
    is `gpa` and frontend address `uva`)."""

    def __init__(self, buf: mmap.mmap, gpa: int, uva: int, offset: int, size: int):
        self.buf, self.size = buf, size
        self.desc_off = offset
        self.avail_off = offset + 16 * size
        used = self.avail_off + 4 + 2 * size + 2
        self.used_off = (used + 3) & ~3
        self.end = self.used_off + 4 + 8 * size + 2
        self.gpa, self.uva = gpa, uva
        self.next_desc = 0
        self.avail_idx = 0
        buf[offset : self.end] = bytes(self.end - offset)

    def store_u16(self, off: int, value: int) -> None:
        """One aligned 2-byte store at `off`, as a driver publishes an
        index. Not `struct.pack_into`: it zeroes its target before packing,
        and a device that reads the index in between sees it run backwards
        (vadapt then marks the ring corrupted, as it should)."""
        with memoryview(self.buf) as m, m.cast("H") as h:
            h[off // 2] = value

    def addrs(self) -> tuple[int, int, int]:
        """(desc, used, avail) as frontend addresses for SET_VRING_ADDR."""
        return (self.uva + self.desc_off, self.uva + self.used_off, self.uva + self.avail_off)

    def push(self, data_off: int, length: int, writable: bool = False) -> None:
        """Make one single-descriptor chain available: `length` bytes at
        offset `data_off` of the region."""
        i = self.next_desc % self.size
        flags = VIRTQ_DESC_F_WRITE if writable else 0
        struct.pack_into(
            "<QIHH", self.buf, self.desc_off + 16 * i, self.gpa + data_off, length, flags, 0
        )
        self.store_u16(self.avail_off + 4 + 2 * (self.avail_idx % self.size), i)
        self.avail_idx = (self.avail_idx + 1) & 0xFFFF
        self.store_u16(self.avail_off + 2, self.avail_idx)
        self.next_desc += 1

    def push_chain(self, segs: list[tuple[int, int, bool]]) -> None:
        """Make one chain available: one descriptor per (data_off, length,
        writable), linked in order (a control-queue command and its ack
        byte, say)."""
        first = self.next_desc % self.size
        for k, (off, length, writable) in enumerate(segs):
            i = (self.next_desc + k) % self.size
            flags = (VIRTQ_DESC_F_WRITE if writable else 0) | (1 if k + 1 < len(segs) else 0)
            nxt = (i + 1) % self.size if k + 1 < len(segs) else 0
            struct.pack_into(
                "<QIHH", self.buf, self.desc_off + 16 * i, self.gpa + off, length, flags, nxt
            )
        self.next_desc += len(segs)
        self.store_u16(self.avail_off + 4 + 2 * (self.avail_idx % self.size), first)
        self.avail_idx = (self.avail_idx + 1) & 0xFFFF
        self.store_u16(self.avail_off + 2, self.avail_idx)

    def used_idx(self) -> int:
        return struct.unpack_from("<H", self.buf, self.used_off + 2)[0]

    def wait_used(self, idx: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.used_idx() == idx:
                return True
            time.sleep(0.01)
        return self.used_idx() == idx


# --- a packed virtqueue in guest memory ----------------------------------------

PDESC = struct.Struct("<QIHH")  # addr, len, id, flags
VIRTQ_DESC_F_NEXT = 1
VIRTQ_DESC_F_INDIRECT = 4
VIRTQ_DESC_F_AVAIL = 1 << 7
VIRTQ_DESC_F_USED = 1 << 15
EVENT = struct.Struct("<HH")  # off_wrap, flags
RING_EVENT_FLAGS_ENABLE = 0
RING_EVENT_FLAGS_DISABLE = 1
RING_EVENT_FLAGS_DESC = 2


def avail_bits(wrap: bool) -> int:
    """AVAIL and USED as the driver marks a descriptor available in a lap
    whose wrap counter is `wrap` (spec 2.8.1)."""
    return VIRTQ_DESC_F_AVAIL if wrap else VIRTQ_DESC_F_USED


@dataclass
class Seg:
    """One descriptor of a packed buffer: `length` bytes at guest-physical
    `addr`, with `flags` (WRITE, INDIRECT; NEXT and the AVAIL/USED bits are
    added by `PackedRing.push_chain` unless it is told otherwise)."""

    addr: int
    length: int
    flags: int = 0


class PackedRing:
    """The driver side of one packed virtqueue of `size` descriptors (any of
    1..=32768) laid out at `offset` in `buf` (a mapping of the region whose
    guest-physical address is `gpa` and frontend address `uva`): the
    descriptor ring, then the driver event suppression structure, then the
    device's. Both sides start at position 0 with wrap counter 1 (the
    vhost-user base 0x8000). `push_chain` writes any descriptors, so a test
    can hand the device bad ones; `take_used` follows the device's used
    descriptors as a driver does."""

    def __init__(self, buf: mmap.mmap, gpa: int, uva: int, offset: int, size: int):
        assert offset % 16 == 0
        self.buf, self.size = buf, size
        self.desc_off = offset
        self.driver_event_off = offset + 16 * size
        self.device_event_off = self.driver_event_off + 4
        self.end = self.device_event_off + 4
        self.gpa, self.uva = gpa, uva
        self.next_avail, self.avail_wrap = 0, True
        self.last_used, self.used_wrap = 0, True
        self.next_id = 0
        # Ring descriptors each buffer id in flight took, oldest first.
        self.in_flight: dict[int, list[int]] = {}
        # Zeroed flags: neither available nor used in lap 1.
        buf[offset : self.end] = bytes(self.end - offset)

    def addrs(self) -> tuple[int, int, int]:
        """(desc, used, avail) for SET_VRING_ADDR: the device area goes in
        the used field and the driver area in the avail one."""
        return (
            self.uva + self.desc_off,
            self.uva + self.device_event_off,
            self.uva + self.driver_event_off,
        )

    @staticmethod
    def base() -> int:
        """SET_VRING_BASE of a fresh ring: position 0, avail wrap counter 1."""
        return 0x8000

    def start_at(self, base: int) -> None:
        """Both sides start at `base` (SET_VRING_BASE form: position in bits
        0-14, wrap counter in bit 15): the descriptors before the position
        look used in this lap, the others in the previous one, as a driver
        leaves them."""
        pos, wrap = base & 0x7FFF, bool(base & 0x8000)
        assert pos < self.size
        self.next_avail, self.avail_wrap = pos, wrap
        self.last_used, self.used_wrap = pos, wrap
        both = VIRTQ_DESC_F_AVAIL | VIRTQ_DESC_F_USED
        for i in range(self.size):
            lap = wrap if i < pos else not wrap
            self.write_desc(i, 0, 0, 0, both if lap else 0)

    def write_desc(self, i: int, addr: int, length: int, id_: int, flags: int) -> None:
        PDESC.pack_into(self.buf, self.desc_off + 16 * i, addr, length, id_, flags)

    def desc(self, i: int) -> tuple[int, int, int, int]:
        """(addr, len, id, flags) of ring descriptor `i`."""
        return PDESC.unpack_from(self.buf, self.desc_off + 16 * i)

    def push_chain(
        self,
        segs: list[Seg],
        id_: int | None = None,
        raw_flags: bool = False,
        first_flags: int | None = None,
    ) -> int:
        """Make one buffer of `segs` available at the driver's position (the
        first descriptor's flags written last) and return its id. With
        `raw_flags` each seg's flags are written as given (no NEXT, no
        AVAIL/USED added); `first_flags` overrides the first descriptor's."""
        if id_ is None:
            id_ = self.next_id
            self.next_id = (self.next_id + 1) % self.size
        pos, wrap = self.next_avail, self.avail_wrap
        first = None
        for k, s in enumerate(segs):
            flags = s.flags
            if not raw_flags:
                flags |= avail_bits(wrap)
                if k + 1 < len(segs):
                    flags |= VIRTQ_DESC_F_NEXT
            if k == 0:
                first = (pos, flags if first_flags is None else first_flags)
                # Flags 0 are available in neither lap: the body goes first.
                self.write_desc(pos, s.addr, s.length, id_, 0)
            else:
                self.write_desc(pos, s.addr, s.length, id_, flags)
            pos += 1
            if pos == self.size:
                pos, wrap = 0, not wrap
        # Publish: the first descriptor's flags last. Its body is written
        # again, unchanged, so the order of the 16 bytes' stores does not
        # matter.
        i, f = first
        a, n, d_id, _ = self.desc(i)
        self.write_desc(i, a, n, d_id, f)
        self.next_avail, self.avail_wrap = pos, wrap
        self.in_flight.setdefault(id_, []).append(len(segs))
        return id_

    def push(self, data_off: int, length: int, writable: bool = False, id_=None) -> int:
        """One single-descriptor buffer: `length` bytes at offset `data_off`
        of the region."""
        return self.push_chain([Seg(self.gpa + data_off, length, 2 if writable else 0)], id_)

    def take_used(self) -> list[tuple[int, int]]:
        """Every used buffer the device published since the last call, as
        (id, len); the driver's position skips the descriptors each took."""
        out = []
        while True:
            _, length, id_, flags = self.desc(self.last_used)
            avail = bool(flags & VIRTQ_DESC_F_AVAIL)
            used = bool(flags & VIRTQ_DESC_F_USED)
            if not (avail == used == self.used_wrap):
                return out
            took = self.in_flight.get(id_)
            assert took, f"the device used id {id_}, which is not in flight"
            n = took.pop(0)
            if not took:
                del self.in_flight[id_]
            out.append((id_, length))
            self.last_used += n
            while self.last_used >= self.size:
                self.last_used -= self.size
                self.used_wrap = not self.used_wrap

    def wait_used(self, n: int, timeout: float = 5.0) -> list[tuple[int, int]]:
        """The next `n` used buffers (fewer if they do not come in time)."""
        deadline = time.monotonic() + timeout
        got: list[tuple[int, int]] = []
        while True:
            got += self.take_used()
            if len(got) >= n or time.monotonic() >= deadline:
                return got
            time.sleep(0.01)

    def device_event(self) -> tuple[int, int]:
        """(off_wrap, flags) the device wrote."""
        return EVENT.unpack_from(self.buf, self.device_event_off)


def frame(dst: bytes, src: bytes, size: int = 60, hdr_len: int = 12, body: bytes = b"") -> bytes:
    """A virtio-net header (all zero) and an Ethernet frame of `size` bytes
    whose payload starts with `body` (zeros after it)."""
    assert 14 + len(body) <= size
    eth = dst + src + b"\x88\xb5" + body + bytes(size - 14 - len(body))
    return bytes(hdr_len) + eth


# VLAN tags' TPIDs: 802.1Q, 802.1ad (the outer tag of QinQ), and the
# pre-standard QinQ TPID some switches still send.
TPID_8021Q = 0x8100
TPID_8021AD = 0x88A8
TPID_QINQ_OLD = 0x9100


def tagged_frame(
    dst: bytes,
    src: bytes,
    tags: list[tuple[int, int]] = (),
    ethertype: int = 0x88B5,
    payload: bytes = b"",
    size: int = 60,
    hdr_len: int = 12,
) -> bytes:
    """A virtio-net header (all zero) and an Ethernet frame with VLAN
    `tags`, outermost first, each (TPID, TCI) (e.g. `[(TPID_8021AD, 10),
    (TPID_8021Q, 20)]`: double-tagged, outer VLAN 10, inner 20), then
    `ethertype` and `payload`, zero-padded to `size` bytes (or longer if
    the headers and payload need it)."""
    eth = dst + src
    for tpid, tci in tags:
        eth += struct.pack("!HH", tpid, tci)
    eth += struct.pack("!H", ethertype) + payload
    return bytes(hdr_len) + eth + bytes(max(0, size - len(eth)))
