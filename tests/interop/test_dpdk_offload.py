"""DPDK virtio-user with and without its transmit offloads (issue #15):
testpmd's `csum` forwarding engine asks vadapt for checksum and TCP
segmentation offloads, and what leaves vadapt is checked frame by frame.

The rig: testpmd's port 0 is a pcap PMD that reads a file of TCP/IPv4 frames
once (`rx_pcap`); the `csum` engine forwards them to port 1, a virtio-user
port on a vadapt VM port. Depending on the case, port 1's transmit offloads
are
- `tso`: `csum set tcp hw` and `tso set 1448`: TCP frames go out as
  GSO_TCPV4 with partial checksums; DPDK's virtio PMD then negotiates CSUM
  and HOST_TSO4;
- `csum`: `csum set tcp hw` only, frames of at most one MSS, partial
  checksums (NEEDS_CSUM);
- `none`: checksums computed by testpmd in software, no offload negotiated.

vadapt floods the frames (unknown destination) to its only other port, a TAP
device without an address. A TAP takes offloaded frames whole behind their
virtio-net header (docs/offloads.md), so a packet socket with
`PACKET_VNET_HDR` reads each frame with the header the kernel got: a frame
without offload must be at most 1514 bytes with valid IPv4 and TCP
checksums; one marked `NEEDS_CSUM` must verify once its checksum is
completed as the header says (what the kernel would do); a GSO frame must
carry the sender's MSS. The TCP payload put back together by sequence number
must be exactly the file's. Needs root (a TAP device, a packet socket).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import subprocess
import threading
import time

import pytest

from harness import Testpmd, Vadapt, dropped, port, total

MSS = 1448
SRC_MAC = bytes.fromhex("020000000a01")
DST_MAC = bytes.fromhex("020000000a02")  # unknown to the switch: flooded
SRC_IP, DST_IP = bytes([10, 0, 9, 1]), bytes([10, 0, 9, 2])
SPORT, DPORT = 40001, 5201
ISN = 1_000_000
# Frames of the `tso` case: payloads up to 5 MSS + change, so several are cut.
TSO_PAYLOADS = [5 * MSS + 100, MSS, 100, 3 * MSS, 2 * MSS + 1, 7000, 1]
SMALL_PAYLOADS = [MSS, 100, 1000, 1, 700]
FRAMES = 150
UNSEALED = "unsealed_memory=accept"
ETH_P_ALL = 0x0003


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp_frame(seq: int, payload: bytes) -> bytes:
    """An Ethernet/IPv4/TCP frame with a valid IPv4 header checksum and a
    TCP checksum of 0 (testpmd's `csum` engine fills or prepares it)."""
    tcp = struct.pack("!HHIIBBHHH", SPORT, DPORT, seq, 1, 5 << 4, 0x18, 502, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, SRC_IP, DST_IP)
    ip = ip[:10] + struct.pack("!H", csum16(ip)) + ip[12:]
    return DST_MAC + SRC_MAC + b"\x08\x00" + ip + tcp


def write_pcap(path, frames: list[bytes]) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for fr in frames:
            f.write(struct.pack("<IIII", 0, 0, len(fr), len(fr)) + fr)


def stream(sizes: list[int]) -> tuple[list[bytes], bytes]:
    """`FRAMES` frames of one flow with payload sizes cycling through `sizes`,
    and the whole byte stream they carry."""
    rng = random.Random(15)
    frames, data, seq = [], bytearray(), ISN
    for i in range(FRAMES):
        payload = rng.randbytes(sizes[i % len(sizes)])
        frames.append(tcp_frame(seq, payload))
        data += payload
        seq += len(payload)
    return frames, bytes(data)


VNET_HDR_LEN = 10  # struct virtio_net_hdr, as PACKET_VNET_HDR prefixes it
NEEDS_CSUM = 1
GSO_TCPV4 = 1
SOL_PACKET, PACKET_VNET_HDR = 263, 15


def check_frame(raw: bytes) -> tuple[int, bytes, int] | str:
    """(sequence number, payload, gso_type) of a frame of the flow read with
    its virtio-net header, or what is wrong with it."""
    flags, gso_type, _hdr_len, gso_size, csum_start, csum_offset = struct.unpack(
        "<BBHHHH", raw[:VNET_HDR_LEN]
    )
    fr = bytearray(raw[VNET_HDR_LEN:])
    if gso_type == 0 and len(fr) > 1514:
        return f"plain frame of {len(fr)} B, larger than the MTU"
    if gso_type not in (0, GSO_TCPV4):
        return f"gso_type {gso_type}"
    if gso_type == GSO_TCPV4 and gso_size != MSS:
        return f"gso_size {gso_size}, the sender asked for {MSS}"
    if flags & NEEDS_CSUM:
        # Complete it as the kernel would: the field holds the pseudo-header
        # sum; the checksum of everything from csum_start, that field
        # included, goes into it.
        at = csum_start + csum_offset
        if at + 2 > len(fr):
            return f"csum_start {csum_start} / csum_offset {csum_offset} outside the frame"
        fr[at : at + 2] = struct.pack("!H", csum16(bytes(fr[csum_start:])))
    ip = bytes(fr[14:34])
    total_len = struct.unpack("!H", ip[2:4])[0]
    if csum16(ip) != 0:
        return "bad IPv4 header checksum"
    tcp = bytes(fr[34 : 14 + total_len])
    pseudo = SRC_IP + DST_IP + struct.pack("!BBH", 0, 6, len(tcp))
    if csum16(pseudo + tcp) != 0:
        return f"bad TCP checksum (frame of {len(fr)} B, flags {flags})"
    seq = struct.unpack("!I", tcp[4:8])[0]
    return seq, tcp[(tcp[12] >> 4) * 4 :], gso_type


def capture(sock: socket.socket, frames: list[bytes], stop: threading.Event) -> None:
    """Keep every frame of the test's flow that the TAP receives."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            fr = sock.recv(1 << 17)
        except TimeoutError:
            continue
        eth = fr[VNET_HDR_LEN:]
        if eth[12:14] == b"\x08\x00" and eth[23] == 6 and eth[36:38] == struct.pack("!H", DPORT):
            frames.append(fr)


@pytest.mark.parametrize("case", ["tso", "csum", "none"])
def test_csum_engine_offloads_arrive_as_valid_frames(vadapt_bin, testpmd, procs, case):
    if os.geteuid() != 0:
        from conftest import missing

        missing("a TAP device and a packet socket need root")
    tap = f"dpotap{os.getpid() % 10000}"
    sock_path = procs.workdir / "vm1.sock"
    frames, data = stream(TSO_PAYLOADS if case == "tso" else SMALL_PAYLOADS)
    pcap = procs.workdir / "in.pcap"
    write_pcap(pcap, frames)

    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock_path},queues=1,{UNSEALED}", "--tap", tap],
    ).start([sock_path])
    # No address and no IPv6 on the TAP: the kernel sends nothing into the switch.
    subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{tap}.disable_ipv6=1"], check=True, timeout=10)
    subprocess.run(["ip", "link", "set", tap, "up"], check=True, timeout=10)
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    rx.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    rx.bind((tap, 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    got: list[bytes] = []
    stop = threading.Event()
    t = threading.Thread(target=capture, args=(rx, got, stop))
    t.start()
    try:
        fe = Testpmd(
            procs,
            "testpmd",
            [
                "--single-file-segments",
                "--vdev",
                f"net_pcap0,rx_pcap={pcap}",
                "--vdev",
                f"net_virtio_user1,path={sock_path},queues=1",
            ],
            ["--forward-mode=csum", "--mbuf-size=9216", "--no-flush-rx"],
        )
        fe.cmd("port stop 1")
        if case in ("tso", "csum"):
            fe.cmd("csum set tcp hw 1")
        if case == "tso":
            fe.cmd(f"tso set {MSS} 1")
        mark = fe.cmd("port start 1")
        fe.proc.wait_for(r"Port 1: ", timeout=30, since=mark)
        sent = fe.run_for(2.0)
        assert sent.tx == FRAMES and sent.tx_dropped == 0, (sent, fe.proc.tail())

        def drained(st):
            return total(port(st, "vm1"), "tx_packets") > 0 and total(
                port(st, tap), "rx_packets"
            ) + dropped(port(st, tap)) >= total(port(st, "vm1"), "tx_packets")

        st = d.wait_stats(drained)
        # The packet socket may still hold frames the TAP took.
        deadline = time.monotonic() + 10
        while sum(len(f) - VNET_HDR_LEN - 54 for f in got) < len(data) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
    finally:
        stop.set()
        t.join()
        rx.close()

    vm, tp = port(st, "vm1"), port(st, tap)
    # Frames flooded to vm1 while testpmd restarted its port are not this
    # test's business (`port_down`); any other drop is.
    drops = [(k, n) for p in (vm, tp) for q in p["queues"] for k, n in q.get("dropped", {}).items()]
    assert all(k == "port_down" for k, n in drops if n), drops
    checked = [check_frame(f) for f in got]
    bad = [r for r in checked if isinstance(r, str)]
    assert not bad, bad[:5]
    by_seq = {seq: payload for seq, payload, _ in checked}
    out, seq = bytearray(), ISN
    while seq in by_seq and seq < ISN + len(data):
        out += by_seq[seq]
        seq += len(by_seq[seq])
    assert bytes(out) == data, f"{len(out)} of {len(data)} payload bytes in order"
    # What crossed vadapt: GSO frames whole to the TAP when the sender asked
    # for TSO, plain frames otherwise; nothing cut or completed on the way
    # (a TAP takes offloads whole).
    gso = sum(1 for _, _, t in checked if t == GSO_TCPV4)
    whole = total(tp, "gso_whole")
    big = sum(1 for f in frames if len(f) - 54 > MSS)
    if case == "tso":
        assert gso >= big and whole >= big, (gso, whole, big)
    else:
        assert gso == 0 and whole == 0, (gso, whole)
    assert total(tp, "gso_frames") == 0 and total(tp, "csum_completed") == 0, tp
    assert fe.quit() == 0
    assert d.proc.alive(), d.proc.tail()
