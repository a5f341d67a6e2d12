"""QEMU guests in VLANs on one daemon, and hosts in VLANs behind the AF_XDP
uplink's trunk (issue 37).

Three TCG guests, all in one IP subnet so that only their VLANs keep them
apart: A and B on access ports of VLAN 10, C on one of VLAN 20. The uplink
(`trunks=10:20`) is one end of a veth pair; the other end is in a network
namespace, where a small program (`WIRE` below, on an AF_PACKET socket)
is a host in VLAN 10 (in the guests' subnet) and one in VLAN 20 (in a
subnet C also has an address in): it answers ARP and ping for its address
in each VLAN, only for frames tagged with that VLAN, answers tagged with
it, and records which source addresses it saw in which VLAN. (A program
rather than the kernel's VLAN interfaces, `ip link add link PEER name
PEER.10 type vlan id 10`: the kernels of some test machines have no 8021q
module; the program also sees what crossed the wire in which VLAN.)

- A pings B (same VLAN): every reply.
- A pings VLAN 10's host: the frames leave the trunk tagged 10 and come
  back tagged 10, popped on the way to A.
- C pings VLAN 20's host: C is on the network.
- C pings A and VLAN 10's host, and A pings C: no reply. C's ARP requests
  left the trunk in VLAN 20 alone; no frame of C's was seen in VLAN 10,
  none of A's or B's in another VLAN, none of any guest's untagged.
- The namespace sends ARP requests in VLAN 30, which the trunk does not
  carry, and one under an 802.1ad outer tag: the uplink drops them
  (`vlan_not_allowed`).

Before VLANs all three guests were in one L2 domain: with the VLAN keys
taken out, against a build from before 2c15491, C got 3 of 3 replies from
A and A from C, A none from VLAN 10's host nor C from VLAN 20's, and the
wire saw every guest's frames untagged. Needs root and `ip netns`. One
daemon, three guest boots: 35 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess

from harness import Guest, Vadapt, ip, port

MAC_A, MAC_B, MAC_C = "52:54:00:5a:37:0a", "52:54:00:5a:37:0b", "52:54:00:5a:37:0c"
# The guests' subnet, and VLAN 10's host in it.
IP_A, IP_B, IP_C, WIRE10 = "10.0.37.1", "10.0.37.2", "10.0.37.3", "10.0.37.254"
# VLAN 20's subnet: C's second address and VLAN 20's host.
IP_C20, WIRE20 = "10.0.38.3", "10.0.38.254"
WIRE_HOSTS = {10: (WIRE10, "02:00:00:37:00:0a"), 20: (WIRE20, "02:00:00:37:00:14")}
PINGS = 3
# Frames the wire sends in VLAN 30 (not on the trunk) and under an 802.1ad
# outer tag: every one dropped as it enters the uplink.
PROBES_NOT_ALLOWED = 3

# In the namespace: argv IFACE HOSTS (JSON {vid: [ip, mac]}). Answers ARP
# and ICMP echo for each host's address in its VLAN, tagged with it; sends
# the probes the trunk must refuse; prints "ready", then on "quit" from
# stdin a JSON line {"seen": {vid: {mac: frames}}, "arp": [[vid, sender
# mac, target ip], ...]} of what arrived.
WIRE = r"""
import json, select, socket, struct, sys
iface, hosts = sys.argv[1], json.loads(sys.argv[2])
raw = lambda m: bytes.fromhex(m.replace(":", ""))
hosts = {int(v): (socket.inet_aton(ip), raw(m)) for v, (ip, m) in hosts.items()}
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((iface, 0))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA: the tag the kernel took off
mac = lambda b: ":".join(f"{x:02x}" for x in b)
seen, arps = {}, []

def tagged(dst, src, vid, etype, body, tpid=0x8100):
    f = dst + src + struct.pack("!HHH", tpid, vid, etype) + body
    return f + bytes(max(0, 60 - len(f)))

def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF

def arp_request(src, spa, tpa):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, src, spa, bytes(6), tpa)

