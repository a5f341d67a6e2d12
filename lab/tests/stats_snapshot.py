"""A stats snapshot shaped like ``vadapt stats --json``, for the lab's tests."""

from vadapt_lab.netap_ml import daemon as dm


def snapshot(
    sink_pkts,
    frame,
    cpu,
    intervals,
    *,
    kicks=None,
    timer=0,
    connected=True,
    sink_cpu=None,
    worker_suffix="",
):
    """VM ports ``intervals`` ((name, poll interval µs), ...) and a sink that took
    ``sink_pkts`` frames of ``frame`` bytes. Each VM port has two queues with ``kicks``
    kicks each (none if ``None``) and a worker named after it (plus
    ``worker_suffix``, e.g. ``/q0``) with ``cpu`` seconds and ``timer`` timer wake-ups;
    ``sink_cpu`` adds a worker for the sink."""
    queues = [] if kicks is None else [{"kicks": kicks}, {"kicks": kicks}]
    ports = [
        {"name": n, "kind": "vm", "connected": connected, "poll_interval_us": iv, "queues": queues}
        for n, iv in intervals
    ]
    sink_queue = {"rx_packets": sink_pkts, "rx_bytes": sink_pkts * frame}
    if kicks is not None:
        sink_queue["kicks"] = 999
    ports.append(
        {
            "name": dm.SINK,
            "kind": "sink",
            "connected": True,
            "poll_interval_us": 0,
            "queues": [sink_queue],
        }
    )
    workers = [
        {"name": n + worker_suffix, "cpu_seconds": cpu, "wakeups": {"timer": timer, "kick": 1}}
        for n, _ in intervals
    ]
    if sink_cpu is not None:
        workers.append({"name": dm.SINK, "cpu_seconds": sink_cpu, "wakeups": {}})
    return {"ports": ports, "workers": workers}
