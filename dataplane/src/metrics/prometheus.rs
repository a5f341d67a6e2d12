//! The Prometheus export: every counter as OpenMetrics text (what
//! `prometheus-client` writes) or the text format 0.0.4.

use super::counters::{DropReason, PortStats, WAKE_CAUSES};
use super::registry::Registry;
use super::text004::openmetrics_to_prometheus;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

impl Registry {
    /// Every counter in the OpenMetrics 1.0.0 text format (what
    /// `prometheus-client` writes: counter families named without `_total`,
    /// ending with `# EOF`). Served when a scraper asks for it.
    pub fn openmetrics_text(self: &Arc<Self>) -> String {
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register_collector(Box::new(Collector(Arc::clone(self))));
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &reg);
        out
    }

    /// Every counter in the Prometheus text format 0.0.4, the default of
    /// the metrics endpoint and the output of `vadapt stats --prometheus`.
    pub fn prometheus_text(self: &Arc<Self>) -> String {
        openmetrics_to_prometheus(&self.openmetrics_text())
    }
}

#[derive(Debug)]
struct Collector(Arc<Registry>);

impl prometheus_client::collector::Collector for Collector {
    fn encode(
        &self,
        mut enc: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;

        let ports = self.0.ports.read().expect("poisoned").clone();
        let workers = self.0.workers.read().expect("poisoned").clone();
        type Labels = Vec<(&'static str, String)>;
        let qlabels = |p: &PortStats, q: usize| -> Labels {
            vec![("port", p.name.clone()), ("queue", q.to_string())]
        };

        // Counters: prometheus-client appends `_total` to counter names.
        for (name, help, dirfield) in [
            ("vadapt_queue_packets", "Packets moved per queue.", true),
            ("vadapt_queue_bytes", "Frame bytes moved per queue.", false),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    for (d, dir) in ["tx", "rx"].iter().enumerate() {
                        let mut l = qlabels(p, qi);
                        l.push(("dir", dir.to_string()));
                        let v = if dirfield { &q.packets[d] } else { &q.bytes[d] };
                        ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
                    }
                }
            }
        }
        for (name, help, kicks) in [
            (
                "vadapt_queue_kicks",
                "Guest kicks received per queue pair.",
                true,
            ),
            (
                "vadapt_queue_calls",
                "Calls (interrupts) sent per queue pair.",
                false,
            ),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    let v = if kicks { &q.kicks } else { &q.calls };
                    ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&qlabels(p, qi))?)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_queue_offloads",
                "Offloads at a port's egress, by kind: done in software, or passed whole.",
                None,
                MetricType::Counter,
            )?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    for (kind, c) in [
                        ("segmented", &q.gso_frames),
                        ("checksum", &q.csum_completed),
                        ("gso_whole", &q.gso_whole),
                    ] {
                        let mut l = qlabels(p, qi);
                        l.push(("kind", kind.to_string()));
                        ConstCounter::new(c.load(Relaxed)).encode(m.encode_family(&l)?)?;
                    }
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_queue_dropped",
                "Packets or descriptor chains dropped, by reason.",
                None,
                MetricType::Counter,
            )?;
            for p in &ports {
                for (qi, q) in p.queues.iter().enumerate() {
                    for (r, c) in DropReason::ALL.iter().zip(&q.drops) {
                        let mut l = qlabels(p, qi);
                        l.push(("reason", r.as_str().to_string()));
                        ConstCounter::new(c.load(Relaxed)).encode(m.encode_family(&l)?)?;
                    }
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_queue_poll_interval_seconds",
                "Current polling interval (NetAP) or poll window (grow/shrink), seconds; 0 if none.",
                None,
                MetricType::Gauge,
            )?;
            for p in ports.iter().filter(|p| p.kind == "vm") {
                for qi in 0..p.queues.len() {
                    // Prometheus base units: seconds (the gauge is kept in µs).
                    let v = p.poll_interval_us.load(Relaxed) as f64 / 1e6;
                    ConstGauge::new(v).encode(m.encode_family(&qlabels(p, qi))?)?;
                }
            }
        }
        {
            // NetAP-ML ports only (those with a prediction).
            let ml: Vec<_> = ports
                .iter()
                .filter(|p| p.kind == "vm" && p.predicted_us.load(Relaxed) > 0)
                .collect();
            let port = |p: &PortStats| -> Labels { vec![("port", p.name.clone())] };
            let mut m = enc.encode_descriptor(
                "vadapt_netap_ml_predicted_interval_seconds",
                "NetAP-ML's predicted best polling interval, seconds.",
                None,
                MetricType::Gauge,
            )?;
            for p in &ml {
                let v = p.predicted_us.load(Relaxed) as f64 / 1e6;
                ConstGauge::new(v).encode(m.encode_family(&port(p))?)?;
            }
            let mut m = enc.encode_descriptor(
                "vadapt_netap_ml_search_range_seconds",
                "Ends of NetAP-ML's golden-section search range, seconds.",
                None,
                MetricType::Gauge,
            )?;
            for p in &ml {
                for (end, v) in [("lo", &p.search_lo_us), ("hi", &p.search_hi_us)] {
                    let mut l = port(p);
                    l.push(("end", end.to_string()));
                    let v = v.load(Relaxed) as f64 / 1e6;
                    ConstGauge::new(v).encode(m.encode_family(&l)?)?;
                }
            }
            for (i, name, help) in [
                (
                    0,
                    "vadapt_netap_ml_vms",
                    "VMs NetAP-ML predicts for; 0 = unknown.",
                ),
                (
                    1,
                    "vadapt_netap_ml_threads",
                    "Sender threads per VM NetAP-ML predicts for; 0 = unknown.",
                ),
                (
                    2,
                    "vadapt_netap_ml_message_size_bytes",
                    "Message size NetAP-ML predicts for, bytes; 0 = unknown.",
                ),
            ] {
                let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
                for p in &ml {
                    let v = p.workload[i].load(Relaxed) as i64;
                    ConstGauge::new(v).encode(m.encode_family(&port(p))?)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_port_connected",
                "1 while a frontend is connected to the port.",
                None,
                MetricType::Gauge,
            )?;
            for p in &ports {
                let l: Labels = vec![("port", p.name.clone())];
                ConstGauge::new(i64::from(p.connected.load(Relaxed)))
                    .encode(m.encode_family(&l)?)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_worker_cpu_seconds",
                "CPU time used by the queue worker thread.",
                None,
                MetricType::Counter,
            )?;
            for w in &workers {
                let l: Labels = vec![("worker", w.name.clone())];
                ConstCounter::new(w.cpu_ns() as f64 / 1e9).encode(m.encode_family(&l)?)?;
            }
        }
        for (name, help, which) in [
            (
                "vadapt_worker_busy_cycles",
                "TSC cycles spent in service passes that moved packets.",
                0,
            ),
            ("vadapt_worker_passes", "Service passes.", 1),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for w in &workers {
                let l: Labels = vec![("worker", w.name.clone())];
                let v = if which == 0 {
                    &w.busy_cycles
                } else {
                    &w.passes
                };
                ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_worker_wakeups",
                "Waits that ended, by cause.",
                None,
                MetricType::Counter,
            )?;
            for w in &workers {
                for (c, v) in WAKE_CAUSES.iter().zip(&w.wakeups) {
                    let l: Labels = vec![("worker", w.name.clone()), ("cause", c.to_string())];
                    ConstCounter::new(v.load(Relaxed)).encode(m.encode_family(&l)?)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "vadapt_worker_sleep_overshoot_seconds",
                "How late timed sleeps woke up.",
                None,
                MetricType::Histogram,
            )?;
            const BOUNDS_NS: [u64; 10] = [
                1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
            ];
            for w in &workers {
                let h = w.overshoot_ns.lock().expect("poisoned");
                // prometheus-client takes per-bucket counts and accumulates
                // them itself; it writes `le="+Inf"` for f64::MAX (and `inf`,
                // valid in neither text format, for f64::INFINITY).
                let mut below = 0;
                let mut buckets: Vec<(f64, u64)> = BOUNDS_NS
                    .iter()
                    .map(|&b| {
                        let upto = h.count_between(0, b);
                        let n = upto - below;
                        below = upto;
                        (b as f64 / 1e9, n)
                    })
                    .collect();
                buckets.push((f64::MAX, h.len() - below));
                let sum = h.mean() * h.len() as f64 / 1e9;
                let l: Labels = vec![("worker", w.name.clone())];
                m.encode_family(&l)?
                    .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                        sum,
                        h.len(),
                        &buckets,
                        None,
                    )?;
            }
        }
        let cores = self.0.cores.read().expect("poisoned").clone();
        if let Some(c) = cores {
            encode_cores(&c.snapshot(), &mut enc)?;
        }
        Ok(())
    }
}

