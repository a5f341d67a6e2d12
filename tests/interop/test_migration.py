"""Live migration of a QEMU guest between two ports of one running vadapt,
QEMU to QEMU under TCG, with traffic both ways (issue 26).

Guest A (port `vma`) and guest B (port `vmb`) run Debian's virtio-net
driver. Then, as an operator moves a VM:

1. `vadapt add-port --vm name=vma2,...,mac=<A's MAC>`: the destination port,
   with the same MAC as the source port (it is the same VM);
2. a destination QEMU, A's command line plus `-incoming tcp:127.0.0.1:P`,
   on vma2's socket;
3. QMP `migrate` on the source while a TCP stream runs from B into A (the
   daemon writes A's RX buffers while its pages are sent: dirty-page
   logging), a second one from A to B, and B pings A every 50 ms;
4. `query-migrate` until `completed`; the migrated guest announces itself
   (VIRTIO_NET_F_GUEST_ANNOUNCE: QEMU asks it to) or, in the `rarp` cell
   (`guest_announce=off`), QEMU asks vadapt to announce it (SEND_RARP);
   `vadapt del-port vma`; the source QEMU is stopped.

Checks: length and md5 of both streams at both ends; the migrated guest
did not reboot (a file written to its tmpfs before the move is still there,
its uptime went on, the destination QEMU printed no boot); both streams
completed after the switch-over; B's pings to A resume; the announcement
was seen (a broadcast at a sink port, `watch0`), and from the destination's
first frame on nothing but floods reaches the old port (no more than
reaches `watch0`). The figures
(QEMU's `downtime`, the ping gap, pings lost) are printed (`MIGRATION ...`,
pytest `-s`) and written to `migration-<policy>-<mode>-<reader>-<announce>.json` in the test's
tmp dir, or in $VADAPT_MIGRATION_OUT when set (scripts/migration_matrix.sh).
No timing is asserted.

The default run is one cell, interrupt policy with vadapt listening
(server mode); `--migration-matrix` (conftest.py) runs every policy in both
socket modes, one more cell whose receiving application is slow (see
SLOW_READER: it can see a missing dirty log), and the `rarp` cell.

Every cell is an expected failure (not strict) for now: the migrated guest
is sometimes corrupted, see GUEST_CORRUPTED.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import (
    Guest,
    HarnessError,
    Qmp,
    Vadapt,
    dropped,
    outage,
    pattern,
    poll,
    port,
    total,
    wait_path,
)

MAC_A = "52:54:00:5a:00:21"
MAC_B = "52:54:00:5a:00:22"
MAC_WATCH = "02:00:00:5a:00:23"
IP_A, IP_B = "10.0.2.1", "10.0.2.2"
PORT_INTO_A, PORT_INTO_B = 5011, 5012
# `seq 1 N`: ~15.9 MB each way, long enough under TCG for the migration to
# land in the middle of both streams.
STREAM_N = 2_200_000
# Migrate once this much of the stream into A crossed the switch.
MIGRATE_AFTER_BYTES = 1_000_000
PING_INTERVAL_S = 0.05
PINGS = 4000  # 200 s at most; stopped after the streams

# The `slow` cell's receiving application in A reads in 64-KiB gulps, a
# process or two per gulp (about 1-2 MB/s under TCG), so its socket always
# holds data that vadapt wrote into RX buffer pages and the guest has not
# read yet: the guest's TCP keeps those pages (page frags) and its CPU never
# writes them. A page that the migration sent before vadapt wrote it then
# reaches the destination only through vadapt's dirty log. With the `fast`
# reader (busybox nc into a file) the data leaves those pages before the
# switch-over, and a missing log goes unseen: with marking turned off in the
# daemon, the fast cell passed and the slow cell's stream into A arrived
# with the right length and the wrong md5. It runs in the matrix only.
SLOW_READER = (
    "printf '%s\\n' '#!/bin/sh' 'rm -f /tmp/rx.bin'"
    " 'while dd bs=65536 count=1 of=/tmp/chunk 2>/dev/null && [ -s /tmp/chunk ]; do'"
    " 'cat /tmp/chunk >>/tmp/rx.bin; done' >/tmp/slowrx.sh && chmod +x /tmp/slowrx.sh"
)

POLICIES = ["interrupt", "busy-poll", "netap", "eekbp"]
MODES = ["server", "client"]
DEFAULT_CELL = ("interrupt", "server")


class SmallGuest(Guest):
    """Less RAM: fewer pages to send, a shorter migration under TCG."""

    MEM = "256M"


# Every cell is an expected failure (not strict: a pass is XPASS), because
# QEMU 7.2 under TCG itself sometimes corrupts a guest it migrates. Seen with
# vadapt on 2026-11-26 (9e6f10d): with the fast reader 1 failure in 11
# runs, with the slow reader 2 in 6 (a process segfaulting, a shell hung).
# The control experiment, scripts/tcg_migration_control.py, migrates the
# same guest under the same kind of load with QEMU's user networking and no
# vhost-user device at all: on the same day its guests' kernels oopsed
# (list corruption, bad writes and a jump to a data address, each right
# after the switch-over) in 3 of 64 migrations: 2 of 40 with `-cpu max`,
# 1 of 24 with `-cpu qemu64`.
# vadapt's side is checked where TCG does not decide the outcome: every
# page the daemon writes is in the dirty log (vadapt/tests/dirty_log.rs,
# every policy and the NQ pool), and md5 mismatches without a crash were
# seen only with the daemon's logging turned off.
GUEST_CORRUPTED = (
    "QEMU 7.2 under TCG sometimes corrupts a migrated guest, with or without vadapt "
    "(scripts/tcg_migration_control.py): see GUEST_CORRUPTED"
)


def cells() -> list:
    known = pytest.mark.xfail(reason=GUEST_CORRUPTED, strict=False)
    fast = [
        pytest.param(
            p,
            m,
            "fast",
            "guest",
            id=f"{p}-{m}",
            marks=[known] + ([] if (p, m) == DEFAULT_CELL else [pytest.mark.migration_matrix]),
        )
        for p in POLICIES
        for m in MODES
    ]
    slow = pytest.param(
        *DEFAULT_CELL,
        "slow",
        "guest",
        id="-".join(DEFAULT_CELL) + "-slow-reader",
        marks=[known, pytest.mark.migration_matrix],
    )
    rarp = pytest.param(
        *DEFAULT_CELL,
        "fast",
        "rarp",
        id="-".join(DEFAULT_CELL) + "-rarp",
        marks=[known, pytest.mark.migration_matrix],
    )
    return [*fast, slow, rarp]


def pytest_generate_tests(metafunc):
    if {"policy", "mode", "reader", "announce"} <= set(metafunc.fixturenames):
        metafunc.parametrize(("policy", "mode", "reader", "announce"), cells())


def free_tcp_port() -> int:
    """A loopback port free now, for the destination QEMU's `-incoming`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_spec(name: str, sock: Path, mode: str, mac: str) -> str:
    spec = f"name={name},socket={sock},queues=1,mac={mac}"
    return spec + (",mode=client" if mode == "client" else "")