src30, bcast = raw("02:00:00:37:00:30"), b"\xff" * 6
for i in range(PROBES - 1):  # VLAN 30's
    req = arp_request(src30, socket.inet_aton("10.0.39.254"), socket.inet_aton("10.0.39.1"))
    s.send(tagged(bcast, src30, 30, 0x0806, req))
# 802.1ad outside, 802.1Q inside, both VLAN 10
req = arp_request(src30, socket.inet_aton("10.0.37.253"), socket.inet_aton("10.0.37.1"))
s.send(tagged(bcast, src30, 10, 0x8100, struct.pack("!HH", 10, 0x0806) + req, tpid=0x88A8))
print("ready", flush=True)
while True:
    r, _, _ = select.select([s, sys.stdin], [], [])
    if sys.stdin in r:
        break
    data, anc, _, addr = s.recvmsg(4096, socket.CMSG_SPACE(20))
    if addr[2] == 4:  # PACKET_OUTGOING: our own
        continue
    vid = 0
    for level, kind, d in anc:
        if (level, kind) == (263, 8):
            status, _, _, _, _, tci, _ = struct.unpack("IIIHHHH", d[:20])
            if status & (1 << 4):  # TP_STATUS_VLAN_VALID
                vid = tci & 0xFFF
    etype, off = struct.unpack("!H", data[12:14])[0], 14
    if etype == 0x8100 and vid == 0:  # a tag left in the frame
        tci, etype = struct.unpack("!HH", data[14:18])
        vid, off = tci & 0xFFF, 18
    src = data[6:12]
    seen.setdefault(vid, {}).setdefault(mac(src), 0)
    seen[vid][mac(src)] += 1
    body = data[off:]
    if etype == 0x0806 and len(body) >= 28:
        op, sha, spa, tpa = struct.unpack("!6xH6s4s6x4s", body[:28])
        arps.append([vid, mac(sha), socket.inet_ntoa(tpa)])
        if op == 1 and vid in hosts and tpa == hosts[vid][0]:
            ip, me = hosts[vid]
            reply = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 2, me, ip, sha, spa)
            s.send(tagged(src, me, vid, 0x0806, reply))
    elif etype == 0x0800 and len(body) >= 20 and body[9] == 1 and vid in hosts:
        ihl = (body[0] & 15) * 4
        total = struct.unpack("!H", body[2:4])[0]
        ip_, icmp = bytearray(body[:ihl]), bytearray(body[ihl:total])
        if body[16:20] == hosts[vid][0] and icmp and icmp[0] == 8:
            ip_[12:16], ip_[16:20] = body[16:20], body[12:16]
            ip_[8], ip_[10:12] = 64, b"\0\0"
            ip_[10:12] = struct.pack("!H", csum(bytes(ip_)))
            icmp[0], icmp[2:4] = 0, b"\0\0"
            icmp[2:4] = struct.pack("!H", csum(bytes(icmp)))
            s.send(tagged(src, hosts[vid][1], vid, 0x0800, bytes(ip_) + bytes(icmp)))
