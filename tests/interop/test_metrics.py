"""The metrics endpoint of a live daemon under traffic is valid exposition
text, checked by parsers nobody here wrote: `promtool check metrics` for the
Prometheus text format 0.0.4, and Python's prometheus_client for both 0.0.4
and OpenMetrics, chosen from the request's Accept header."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request

import pytest

import harness

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def promtool() -> str:
    p = harness.which("promtool")
    if p is None:
        if harness.strict():
            pytest.fail("prerequisite missing (strict mode): promtool (Debian package prometheus)")
        pytest.skip("promtool not installed (scripts/install-deps.sh)")
    return p


@pytest.fixture
def live(vadapt_bin, procs):
    """A daemon with one VM port and a sink, a synthetic guest's traffic
    through it, and its metrics URL. With two CPUs, the vSPACE core manager
    runs too (mode E), so its families are checked as well."""
    sock = procs.workdir / "vm1.sock"
    cpus = sorted(os.sched_getaffinity(0))[:2]
    cores = (
        ["--cores-cpus", ",".join(map(str, cpus)), "--cores-mode", "e"] if len(cpus) == 2 else []
    )
    d = harness.Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [
            "--vm",
            f"name=vm1,socket={sock}",
            "--sink",
            "sink0,mac=02:00:00:00:00:02",
            "--policy",
            "netap",
            "--metrics",
            "127.0.0.1:0",
            *cores,
        ],
        cpus=None if cores else "1",
    ).start([sock])
    m, _ = d.proc.wait_for(r"http://(127\.0\.0\.1:\d+)/metrics", 10)
    g = subprocess.run(
        [str(vadapt_bin), "guest", "--socket", str(sock), "--rate", "20k", "--duration", "1s"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert g.returncode == 0, g.stderr
    d.wait_stats(lambda s: harness.total(harness.port(s, "sink0"), "rx_packets") > 0)
    return f"http://{m.group(1)}/metrics"


def fetch(url: str, accept: str | None = None, method: str = "GET"):
    req = urllib.request.Request(url, method=method)
    if accept is not None:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers, r.read().decode()


def test_text_format_passes_promtool(live):
    status, headers, body = fetch(live)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    assert "# EOF" not in body and 'le="inf"' not in body
    assert re.search(r'vadapt_queue_packets_total\{port="sink0",queue="0",dir="rx"\} [1-9]', body)
    if len(os.sched_getaffinity(0)) >= 2:
        assert re.search(r'vadapt_cores_group_cpus\{group="nq"\} [12]', body), body
        assert re.search(r"vadapt_cores_periods_total [1-9]", body), body
    r = subprocess.run(
        [promtool(), "check", "metrics"], input=body, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, f"promtool:\n{r.stdout}{r.stderr}\n---\n{body}"


def test_text_format_types_every_family_for_prometheus_client(live):
    from prometheus_client.parser import text_string_to_metric_families

    _, _, body = fetch(live, "text/plain")
    fams = {f.name: f.type for f in text_string_to_metric_families(body)}
    assert fams["vadapt_queue_packets"] == "counter", fams
    assert fams["vadapt_worker_cpu_seconds"] == "counter", fams
    assert fams["vadapt_worker_sleep_overshoot_seconds"] == "histogram", fams
    assert "unknown" not in fams.values(), fams


def test_openmetrics_when_prometheus_asks_for_it(live):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    status, headers, body = fetch(live, PROMETHEUS_ACCEPT)
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    fams = {f.name: f.type for f in text_string_to_metric_families(body)}
    assert fams["vadapt_queue_packets"] == "counter", fams
    assert fams["vadapt_worker_sleep_overshoot_seconds"] == "histogram", fams


def test_head_answers_like_get_without_a_body(live):
    _, get_headers, body = fetch(live)
    status, headers, head_body = fetch(live, method="HEAD")
    assert status == 200 and head_body == ""
    assert headers["Content-Type"] == get_headers["Content-Type"]
    assert int(headers["Content-Length"]) > 0


def test_ports_that_share_a_thread_each_show_their_cpu_time(vadapt_bin, procs):
    """The daemon on one CPU with two busy VM ports: their sets share one
    queue worker thread (never more busy threads than CPUs), and each
    port's worker still shows the CPU time of its own passes, not 0 (B9's
    CPU per GB read 0 once the ports shared threads)."""
    socks = {n: procs.workdir / f"{n}.sock" for n in ("vm1", "vm2")}
    d = harness.Vadapt(
        vadapt_bin,
        procs.workdir,
        procs,
        [a for n, s in socks.items() for a in ("--vm", f"name={n},socket={s}")]
        + ["--sink", "sink0,mac=02:00:00:00:00:02", "--policy", "busy-poll"],
        cpus="1" if len(os.sched_getaffinity(0)) > 1 else None,
    ).start(list(socks.values()))
    guests = [
        subprocess.Popen(
            [str(vadapt_bin), "guest", "--socket", str(s), "--rate", "20k", "--duration", "3s"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in socks.values()
    ]
    for g in guests:
        assert g.wait(timeout=60) == 0, g.stderr.read() if g.stderr else ""
    workers = {w["name"]: w for w in d.stats()["workers"]}
    for n in socks:
        assert workers[n]["cpu_seconds"] > 0, workers
