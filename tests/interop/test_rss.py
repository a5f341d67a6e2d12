"""The guest's own RSS (`VIRTIO_NET_F_RSS`, issue #27 item 4) against QEMU 7.2.

vadapt offers `VIRTIO_NET_F_RSS` and serves a control queue a frontend gives
it, but QEMU 7.2 does neither for a vhost-user backend: its virtio-net
clears `VIRTIO_NET_F_RSS` for a vhost peer unless its eBPF steering program
is loaded (which attaches to a TAP backend only), and it answers the control
queue itself (see `dataplane/src/queue/ctrl_queue.rs`). This test shows it
on the real thing: a Linux guest whose device asks for RSS (`rss=on`) boots,
the features it acks (its sysfs `features`) have the control queue and not
bit 60, what QEMU passes on to vadapt has neither (QEMU keeps the control
queue to itself), and vadapt answers no control command. The guest's key
and table are tested with the synthetic guest (`vadapt/tests/rss.rs`).
"""

from __future__ import annotations

from test_packed_ring import negotiated

from harness import Guest, Vadapt, port

RSS = 1 << 60
CTRL_VQ = 1 << 17
MAC = "52:54:00:5a:00:30"


def test_qemu_72_keeps_rss_and_the_control_queue_from_a_vhost_user_backend(vadapt_bin, qemu, procs):
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock},queues=1"],
        cpus=None,
    ).start([sock])
    g = Guest(procs, "guest", sock, MAC, "10.0.30.1/24", "shell", net_opts=",rss=on")
    assert g.booted()["mac"] == MAC
    g.proc.wait_for("VADAPT-READY", timeout=30)
    features = negotiated(d, "vm1")
    assert not features & RSS, f"QEMU 7.2 passed VIRTIO_NET_F_RSS on: {features:#x}"
    # QEMU does not even tell the backend that the guest has a control queue.
    assert not features & CTRL_VQ, f"{features:#x}"
    # The guest's side: its device has a control queue (QEMU's) and no RSS.
    bits = next(
        line.strip()
        for line in g.shell("cat /sys/bus/virtio/devices/virtio*/features")
        if set(line.strip()) <= {"0", "1"} and len(line.strip()) >= 61
    )
    assert bits[17] == "1", bits
    assert bits[60] == "0", bits
    p = port(d.stats(), "vm1")
    assert (p.get("ctrl_accepted", 0), p.get("ctrl_refused", 0)) == (0, 0), p
    assert g.poweroff() == 0
