"""``reproduce --daemon``'s machinery: cores checked, runs pinned, figures judged."""

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from vadapt_lab.reproduce import daemon
from vadapt_lab.reproduce.papers_md import daemon_cell
from vadapt_lab.reproduce.rows import VERDICTS, DaemonRef, Row

REPO = Path(__file__).resolve().parents[2]
VADAPT = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "vadapt"
ALLOWED = sorted(os.sched_getaffinity(0))

# A stand-in for `vadapt`: writes demo's summary.json (NetAP 1.4× interrupt's payload at
# half its worker CPU) and the CPUs it was allowed, into its `--out`; exits 1 when told to.
FAKE = """#!{python}
import json, os, sys
if os.environ.get("FAKE_FAIL"):
    sys.exit("vadapt: cannot start the daemon")
out = sys.argv[sys.argv.index("--out") + 1]
ratios = [{{"policy": "netap", "baseline": "interrupt", "payload_gbps": 1.4,
           "worker_cpu_pct": 0.5}}]
open(os.path.join(out, "summary.json"), "w").write(json.dumps({{"ratios": ratios}}))
open(os.path.join(out, "cpus.json"), "w").write(json.dumps(sorted(os.sched_getaffinity(0))))
"""


def table1_row(recorded=None):
    """NetAP Table 1, 3VM-2T, as netap.py makes it (the paper's 142 %)."""
    return Row(
        "NetAP", "Table 1, 3VM-2T", "%", 142.0, "netap.txt Table 1", 108.0,
        daemon="recorded elsewhere" if recorded else "not on 2 cores", daemon_value=recorded,
        daemon_ref=DaemonRef("netap-3vm-2t", "payload_gbps", 100.0, "NetAP ÷ interrupt mode"),
        neutral=100.0, tie=2.0,
    )  # fmt: skip


def runner(tmp_path, vadapt, cpus):
    return daemon.Runner(vadapt, tmp_path / "out", "a test machine", "abc1234", cpus=cpus)


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "vadapt"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    return path


def test_every_row_reference_names_a_case_with_the_paper_hosts_cores():
    cores = {c.name: c.cores for c in daemon.CASES.values()}
    assert cores["netap-3vm-2t"] == 6
    assert cores["netap-5vm-1t-8cores"] == 8
    assert cores["netap-ml-c2"] == 24
    assert cores["eekbp-uplink"] == 14
    assert cores["vspace"] == 20
    assert all(c.args or c.drive or c.missing for c in daemon.CASES.values())


def test_a_shape_needing_more_cores_than_the_machine_gives_is_not_run(tmp_path, monkeypatch):
    # Two cores, a 6-core shape: nothing runs (the binary does not even exist).
    r = runner(tmp_path, tmp_path / "no-such-vadapt", [0, 1])
    future = daemon.Case("future", 20, daemon.VSPACE_HOST, missing="a load generator")
    monkeypatch.setitem(daemon.CASES, "future", future)
    plain, recorded = table1_row(), table1_row(recorded=121.0)
    no_runner = replace(table1_row(), daemon_ref=DaemonRef("future", ""))
    vspace = replace(table1_row(), daemon_ref=DaemonRef("vspace", "max_qps_ratio"))
    daemon.fill([plain, recorded, no_runner, vspace], r)
    assert r.log == []
    assert plain.daemon.startswith("not run: needs 6 cores (the NetAP paper's 6-core host)")
    assert plain.daemon_value is None and plain.daemon_verdict() is None
    assert daemon_cell(plain) == plain.daemon
    # A recorded figure stays, judged, and says it was not rerun here.
    assert recorded.daemon_value == 121.0
    assert "rerun here: not run: needs 6 cores" in recorded.daemon
    assert recorded.daemon_verdict() == "same direction, different size"  # e = 0.5
    assert no_runner.daemon.startswith("not run: needs 20 cores (the vSPACE paper's 20-core")
    assert "; and no daemon runner yet (a load generator)" in no_runner.daemon
    assert vspace.daemon.startswith("not run: needs 20 cores (the vSPACE paper's 20-core")
    assert "no daemon runner" not in vspace.daemon
    # On a machine with the cores, a case without a runner says only that.
    big = runner(tmp_path, tmp_path / "no-such-vadapt", list(range(64)))
    assert big.figure(future).text.startswith("not run: no daemon runner yet (")
    assert big.log == []