def vadapt_cli(d: Vadapt, *args: str) -> None:
    r = subprocess.run(
        [str(d.binary), *args, "--control", str(d.control)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if r.returncode != 0:
        raise HarnessError(f"vadapt {args} failed rc={r.returncode}: {r.stderr}\n{d.proc.tail()}")


def ping_replies(lines: list[str]) -> list[tuple[int, float]]:
    return [
        (int(m.group(1)), float(m.group(2)))
        for line in lines
        if (m := re.search(r"seq=(\d+) .*time=([0-9.]+) ms", line))
    ]


def out_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("VADAPT_MIGRATION_OUT") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def delivered_to(st: dict, name: str) -> int:
    """Frames the switch sent to port `name`: into its rings, or dropped there."""
    p = port(st, name)
    return total(p, "rx_packets") + dropped(p)


def test_live_migration_under_traffic(
    vadapt_bin, qemu, procs, tmp_path, policy, mode, reader, announce
):
    w = procs.workdir
    a_sock, b_sock, a2_sock = w / "vma.sock", w / "vmb.sock", w / "vma2.sock"
    qmp_a, qmp_a2 = w / "a.qmp", w / "a2.qmp"
    # vadapt listens and QEMU connects (server), or the other way (client).
    chardev = ",server=on,wait=off" if mode == "client" else ""
    d = Vadapt(
        vadapt_bin,
        w,
        procs,
        [
            "--vm", vm_spec("vma", a_sock, mode, MAC_A),
            "--vm", vm_spec("vmb", b_sock, mode, MAC_B),
            # Sees only broadcasts and floods: the announcement.
            "--sink", f"watch0,mac={MAC_WATCH}",
            "--policy", policy,
        ],
        cpus=None,  # two TCG guests need both cores more than the daemon does
    ).start([a_sock, b_sock] if mode == "server" else [])  # fmt: skip

    def qmp_arg(path: Path) -> list[str]:
        return ["-qmp", f"unix:{path},server=on,wait=off"]

    # `rarp`: a guest that cannot announce itself; QEMU asks vadapt to
    # (SEND_RARP).
    net_opts = ",guest_announce=off" if announce == "rarp" else ""
    a = SmallGuest(
        procs, "guest-a", a_sock, MAC_A, f"{IP_A}/24", "shell",
        chardev=chardev, extra=qmp_arg(qmp_a), net_opts=net_opts,
    )  # fmt: skip
    b = SmallGuest(procs, "guest-b", b_sock, MAC_B, f"{IP_B}/24", "shell", chardev=chardev)
    assert a.booted()["mac"] == MAC_A
    assert b.booted()["mac"] == MAC_B
    a.proc.wait_for("VADAPT-READY", timeout=30)
    b.proc.wait_for("VADAPT-READY", timeout=30)
    d.wait_stats(lambda s: port(s, "vma")["connected"] and port(s, "vmb")["connected"])
    assert b.shell_result(f"vping {IP_A} 3", "ping_rx")["ping_rx"] == "3"

    # Proof that the guest does not reboot: a file in its tmpfs, its uptime.
    a.shell("echo before-migration >/tmp/marker")
    uptime_before = float(a.shell("cut -d' ' -f1 /proc/uptime")[-1])

    # Both receivers listen, then both streams and B's pings start.
    want_bytes, want_md5 = pattern(STREAM_N)
    if reader == "slow":
        a.shell(SLOW_READER)
        a.shell(
            f"(nc -l -p {PORT_INTO_A} -e /tmp/slowrx.sh </dev/null; echo VADAPT-RESULT"
            " recv_bytes=$(wc -c </tmp/rx.bin) recv_md5=$(md5sum /tmp/rx.bin | cut -d' ' -f1))"
            " >/tmp/recv.txt 2>&1 &"
        )
    else:
        a.shell(f"vrecv {PORT_INTO_A} >/tmp/recv.txt 2>&1 &")
    b.shell(f"vrecv {PORT_INTO_B} >/tmp/recv.txt 2>&1 &")
    b.shell(f"ping -i {PING_INTERVAL_S} -c {PINGS} -W 1 {IP_A} >/tmp/ping.txt 2>&1 &")
    b.shell(f"vsend {IP_A} {PORT_INTO_A} {STREAM_N} >/tmp/send.txt 2>&1 &")
    a.shell(f"vsend {IP_B} {PORT_INTO_B} {STREAM_N} >/tmp/send.txt 2>&1 &")

    # The destination: a port added at run time with A's MAC, and a QEMU
    # with A's command line waiting for the incoming state.
    migration_port = free_tcp_port()
    incoming = ["-incoming", f"tcp:127.0.0.1:{migration_port}"]
    if mode == "server":
        vadapt_cli(d, "add-port", "--vm", vm_spec("vma2", a2_sock, mode, MAC_A))
        wait_path(a2_sock, 20, d.proc)
    a2 = SmallGuest(
        procs,
        "guest-a2",
        a2_sock,
        MAC_A,
        f"{IP_A}/24",
        "shell",
        chardev=chardev,
        extra=qmp_arg(qmp_a2) + incoming,
        net_opts=net_opts,
    )
    if mode == "client":
        wait_path(a2_sock, 20, a2.proc)
        vadapt_cli(d, "add-port", "--vm", vm_spec("vma2", a2_sock, mode, MAC_A))
    d.wait_stats(lambda s: port(s, "vma2")["connected"], timeout=20)
    src, dst = Qmp(qmp_a), Qmp(qmp_a2)

    # Migrate in the middle of the stream into A.
    deadline = time.monotonic() + 180
    while total(port(d.stats(), "vmb"), "tx_bytes") < MIGRATE_AFTER_BYTES:
        assert time.monotonic() < deadline, "the stream into A did not start"
        time.sleep(0.05)
    # Loopback: QEMU 7.2's default cap of 32 MiB/s only makes it longer.
    src.cmd("migrate-set-parameters", **{"max-bandwidth": 1 << 30})
    watch_before = delivered_to(d.stats(), "watch0")
    started = time.monotonic()
    src.cmd("migrate", uri=f"tcp:127.0.0.1:{migration_port}")
    info: dict = {}

    def finished() -> bool:
        nonlocal info
        info = src.cmd("query-migrate")
        return info.get("status") in ("completed", "failed", "cancelled")

    assert poll(finished, timeout=300, step=0.1), f"migration still {info}"
    migrate_s = time.monotonic() - started
    assert info["status"] == "completed", f"{info}\n{a.proc.tail()}\n{a2.proc.tail()}"
    assert poll(lambda: dst.cmd("query-status")["status"] == "running", timeout=30)
    vmb_rx_at_switch = total(port(d.stats(), "vmb"), "rx_bytes")
    vma2_tx_at_switch = total(port(d.stats(), "vma2"), "tx_bytes")

    # The announcement: the guest's own (VIRTIO_NET_F_GUEST_ANNOUNCE, QEMU
    # asks the migrated guest) or vadapt's RARP for it (SEND_RARP). From the
    # destination's first frame on, the switch delivers A's traffic to vma2
    # and nothing more to vma.
    if announce == "rarp":
        d.proc.wait_for(r"announced the VM's MAC.*port=\"?vma2", timeout=30)
    else:
        assert poll(lambda: total(port(d.stats(), "vma2"), "tx_packets") > 0, timeout=30)
    # Floods (the guests' broadcasts and multicasts: IPv6 neighbour and
    # MLD messages, ARP) still reach every port, the old one and watch0
    # alike; A's unicast traffic would reach the old port only.
    st = d.stats()
    to_old, to_watch = delivered_to(st, "vma"), delivered_to(st, "watch0")
    time.sleep(2)
    st = d.stats()
    more_old = delivered_to(st, "vma") - to_old
    more_watch = delivered_to(st, "watch0") - to_watch
    assert more_old <= more_watch, (
        f"A's traffic went to the old port: {more_old} > {more_watch} floods"
    )
    assert delivered_to(st, "watch0") > watch_before, "no announcement (broadcast) was seen"
    vadapt_cli(d, "del-port", "vma")
    assert "vma" not in [p["name"] for p in d.stats()["ports"]]
    assert src.cmd("query-status")["status"] == "postmigrate"
    src.close()
    a.proc.stop()

    # Both streams complete, after the switch-over, whole.
    got_a, got_b = (g.wait_file("/tmp/recv.txt", "recv_bytes", 300) for g in (a2, b))
    assert (int(got_a["recv_bytes"]), got_a["recv_md5"]) == (want_bytes, want_md5), got_a
    assert (int(got_b["recv_bytes"]), got_b["recv_md5"]) == (want_bytes, want_md5), got_b
    for g in (a2, b):
        sent = g.wait_file("/tmp/send.txt", "send_bytes", 120)
        assert (sent["rc"], int(sent["send_bytes"])) == ("0", want_bytes), (g.name, sent)
    st = d.stats()
    # Some of each stream crossed after the switch-over: into A through vma2,
    # out of A through vma2.
    assert total(port(st, "vma2"), "rx_bytes") > 0, st
    assert total(port(st, "vma2"), "tx_bytes") > vma2_tx_at_switch, st
    assert total(port(st, "vmb"), "rx_bytes") > vmb_rx_at_switch, st

    # Not rebooted: the tmpfs file and the uptime, and no boot on a2.
    assert a2.shell("cat /tmp/marker")[-1] == "before-migration"
    uptime_after = float(a2.shell("cut -d' ' -f1 /proc/uptime")[-1])
    assert uptime_after > uptime_before, (uptime_before, uptime_after)
    assert not any("boot=ok" in line for line in a2.proc.lines), a2.proc.tail()

    # B's pings resumed: replies after the switch-over, and a fresh round.
    b.shell("killall ping 2>/dev/null; true")
    replies = ping_replies(b.shell("cat /tmp/ping.txt", timeout=60))
    assert replies, "no ping reply at all"
    lost, gap_ms = outage(replies, PING_INTERVAL_S * 1000)
    last_seq = max(s for s, _ in replies)
    assert last_seq * PING_INTERVAL_S > migrate_s, "no reply after the switch-over"
    assert b.shell_result(f"vping {IP_A} 3", "ping_rx")["ping_rx"] == "3"
    assert a2.shell_result(f"vping {IP_B} 3", "ping_rx")["ping_rx"] == "3"

    ram = info.get("ram", {})
    figures = {
        "policy": policy,
        "mode": mode,
        "reader": reader,
        "announce": announce,
        "guest_ram": SmallGuest.MEM,
        "stream_bytes_each_way": want_bytes,
        "md5_ok": True,
        "qemu_downtime_ms": info.get("downtime"),
        "qemu_total_time_ms": info.get("total-time"),
        "qemu_setup_time_ms": info.get("setup-time"),
        "ram_transferred_bytes": ram.get("transferred"),
        "ram_dirty_sync_count": ram.get("dirty-sync-count"),
        "ping_interval_ms": PING_INTERVAL_S * 1000,
        "ping_gap_ms": round(gap_ms),
        "pings_lost": lost,
        "ping_replies": len(replies),
    }
    out = out_dir(tmp_path) / f"migration-{policy}-{mode}-{reader}-{announce}.json"
    out.write_text(json.dumps(figures, indent=1) + "\n")
    print("\nMIGRATION " + " ".join(f"{k}={v}" for k, v in figures.items()) + f" file={out}")
    dst.close()
    assert a2.poweroff() == 0
    assert b.poweroff() == 0
