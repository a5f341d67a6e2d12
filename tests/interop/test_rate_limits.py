"""Rate limits against a hostile tenant (issue 37, item 4), on the release
binary with synthetic guests as the frontends: a guest over its policer and
its storm-control limit, flat out, beside a victim port at a steady rate.
The victim loses nothing; the attacker's excess is dropped and counted by
reason; `vadapt set-limits` changes the limits of a guest that stays
connected.

Counts only, and bounds that hold however slow the machine: what passed is at
most the burst plus the rate times the time measured around it.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import Vadapt, port, run_cli, total

SINK_MAC = "02:00:00:00:00:02"
BROADCAST = "ff:ff:ff:ff:ff:ff"


def guest(binary: Path, sock: Path, dst: str, rate: str, duration: str) -> dict:
    """A synthetic guest sending 64-byte frames to `dst`; its JSON report."""
    argv = [str(binary), "guest", "--socket", str(sock), "--dst-mac", dst, "--rate", rate]
    argv += ["--duration", duration, "--exit-cost-ns", "0", "--json"]
    r = run_cli(argv, timeout=60)
    assert r.rc == 0, r.stderr
    report = json.loads(r.stdout)
    assert report.get("error") is None, report
    return report


def sent(report: dict) -> int:
    return report["sent_packets"]


def dropped(p: dict, reason: str) -> int:
    return sum(q.get("dropped", {}).get(reason, 0) for q in p["queues"])


def taken(stats: dict, name: str) -> int:
    """Frames the daemon took from port `name`'s guest: passed or policed."""
    p = port(stats, name)
    return total(p, "tx_packets") + dropped(p, "policed")


def all_drops(p: dict) -> int:
    return sum(sum(q.get("dropped", {}).values()) for q in p["queues"])


def bound(per_second: int, burst: int, seconds: float) -> int:
    """The most a bucket of `per_second` and `burst` lets through in `seconds`."""
    return burst + math.ceil(per_second * seconds)


def test_a_guest_over_its_policer_and_storm_limit_costs_its_neighbour_nothing(vadapt_bin, procs):
    socks = {n: procs.workdir / f"{n}.sock" for n in ("attacker", "victim")}
    limits = (
        "ingress_policing_kpkts_rate=1,ingress_policing_kpkts_burst=1,"
        "storm_control_pps=100,storm_control_burst=50"
    )
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [
            "--vm",
            f"name=attacker,socket={socks['attacker']},{limits}",
            "--vm",
            f"name=victim,socket={socks['victim']}",
            "--sink",
            f"sink0,mac={SINK_MAC}",
            "--policy",
            "interrupt",
        ],
        cpus=None,
    ).start(list(socks.values()))
    start = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        victim = pool.submit(guest, vadapt_bin, socks["victim"], SINK_MAC, "20k", "3s")
        # Flat out at the sink: policed to 1 kpps.
        unicast = sent(guest(vadapt_bin, socks["attacker"], SINK_MAC, "closed", "1s"))
        s = d.wait_stats(lambda s: taken(s, "attacker") == unicast)
        passed_unicast = total(port(s, "attacker"), "tx_packets")
        flood_start = time.monotonic()
        # Flat out broadcast: policed, and what passes held to 100/s by storm control.
        floods = sent(guest(vadapt_bin, socks["attacker"], BROADCAST, "closed", "1s"))
        v = victim.result(timeout=60)
    sent_v = sent(v)
    a_want = unicast + floods
    s = d.wait_stats(
        lambda s: (
            taken(s, "attacker") == a_want and total(port(s, "victim"), "tx_packets") == sent_v
        )
    )
    now = time.monotonic()
    a, vp, sink = port(s, "attacker"), port(s, "victim"), port(s, "sink0")
    tx_a, policed, storm = total(a, "tx_packets"), dropped(a, "policed"), dropped(a, "storm")
    flooded = tx_a - passed_unicast - storm
    print(
        f"\nattacker sent {unicast} + {floods} broadcast: passed {tx_a}, policed {policed},"
        f" storm {storm}; victim sent {sent_v}"
    )
    # The attacker: every frame passed or policed, what passed within its rates.
    assert unicast > 10_000 and floods > 10_000, (unicast, floods)
    assert tx_a + policed == a_want, a
    assert tx_a <= bound(1000, 1000, now - start), a
    assert 0 <= flooded <= bound(100, 50, now - flood_start), a
    assert policed > 0 and storm > 0, a
    assert all_drops(a) == policed + storm, a
    # The victim lost nothing, and the sink has all of it with what passed.
    assert sent_v > 1000, v
    assert total(vp, "tx_packets") == sent_v, vp
    assert dropped(vp, "policed") == 0 and dropped(vp, "storm") == 0, vp
    assert total(sink, "rx_packets") == sent_v + passed_unicast + flooded, sink


def test_set_limits_acts_on_a_guest_that_stays_connected(vadapt_bin, procs):
    sock = procs.workdir / "vm1.sock"
    d = Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        ["--vm", f"name=vm1,socket={sock}", "--sink", f"sink0,mac={SINK_MAC}"],
        cpus=None,
    ).start([sock])

    def stat(key: str) -> int:
        p = port(d.stats(), "vm1")
        return dropped(p, "policed") if key == "policed" else total(p, key)

    def grows(key: str, by: int) -> int:
        """Waits until `key` grew by `by`; its value then."""
        base = stat(key)
        s = d.wait_stats(lambda s: stat(key) >= base + by, timeout=20)
        assert stat(key) >= base + by, port(s, "vm1")
        return stat(key)

    with ThreadPoolExecutor(1) as pool:
        # One connection for the whole test.
        g = pool.submit(guest, vadapt_bin, sock, SINK_MAC, "200k", "8s")
        grows("tx_packets", 20_000)
        assert stat("policed") == 0
        d.command("set-limits", "vm1", "--kpps", "1", "--kpkts-burst", "1")
        grows("policed", 20_000)
        # A burst under one frame is refused, naming the key; nothing changes.
        r = run_cli(
            [str(vadapt_bin), "set-limits", "--control", str(d.control), "vm1"]
            + ["--rate-kbps", "1000", "--burst-kb", "1"]
        )
        assert r.rc != 0 and "ingress_policing_burst" in r.stderr, r
        grows("policed", 20_000)
        # Removed: once frames flow again, none is policed.
        d.command("set-limits", "vm1")
        grows("tx_packets", 20_000)
        policed = stat("policed")
        grows("tx_packets", 20_000)
        assert stat("policed") == policed
        report = g.result(timeout=60)
    s = d.wait_stats(lambda s: taken(s, "vm1") == sent(report))
    assert taken(s, "vm1") == sent(report), port(s, "vm1")