/// The core manager's `vadapt_cores_*` families.
fn encode_cores(
    c: &crate::cores::CoresSnapshot,
    enc: &mut prometheus_client::encoding::DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::metrics::MetricType;
    type Labels = Vec<(&'static str, String)>;
    let group = |g: &str| -> Labels { vec![("group", g.to_string())] };
    let mut m = enc.encode_descriptor(
        "vadapt_cores_group_cpus",
        "CPUs of each vSPACE group (vcpu, nq, be, idle).",
        None,
        MetricType::Gauge,
    )?;
    for (g, v) in [
        ("vcpu", &c.sets.vcpu),
        ("nq", &c.sets.nq),
        ("be", &c.sets.be),
        ("idle", &c.sets.idle),
    ] {
        ConstGauge::new(v.len() as i64).encode(m.encode_family(&group(g))?)?;
    }
    let m = enc.encode_descriptor(
        "vadapt_cores_nq_workers",
        "Queue workers of the per-NQ-core pool (0 with a worker per port).",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(c.nq_workers.len() as i64).encode(m)?;
    let m = enc.encode_descriptor(
        "vadapt_cores_failed",
        "1 when the core manager stopped on an internal error (see `vadapt cores`), else 0.",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(i64::from(c.failed.is_some())).encode(m)?;
    let mut m = enc.encode_descriptor(
        "vadapt_cores_utilization",
        "CPU time of each group over the last period, in cores.",
        None,
        MetricType::Gauge,
    )?;
    for (g, v) in [("vcpu", c.util_vcpu), ("nq", c.util_nq), ("be", c.util_be)] {
        ConstGauge::new(v).encode(m.encode_family(&group(g))?)?;
    }
    let mut m = enc.encode_descriptor(
        "vadapt_cores_threshold",
        "Utilisation threshold per core of each group (Th_vCPU, Th_NQ).",
        None,
        MetricType::Gauge,
    )?;
    for (g, v) in [("vcpu", c.threshold_vcpu), ("nq", c.threshold_nq)] {
        ConstGauge::new(v).encode(m.encode_family(&group(g))?)?;
    }
    let mut m = enc.encode_descriptor(
        "vadapt_cores_run_delay_seconds",
        "Time the group's threads waited for a CPU while runnable (schedstat).",
        None,
        MetricType::Counter,
    )?;
    for (g, v) in [("vcpu", c.run_delay_vcpu_s), ("nq", c.run_delay_nq_s)] {
        ConstCounter::new(v).encode(m.encode_family(&group(g))?)?;
    }
    for (name, help, v) in [
        (
            "vadapt_cores_periods",
            "Core manager periods run.",
            c.periods,
        ),
        (
            "vadapt_cores_reallocations",
            "Periods whose core allocation changed.",
            c.reallocations,
        ),
        (
            "vadapt_cores_explorations",
            "Threshold exploration rounds (vSPACE Algorithm 3).",
            c.explorations,
        ),
        (
            "vadapt_cores_threads_moved",
            "Thread placements carried out.",
            c.threads_moved,
        ),
        (
            "vadapt_cores_threads_refused",
            "Thread placements the kernel refused.",
            c.threads_refused,
        ),
        (
            "vadapt_cores_qmp_errors",
            "Failed QMP exchanges with VMs.",
            c.qmp_errors,
        ),
        (
            "vadapt_cores_qga_errors",
            "Failed guest agent requests (vSPACE-Guest).",
            c.qga_errors,
        ),
        (
            "vadapt_cores_queue_set_moves",
            "Ports' queue sets moved between NQ workers (queue_workers = per-nq-core).",
            c.queue_set_moves,
        ),
    ] {
        let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(v).encode(m)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::counters::{Dir, PortStats, WorkerStats};
    use std::collections::BTreeMap;

    #[test]
    fn prometheus_text_has_the_documented_names_and_values() {
        let reg = Arc::new(Registry::default());
        let p = Arc::new(PortStats::new("vm1", "vm", 2));
        p.queues[1].add(Dir::Tx, 3, 192);
        p.queues[0].drop(DropReason::BadAddress, 2);
        reg.add_port(p);
        reg.add_worker(Arc::new(WorkerStats::new("vm1")));
        let t = reg.prometheus_text();
        for name in [
            "vadapt_queue_packets_total",
            "vadapt_queue_bytes_total",
            "vadapt_queue_kicks_total",
            "vadapt_queue_calls_total",
            "vadapt_queue_dropped_total",
            "vadapt_worker_cpu_seconds_total",
            "vadapt_queue_poll_interval_seconds",
            "vadapt_worker_sleep_overshoot_seconds_bucket",
        ] {
            assert!(t.contains(name), "{name} missing from:\n{t}");
        }
        assert!(
            t.contains(r#"vadapt_queue_packets_total{port="vm1",queue="1",dir="tx"} 3"#),
            "{t}"
        );
        assert!(
            t.contains(
                r#"vadapt_queue_dropped_total{port="vm1",queue="0",reason="bad_address"} 2"#
            ),
            "{t}"
        );
    }

    /// Every sample of the 0.0.4 text belongs to a family declared by a
    /// `# TYPE` line of that name (histograms: `_bucket`, `_sum`, `_count`),
    /// counters end in `_total`, and nothing OpenMetrics-only is left.
    #[test]
    fn text_004_declares_every_sample_family() {
        let reg = Arc::new(Registry::default());
        reg.add_port(Arc::new(PortStats::new("vm1", "vm", 2)));
        let w = Arc::new(WorkerStats::new("vm1"));
        w.overshoot_ns.lock().unwrap().record(3_000).unwrap();
        w.overshoot_ns.lock().unwrap().record(2_000_000).unwrap();
        reg.add_worker(w);
        let t = reg.prometheus_text();
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
        let mut types = BTreeMap::new();
        for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut it = l[7..].split(' ');
            types.insert(it.next().unwrap(), it.next().unwrap());
        }
        for (name, kind) in &types {
            if *kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            }
            let help = format!("# HELP {name} ");
            assert!(t.contains(&help), "no HELP for {name}");
        }
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| types.get(f) == Some(&"histogram"))
                })
                .unwrap_or(name);
            assert!(types.contains_key(family), "sample {l} has no TYPE");
        }
        // Buckets are cumulative and end at +Inf with the count.
        let inf = t.lines().find(|l| l.contains(r#"le="+Inf""#)).unwrap();
        assert!(inf.ends_with(" 2"), "{inf}");
        let le3 = t.lines().find(|l| l.contains(r#"le="0.000005""#)).unwrap();
        assert!(le3.ends_with(" 1"), "{le3}");
    }

    #[test]
    fn netap_ml_gauges_are_exported_for_netap_ml_ports_only() {
        let reg = Arc::new(Registry::default());
        let ml = Arc::new(PortStats::new("ml", "vm", 1));
        ml.predicted_us.store(1200, Relaxed);
        ml.search_lo_us.store(700, Relaxed);
        ml.search_hi_us.store(1700, Relaxed);
        ml.workload[0].store(2, Relaxed);
        ml.workload[2].store(64, Relaxed);
        reg.add_port(ml);
        reg.add_port(Arc::new(PortStats::new("plain", "vm", 1)));
        let t = reg.prometheus_text();
        for line in [
            r#"vadapt_netap_ml_predicted_interval_seconds{port="ml"} 0.0012"#,
            r#"vadapt_netap_ml_search_range_seconds{port="ml",end="lo"} 0.0007"#,
            r#"vadapt_netap_ml_search_range_seconds{port="ml",end="hi"} 0.0017"#,
            r#"vadapt_netap_ml_vms{port="ml"} 2"#,
            r#"vadapt_netap_ml_threads{port="ml"} 0"#,
            r#"vadapt_netap_ml_message_size_bytes{port="ml"} 64"#,
            "# TYPE vadapt_netap_ml_message_size_bytes gauge",
        ] {
            assert!(t.contains(line), "{line} missing from:\n{t}");
        }
        assert!(!t.contains(r#"vadapt_netap_ml_vms{port="plain"}"#), "{t}");
    }
}
