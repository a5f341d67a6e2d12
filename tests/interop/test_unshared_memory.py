"""A QEMU guest whose memory vadapt cannot share gets one WARN line naming
the port and the fix (issue 30, obstacle 4), instead of a NIC that is
silently dead: memfd memory with share=off (QEMU sends the files but writes
its private copies) and no memory backend at all (QEMU sends no memory
table). The guest boots, its driver starts the device, and the daemon says
it once.
"""

from __future__ import annotations

import pytest

import harness
from harness import QEMU, Proc, Vadapt, poll

WARNING = "its guest memory is not shared with vadapt"


def guest_argv(socket, memory: list[str]) -> list[str]:
    kernel, initrd = harness.guest_files()
    return [
        QEMU,
        "-nodefaults",
        "-display", "none",
        "-no-reboot",
        "-machine", "pc,accel=tcg",
        "-cpu", "max",
        "-m", "512M",
        *memory,
        "-chardev", f"socket,id=c0,path={socket}",
        "-netdev", "vhost-user,id=n0,chardev=c0",
        "-device", "virtio-net-pci,netdev=n0,vectors=0",
        "-kernel", str(kernel),
        "-initrd", str(initrd),
        "-serial", "stdio",
        "-append", "console=ttyS0 quiet panic=-1 vadapt.ip=10.0.2.1/24 vadapt.role=shell",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "memory",
    [
        ["-object", "memory-backend-memfd,id=mem,size=512M,share=off", "-numa", "node,memdev=mem"],
        [],
    ],
    ids=["memfd-share-off", "no-backend"],
)
def test_one_warning_names_the_port_and_the_fix(vadapt_bin, qemu, procs, memory):
    sock = procs.workdir / "vmu.sock"
    d = Vadapt(vadapt_bin, procs.workdir, procs, ["--vm", f"name=vmu,socket={sock}"]).start([sock])
    g = procs.add(Proc("guest", guest_argv(sock, memory), procs.workdir, stdin=True))
    g.wait_for(r"VADAPT-RESULT .*\bboot=ok", 120)

    def warned() -> list[str]:
        return [line for line in d.proc.lines if WARNING in line]

    assert poll(warned, 30, 0.2), d.proc.tail()
    # The guest's driver is up and has nothing more to start: still one line.
    g.send("exit")
    g.wait_exit(30)
    lines = warned()
    assert len(lines) == 1, lines
    assert 'port="vmu"' in lines[0] and "share=on" in lines[0], lines[0]
    assert "<memoryBacking>" in lines[0], lines[0]
    assert d.proc.alive()