def test_a_run_is_pinned_to_the_papers_cores_and_judged_like_the_simulator(tmp_path, fake):
    # A fake core count: the machine's CPUs and more, so that a 6-core shape runs here.
    cpus = ALLOWED + list(range(ALLOWED[-1] + 1, ALLOWED[-1] + 7))
    r = runner(tmp_path, fake, cpus)
    row, cpu_row = table1_row(recorded=121.0), table1_row()
    cpu_row.daemon_ref = DaemonRef("netap-3vm-2t", "worker_cpu_pct", 100.0)
    daemon.fill([row, cpu_row], r)
    assert len(r.log) == 1  # both rows from one run
    assert r.log[0].startswith(f"taskset -c {','.join(map(str, cpus[:6]))} vadapt demo ")
    assert "--vms 3 --threads 2" in r.log[0] and "--out OUT/netap-3vm-2t" in r.log[0]
    pinned = json.loads((tmp_path / "out" / "netap-3vm-2t" / "cpus.json").read_text())
    assert set(pinned) <= set(cpus[:6])
    # The measured figure replaces the recorded one: 140 % against the paper's 142 %.
    assert row.daemon_value == pytest.approx(140.0)
    assert row.daemon_verdict() == "agrees"  # e = 40 / 42
    assert "a test machine (6 cores used), rev abc1234" in row.daemon
    assert row.daemon.startswith("NetAP ÷ interrupt mode; `taskset")
    assert daemon_cell(row).startswith("140.0 %: agrees (e = 0.95); NetAP ÷ interrupt mode")
    assert cpu_row.daemon_value == pytest.approx(50.0)
    assert cpu_row.daemon_verdict() == "disagrees"  # less than neutral, the paper more


