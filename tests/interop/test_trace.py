"""`vadapt trace PORT FRAME-SPEC` against a running `vadapt serve` (issue 40,
item 6): the release binary's command line, the control socket and the
switch's decision, for a frame of each fate: switched to a port's static
address, flooded in its VLAN only, dropped by port security, by the IP
source guard, by the VLAN rule. Nothing is sent: the sink counts no frame.
(That a trace names the ports forwarding then hands the frame to is
checked frame by frame in dataplane/src/switch/trace_tests.rs.)
"""

from __future__ import annotations

import json
import subprocess

from harness import Vadapt, port, total

VM1 = "52:54:00:00:40:01"
SINK = "02:00:00:00:40:05"
ECHO7 = "02:00:00:00:40:07"
BCAST = "ff:ff:ff:ff:ff:ff"


def trace(d: Vadapt, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(d.binary), "trace", "--control", str(d.control), *args],
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_trace_shows_where_a_frame_would_go_and_why(vadapt_bin, procs):
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin, procs.workdir, procs,
        ["--vm", f"name=vm1,socket={sock},mac={VM1},allowed_ips=10.0.0.5",
         "--sink", f"s0,mac={SINK}", "--echo", f"e7,mac={ECHO7},vlan=7"],
        cpus=None,
    ).start([sock])  # fmt: skip

    def verdict(frame: str) -> dict:
        r = trace(d, "--json", "vm1", frame)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    t = verdict(f"src={VM1},dst={SINK},ip_src=10.0.0.5,ip_dst=10.0.0.6")
    assert t["verdict"] == "forwarded to s0", t
    steps = {s["check"]: s["found"] for s in t["steps"]}
    assert "static on s0" in steps["table"], t
    assert steps["ip source guard"] == "admitted", t
    t = verdict(f"src={VM1},dst={BCAST},ip_src=10.0.0.5,arp")
    assert [e["port"] for e in t["egress"]] == ["s0"], t  # e7 is in VLAN 7
    assert t["verdict"].startswith("flooded in VLAN 0"), t
    t = verdict(f"src=52:54:00:00:40:99,dst={SINK}")
    assert "port security" in t["verdict"] and not t["egress"], t
    t = verdict(f"src={VM1},dst={SINK},ip_src=10.0.0.9")
    assert "spoofed_ip" in t["verdict"], t
    assert "10.0.0.9" in {s["check"]: s["found"] for s in t["steps"]}["ip source guard"], t
    t = verdict(f"src={VM1},dst={SINK},vlan=7")
    assert "vlan_tagged" in t["verdict"], t
    # The text form, for a terminal.
    r = trace(d, "vm1", f"src={VM1},dst={ECHO7}")
    assert r.returncode == 0 and "=> flooded in VLAN 0" in r.stdout, r.stdout + r.stderr
    # Refusals name what is wrong.
    r = trace(d, "vm9", f"src={VM1},dst={SINK}")
    assert r.returncode != 0 and "no port `vm9`" in r.stderr and "s0" in r.stderr, r.stderr
    r = trace(d, "vm1", f"src={VM1}")
    assert r.returncode != 0 and "FRAME-SPEC" in r.stderr, r.stderr
    r = trace(d, "vm1", f"src={VM1},dst={SINK},vlan=5000")
    assert r.returncode != 0 and "vlan" in r.stderr, r.stderr
    # Nothing was sent.
    assert total(port(d.stats(), "s0"), "rx_packets") == 0
