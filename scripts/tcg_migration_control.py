#!/usr/bin/env python3
"""The control experiment for the live-migration test's open failure: does
QEMU under TCG corrupt a migrating guest with no vhost-user device at all?

A guest of the interop image (256 MiB, memfd memory as vhost-user needs,
`-cpu` as given) runs QEMU's user networking instead of a vhost-user port,
and a load like the test's slow reader: `seq | md5sum` in a loop, and the
same stream through a reader that forks a `dd` and a `cat` per 64 KiB. It
is migrated from QEMU to QEMU on loopback `--rounds` times in a row (each
destination started with `-incoming defer`), and after each round the
script asks the guest's kernel log for oopses and segfaults and checks the
md5 sums its loops wrote. Nothing of vadapt runs.

    scripts/tcg_migration_control.py [--runs 4] [--rounds 5] [--cpu max]

Prints one line per round and a summary: migrations, guests that crashed
(kernel oops, or no answer on the console), wrong md5 sums. Needs QEMU and
the guest image (scripts/install-deps.sh, scripts/guest-image.sh).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))

from test_migration import SLOW_READER, free_tcp_port  # noqa: E402

import harness  # noqa: E402
from harness import Guest, Proc, ProcGroup, Qmp, guest_files, pattern, poll  # noqa: E402

STREAM_N = 2_200_000
CRASH = r"-e 'BUG:' -e Oops -e segfault -e 'general protection' -e 'invalid opcode'"


def boot(group: ProcGroup, i: int, cpu: str, incoming: bool) -> tuple[Guest, Path]:
    kernel, initrd = guest_files()
    qmp = group.workdir / f"q{i}.qmp"
    argv = [
        harness.QEMU, "-nodefaults", "-display", "none", "-no-reboot",
        "-machine", "pc,accel=tcg", "-cpu", cpu, "-smp", "1", "-m", "256M",
        "-object", "memory-backend-memfd,id=mem,size=256M,share=on",
        "-numa", "node,memdev=mem",
        "-netdev", "user,id=n0",
        "-device", "virtio-net-pci,netdev=n0,vectors=0,mac=52:54:00:5a:00:21",
        "-kernel", str(kernel), "-initrd", str(initrd), "-serial", "stdio",
        "-append", "console=ttyS0 quiet panic=-1 vadapt.ip=10.0.2.15/24 vadapt.role=shell",
        "-qmp", f"unix:{qmp},server=on,wait=off",
    ]  # fmt: skip
    if incoming:
        argv += ["-incoming", "defer"]
    g = object.__new__(Guest)  # a Guest on another netdev: its methods, our argv
    g.name = f"g{i}"
    g.proc = group.add(Proc(g.name, argv, group.workdir, stdin=True))
    return g, qmp


def one_run(cpu: str, rounds: int, want_md5: str) -> tuple[int, int, int]:
    """(migrations, crashed guests, wrong sums)."""
    group = ProcGroup(harness.short_tmpdir("tcg-migration-"))
    try:
        g, qmp = boot(group, 0, cpu, incoming=False)
        g.booted()
        g.proc.wait_for("VADAPT-READY", timeout=30)
        g.shell(SLOW_READER)
        g.shell(
            f"(while true; do seq 1 {STREAM_N} | /tmp/slowrx.sh;"
            " md5sum /tmp/rx.bin | cut -c1-32 >>/tmp/sums; done) >/dev/null 2>&1 &"
        )
        g.shell(
            f"(while true; do seq 1 {STREAM_N} | md5sum | cut -c1-32 >>/tmp/sums; done)"
            " >/dev/null 2>&1 &"
        )
        time.sleep(5)
        src = Qmp(qmp)
        for r in range(1, rounds + 1):
            port = free_tcp_port()
            g2, qmp2 = boot(group, r, cpu, incoming=True)
            dst = Qmp(qmp2)
            dst.cmd("migrate-incoming", uri=f"tcp:127.0.0.1:{port}")
            src.cmd("migrate-set-parameters", **{"max-bandwidth": 1 << 30})
            src.cmd("migrate", uri=f"tcp:127.0.0.1:{port}")
            info: dict = {}

            def done(src=src) -> bool:
                nonlocal info
                info = src.cmd("query-migrate")
                return info.get("status") in ("completed", "failed", "cancelled")

            poll(done, timeout=300, step=0.1)
            if info.get("status") != "completed":
                print(f"round {r}: migration {info.get('status')}: {info}", flush=True)
                return r - 1, 0, 0
            poll(lambda dst=dst: dst.cmd("query-status")["status"] == "running", timeout=30)
            src.close()
            g.proc.stop()
            g, src = g2, dst
            time.sleep(8)
            try:
                crashes = int(g.shell(f"dmesg | grep -c {CRASH} || true", 60)[-1])
                sums = [x.split() for x in g.shell("sort /tmp/sums | uniq -c", 60)]
            except AssertionError:
                print(f"round {r}: the guest does not answer (see {g.proc.log_path})", flush=True)
                return r, 1, 0
            wrong = sum(int(n) for n, m in sums if m != want_md5)
            print(
                f"round {r}: downtime {info.get('downtime')} ms; kernel oopses {crashes};"
                f" md5 sums right {sum(int(n) for n, m in sums) - wrong}, wrong {wrong}",
                flush=True,
            )
            if crashes or wrong:
                return r, int(crashes > 0), wrong
        return rounds, 0, 0
    finally:
        group.stop_all()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=4, help="guests booted (default 4)")
    ap.add_argument("--rounds", type=int, default=5, help="migrations per guest (default 5)")
    ap.add_argument("--cpu", default="max", help="QEMU -cpu model (the tests use max)")
    a = ap.parse_args()
    _, want = pattern(STREAM_N)
    total = [0, 0, 0]
    for i in range(a.runs):
        print(f"-- guest {i + 1}/{a.runs}, -cpu {a.cpu}", flush=True)
        for k, v in enumerate(one_run(a.cpu, a.rounds, want)):
            total[k] += v
    print(
        f"SUMMARY -cpu {a.cpu}: {total[0]} migrations, {total[1]} guests crashed,"
        f" {total[2]} wrong md5 sums; no vhost-user device, QEMU user networking"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