def test_a_failed_run_is_reported_not_raised(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1")
    r = runner(tmp_path, fake, ALLOWED * 6)
    row = table1_row()
    daemon.fill([row], r)
    assert row.daemon_value is None
    assert row.daemon.startswith("failed (exit 1): vadapt: cannot start the daemon")
    # A run whose output cannot be read is reported too.
    monkeypatch.setenv("FAKE_FAIL", "")
    monkeypatch.setattr(daemon, "CASES", {"netap-3vm-2t": replace(
        daemon.CASES["netap-3vm-2t"], read=daemon.b10_eekbp_over_napi)})  # fmt: skip
    row = table1_row()
    daemon.fill([row], runner(tmp_path, fake, ALLOWED * 6))
    assert row.daemon_value is None
    assert row.daemon.startswith("failed: its output unreadable (")


@pytest.mark.skipif(not VADAPT.is_file(), reason="needs the release vadapt")
def test_a_tiny_shape_runs_on_the_real_daemon(tmp_path):
    """One VM × one thread, interrupt then NetAP, 2 s each, on at most 2 cores."""
    cores = min(2, len(ALLOWED))
    case = daemon.demo("netap-tiny", cores, "a test", 1, 1, seconds=4)
    r = runner(tmp_path, VADAPT, ALLOWED)
    fig = r.figure(case)
    assert fig.values is not None, fig.text
    assert fig.values["payload_gbps"] > 0
    row = table1_row()
    row.daemon_value = 100 * fig.values["payload_gbps"]
    assert row.daemon_verdict() in VERDICTS


def test_b10_gives_ee_kbp_over_the_kernels_path_at_saturation(tmp_path):
    """The reader of B10's file (rows flat: labels and metrics side by side)."""

    def row(backend, policy, mpps, run, variant="nic-to-vm"):
        return {"table": "saturation", "sender": "wire", "backend": backend, "policy": policy,
                "variant": variant, "frame": 64, "run": run, "mpps": mpps}  # fmt: skip

    rows = [row("vadapt-uplink", "eekbp", m, i) for i, m in enumerate((0.9, 1.2, 1.0))]
    rows += [row("kernel-bridge-tap", "tap", m, i) for i, m in enumerate((0.5, 0.4, 0.6))]
    rows += [row("vadapt-uplink", "eekbp", 9.0, 0, "vm-to-nic")]
    (tmp_path / "b10.json").write_text(json.dumps({"kind": "bench", "rows": rows}))
    assert daemon.b10_eekbp_over_napi(tmp_path) == {"mpps": pytest.approx(1.0 / 0.5)}
    (tmp_path / "b10.json").write_text(json.dumps({"kind": "bench", "rows": rows[:3]}))
    with pytest.raises(ValueError, match="kernel-bridge-tap tap"):
        daemon.b10_eekbp_over_napi(tmp_path)


def test_table2_takes_netaps_windows_against_the_best_fixed_interval(tmp_path):
    """The reader of a Table 2 demo: NetAP's 30–60 s and 90–120 s ÷ the best interval."""
    lines = ["t,vm,policy,payload_mbps,mbps,pps,kicks_per_s,calls_per_s,worker_cpu_pct,interval_us"]

    def second(t, policy, mbps):
        # Two VMs, each half the figure.
        lines.extend(f"{t},vm{i},{policy},{mbps / 2},0,0,0,0,0,0" for i in (1, 2))

    for t in range(1, 121):  # NetAP: 800 in its search (to 60 s), 1000 after
        second(t, "netap", 800.0 if t <= 60 else 1000.0)
    for i, (us, mbps) in enumerate(((250, 900.0), (1000, 1000.0), (4000, 600.0))):
        start = 121 + 120 * i
        second(start, f"fixed-interval:{us}", 5000.0)  # the switch-over second, skipped
        for t in range(start + 1, start + 120):
            second(t, f"fixed-interval:{us}", mbps)
    (tmp_path / "timeseries.csv").write_text("\n".join(lines) + "\n")
    got = daemon.table2_over_best(tmp_path)
    assert got == {"while": pytest.approx(0.8), "after": pytest.approx(1.0)}
    # A run without the sweep is unreadable, not a figure.
    (tmp_path / "timeseries.csv").write_text("\n".join(lines[:241]) + "\n")
    with pytest.raises(ValueError, match="no netap phase or no fixed-interval phase"):
        daemon.table2_over_best(tmp_path)
    case = daemon.CASES["netap-table2-6vm-1t"]
    assert case.cores == 6 and "--baseline netap" in " ".join(case.args)
    assert "fixed-interval:100,fixed-interval:250" in " ".join(case.args)


@pytest.mark.skipif(not VADAPT.is_file(), reason="needs the release vadapt")
def test_the_daemon_runs_a_fixed_interval_phase(tmp_path):
    """NetAP then one fixed interval, 2 s each, on the real daemon: both phases carry."""
    case = daemon.demo("netap-fixed", min(2, len(ALLOWED)), "a test", 1, 1, 64, "netap",
                       "fixed-interval:500", 4)  # fmt: skip
    fig = runner(tmp_path, VADAPT, ALLOWED).figure(case)
    assert fig.values is not None, fig.text
    summary = json.loads((tmp_path / "out" / "netap-fixed" / "summary.json").read_text())
    phases = {p["policy"]: p for p in summary["phases"]}
    assert set(phases) == {"netap", "fixed-interval:500"}
    assert all(p["payload_gbps"] > 0 for p in phases.values())


def test_vspace_steps_each_arrangement_up_to_the_slo(tmp_path, monkeypatch):
    """The vSPACE driver's stepping, with a stand-in for one run's P95: vSPACE-P holds
    up to 300 kQPS, static time-sharing to 100; a failed run ends its arrangement."""
    from vadapt_lab.reproduce import vspace_daemon as vd

    held = {"vspace-p": 300_000, "static": 100_000}

    def p95(vadapt, cpus, work, arrangement, qps, seconds, log):
        log.append(f"{arrangement} {qps}")
        return vd.SLO_NS / 2 if qps <= held[arrangement] else vd.SLO_NS * 3

    monkeypatch.setattr(vd, "p95_ns", p95)
    log: list[str] = []
    got = vd.max_qps(Path("vadapt"), [0, 1], tmp_path, log)
    assert got == {"vspace_p_kqps": 300.0, "static_kqps": 100.0, "max_qps_ratio": 3.0}
    assert log[-1] == "static 150000" and "vspace-p 400000" in log

    def failing(vadapt, cpus, work, arrangement, qps, seconds, log):
        raise RuntimeError("vadapt serve exited (2)")

    monkeypatch.setattr(vd, "p95_ns", failing)
    got = vd.max_qps(Path("vadapt"), [0, 1], tmp_path, [])
    assert got == {"vspace_p_kqps": 0.0, "static_kqps": 0.0}
    assert "exited (2)" in (tmp_path / "static" / "25000" / "failed.txt").read_text()
    # The arrangements' daemons: the manager's cores and mode only for vSPACE-P.
    assert "--cores-mode" in vd.serve_args(tmp_path, [0, 1], "vspace-p")
    assert "--cores-mode" not in vd.serve_args(tmp_path, [0, 1], "static")
    assert "--cores-control" in vd.guest_args(tmp_path, "vspace-p", 1000, 2)
    assert "--cores-control" not in vd.guest_args(tmp_path, "static", 1000, 2)


@pytest.mark.skipif(not VADAPT.is_file(), reason="needs the release vadapt")
def test_vspace_runs_on_the_real_daemon_at_a_small_scale(tmp_path):
    """Both arrangements on this machine's cores at two low rates of 2 s: each run
    completes round trips, and the figures are the rates that held (which depend on
    how busy the machine is, so they are not asserted)."""
    from vadapt_lab.reproduce import vspace_daemon as vd

    log: list[str] = []
    got = vd.max_qps(VADAPT, ALLOWED[:2], tmp_path, log, qps=(2_000, 4_000), seconds=2)
    for arrangement in vd.ARRANGEMENTS:
        first = tmp_path / arrangement / "2000"
        assert not (first / "failed.txt").exists(), (first / "failed.txt").read_text()
        report = json.loads((first / "guest.json").read_text())
        assert report["latency"]["count"] > 0, arrangement
    assert sum("--cores-mode p" in c for c in log) in (1, 2), log
    assert got["vspace_p_kqps"] in (0.0, 2.0, 4.0) and got["static_kqps"] in (0.0, 2.0, 4.0)
    assert ("max_qps_ratio" in got) == (got["static_kqps"] > 0)