print(json.dumps({"seen": seen, "arp": arps}), flush=True)
"""


def pings(g: Guest, peer: str) -> int:
    """Replies to PINGS pings from `g` to `peer`."""
    r = g.shell_result(f"vping {peer} {PINGS}", "ping_rx", timeout=60)
    assert int(r["ping_tx"]) == PINGS, r
    return int(r["ping_rx"])


def test_guests_in_vlans_and_a_trunk_uplink(vadapt_bin, qemu, procs):
    if os.geteuid() != 0:
        from conftest import missing

        missing("a network namespace and a veth pair need root")
    tag = os.getpid() % 10000
    # Engineers sharing a host keep their names apart with a prefix.
    pre = os.environ.get("VADAPT_TEST_NET_PREFIX", "")
    ns, host, peer = f"{pre}vawv{tag}", f"{pre}vahv{tag}", f"{pre}vapv{tag}"
    ip("netns", "add", ns)
    try:
        ip("link", "add", host, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", ns)
        # The namespace's own stack stays quiet: no address, no IPv6.
        subprocess.run(
            ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
            check=True,
            capture_output=True,
            timeout=10,
        )
        ip("-n", ns, "link", "set", peer, "up")
        ip("link", "set", host, "up")
        run_vlans(procs, vadapt_bin, ns, host, peer)
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def run_vlans(procs, vadapt_bin, ns: str, host: str, peer: str) -> None:
    socks = {n: procs.workdir / f"{n}.sock" for n in ("vma", "vmb", "vmc")}
    vlans = {"vma": 10, "vmb": 10, "vmc": 20}
    macs = {"vma": MAC_A, "vmb": MAC_B, "vmc": MAC_C}
    vms = [
        a
        for n, s in socks.items()
        for a in ("--vm", f"name={n},socket={s},queues=1,mac={macs[n]},vlan={vlans[n]}")
    ]
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [*vms, "--uplink", f"name=up0,iface={host},policy=eekbp,trunks=10:20"],
        cpus=None,  # TCG guests need the cores more than the daemon does
    ).start(list(socks.values()))
    assert "uplink open" in "\n".join(d.proc.lines), d.proc.tail()

    a = Guest(procs, "guest-a", socks["vma"], MAC_A, f"{IP_A}/24", "shell")
    b = Guest(procs, "guest-b", socks["vmb"], MAC_B, f"{IP_B}/24", "shell")
    c = Guest(procs, "guest-c", socks["vmc"], MAC_C, f"{IP_C}/24", "shell")
    hosts = json.dumps({v: list(h) for v, h in WIRE_HOSTS.items()})
    script = WIRE.replace("PROBES", str(PROBES_NOT_ALLOWED))
    wire = subprocess.Popen(
        ["ip", "netns", "exec", ns, "python3", "-c", script, peer, hosts],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert wire.stdout.readline().strip() == "ready"
        for g, mac in ((a, MAC_A), (b, MAC_B), (c, MAC_C)):
            assert g.booted(timeout=180)["mac"] == mac
            g.proc.wait_for("VADAPT-READY", timeout=60)
        c.shell(f"ip addr add {IP_C20}/24 dev eth0")

        # Within a VLAN, and to the trunk's VLANs.
        assert pings(a, IP_B) == PINGS
        assert pings(a, WIRE10) == PINGS
        assert pings(c, WIRE20) == PINGS
        # Across VLANs: nothing, neither between guests nor over the trunk.
        assert pings(c, IP_A) == 0
        assert pings(c, WIRE10) == 0
        assert pings(a, IP_C) == 0
        out, _ = wire.communicate("quit\n", timeout=30)
    finally:
        wire.kill()
    saw = json.loads(out.strip().splitlines()[-1])
    seen = {int(v): set(m) for v, m in saw["seen"].items()}
    arp = {(v, sha, tpa) for v, sha, tpa in saw["arp"]}
    print(f"VLAN the wire saw {seen}")
    # C's requests for VLAN 10's host and for A left in VLAN 20, and no
    # guest's frame crossed into another VLAN or left untagged.
    assert {(20, MAC_C, WIRE10), (20, MAC_C, IP_A), (10, MAC_A, WIRE10)} <= arp, arp
    assert MAC_A in seen[10] and MAC_C in seen[20], seen
    assert not {MAC_A, MAC_B, MAC_C} & seen.get(0, set()), seen
    assert MAC_C not in seen[10] and not {MAC_A, MAC_B} & seen[20], seen
    assert set(seen) <= {0, 10, 20}, seen

    st = d.stats()
    up = port(st, "up0")
    not_allowed = sum(q.get("dropped", {}).get("vlan_not_allowed", 0) for q in up["queues"])
    assert not_allowed == PROBES_NOT_ALLOWED, up
    fdb = d.ask("fdb")
    static = {(e["port"], e["vlan"], e["mac"]) for e in fdb["entries"] if e["kind"] == "static"}
    assert {("vma", 10, MAC_A), ("vmb", 10, MAC_B), ("vmc", 20, MAC_C)} <= static, fdb
    # The wire's hosts, learned on the uplink in their VLANs.
    on_uplink = {(e["vlan"], e["mac"]) for e in fdb["entries"] if e["port"] == "up0"}
    assert on_uplink == {(v, m) for v, (_, m) in WIRE_HOSTS.items()}, fdb
    for g in (a, b, c):
        assert g.poweroff() == 0
