"""Memory hotplug on a running QEMU guest whose network is on vadapt
(issue 26, item 5): QEMU 7.2 under TCG, the Debian kernel's virtio-net.

Guest A boots with 256 MiB and room for more (`-m 256M,slots=2,maxmem=1G`).
While it runs, QMP `object-add` makes a 128-MiB memfd backend and
`device_add pc-dimm` plugs it in: QEMU tells vadapt with `ADD_MEM_REG`
(vadapt offers `VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS`). `vadapt stats`
then shows A's port with two regions and 384 MiB; A onlines the new memory
(so the kernel may put buffers there), and traffic goes on: pings and a TCP
stream from A to guest B, checked byte for byte (md5) at both ends, before
and after the plug.
"""

from __future__ import annotations

from harness import Guest, Qmp, Vadapt, pattern, poll, port

MAC_A, MAC_B = "52:54:00:5a:00:31", "52:54:00:5a:00:32"
IP_A, IP_B = "10.0.2.1", "10.0.2.2"
PORT = 5031
STREAM_N = 300_000
MIB = 1 << 20


class HotplugGuest(Guest):
    MEM = "256M"
    MAX_MEM = "1G"


def memory(d: Vadapt, name: str) -> tuple[int, int]:
    p = port(d.stats(), name)
    return p["memory_regions"], p["memory_bytes"]


def stream(a: Guest, b: Guest, n: int) -> None:
    """A TCP stream A -> B, checked at both ends (B's receiver runs in the
    background of its shell, its result in /tmp/recvN.txt)."""
    want = pattern(STREAM_N)
    b.shell(f"vrecv {PORT} >/tmp/recv{n}.txt 2>&1 &")
    sent = a.shell_result(f"vsend {IP_B} {PORT} {STREAM_N}", "send_bytes", timeout=150)
    got = b.wait_file(f"/tmp/recv{n}.txt", "recv_bytes", timeout=60)
    assert sent["rc"] == "0", sent
    assert (int(sent["send_bytes"]), sent["send_md5"]) == want, sent
    assert (int(got["recv_bytes"]), got["recv_md5"]) == want, got


def test_pc_dimm_hotplug_keeps_traffic_flowing(vadapt_bin, qemu, procs):
    socks = {n: procs.workdir / f"vm{n}.sock" for n in "ab"}
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [a for n in "ab" for a in ("--vm", f"name=vm{n},socket={socks[n]},queues=1")],
        cpus=None,  # two TCG guests need both cores more than the daemon does
    ).start(list(socks.values()))
    qmp = procs.workdir / "a.qmp"
    a = HotplugGuest(
        procs,
        "guest-a",
        socks["a"],
        MAC_A,
        f"{IP_A}/24",
        "shell",
        extra=["-qmp", f"unix:{qmp},server=on,wait=off"],
    )
    b = Guest(procs, "guest-b", socks["b"], MAC_B, f"{IP_B}/24", "shell")
    assert a.booted()["mac"] == MAC_A
    assert b.booted()["mac"] == MAC_B
    for g in (a, b):
        g.proc.wait_for("VADAPT-READY", timeout=30)
    assert poll(lambda: memory(d, "vma") == (1, 256 * MIB), timeout=10), memory(d, "vma")
    a.shell(f"ping -c 3 -W 5 {IP_B} >/dev/null")
    stream(a, b, 1)

    total_before = int(a.shell("grep MemTotal /proc/meminfo")[-1].split()[1])
    # The plug: a memfd backend (shared, as vhost-user needs) and a DIMM.
    mon = Qmp(qmp)
    backend = {"qom-type": "memory-backend-memfd", "id": "mem1", "size": 128 * MIB, "share": True}
    mon.cmd("object-add", **backend)
    mon.cmd("device_add", driver="pc-dimm", id="dimm1", memdev="mem1")
    assert poll(lambda: memory(d, "vma") == (2, 384 * MIB), timeout=30), memory(d, "vma")
    d.proc.wait_for(r"guest memory region added.*port=\"?vma", timeout=5)
    assert memory(d, "vmb") == (1, 512 * MIB), "the other port is untouched"

    # The guest takes the memory (ACPI tells its kernel; the blocks are
    # onlined here, as udev would); traffic goes on, whole.
    def mem_total_kib() -> int:
        a.shell(
            "for s in /sys/devices/system/memory/memory*/state; do"
            " grep -q offline $s && echo online >$s; done; true"
        )
        return int(a.shell("grep MemTotal /proc/meminfo")[-1].split()[1])

    assert poll(lambda: mem_total_kib() >= total_before + 120 * 1024, timeout=30, step=1), (
        f"MemTotal {mem_total_kib()} KiB, {total_before} before the plug: the DIMM is not online"
    )
    a.shell(f"ping -c 3 -W 5 {IP_B} >/dev/null")
    stream(a, b, 2)
    mon.close()
    for g in (a, b):
        assert g.poweroff() == 0
