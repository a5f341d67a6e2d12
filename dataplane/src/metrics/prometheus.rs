//! The Prometheus export: every counter as OpenMetrics text (what
//! `prometheus-client` writes) or the text format 0.0.4, each family
//! written through its one declaration: the counts' with their counters
//! (`counters.rs`), the rest in `families.rs`.

use super::counters::{PortStats, QueueStats, WorkerStats};
use super::declare::{self, Item};
use super::families as f;
use super::port_kind::PortKind;
use super::registry::Registry;
use super::text004::openmetrics_to_prometheus;
use prometheus_client::encoding::DescriptorEncoder;
use std::fmt;
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
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let ports = self.0.ports();
        let workers = self.0.workers();
        encode_queues(&ports, &mut enc)?;
        encode_ports(&ports, &mut enc)?;
        encode_workers(&workers, &mut enc)?;
        for e in self.0.exporters() {
            e.encode(&mut enc)?;
        }
        Ok(())
    }
}

/// The `vadapt_queue_*` families: a sample per queue pair of every port.
fn encode_queues(ports: &[Arc<PortStats>], enc: &mut DescriptorEncoder) -> fmt::Result {
    let queues: Vec<Item<'_, QueueStats>> = ports
        .iter()
        .flat_map(|p| {
            p.queues.iter().enumerate().map(|(i, q)| Item {
                labels: vec![p.name.clone(), i.to_string()],
                port_kind: p.kind.as_str(),
                stats: q,
            })
        })
        .collect();
    declare::encode(&QueueStats::exports(), &queues, enc)?;
    let mut m = f::QUEUE_POLL_INTERVAL.encode(enc)?;
    for p in ports.iter().filter(|p| p.kind == PortKind::Vm) {
        // Prometheus base units: seconds (the gauge is kept in µs).
        let v = p.poll_interval_us.load(Relaxed) as f64 / 1e6;
        for qi in 0..p.queues.len() {
            m.gauge(&[&p.name, &qi.to_string()], v)?;
        }
    }
    Ok(())
}

/// The per-port families: NetAP-ML's state (NetAP-ML ports only, those
/// with a prediction), whether a frontend is connected, and the declared
/// counters.
fn encode_ports(ports: &[Arc<PortStats>], enc: &mut DescriptorEncoder) -> fmt::Result {
    let ml: Vec<_> = ports
        .iter()
        .filter(|p| p.kind == PortKind::Vm && p.predicted_us.load(Relaxed) > 0)
        .collect();
    let secs = |us: &std::sync::atomic::AtomicU64| us.load(Relaxed) as f64 / 1e6;
    let mut m = f::NETAP_ML_PREDICTED_INTERVAL.encode(enc)?;
    for p in &ml {
        m.gauge(&[&p.name], secs(&p.predicted_us))?;
    }
    let mut m = f::NETAP_ML_SEARCH_RANGE.encode(enc)?;
    for p in &ml {
        for (end, v) in [("lo", &p.search_lo_us), ("hi", &p.search_hi_us)] {
            m.gauge(&[&p.name, end], secs(v))?;
        }
    }
    for (family, v) in f::NETAP_ML_WORKLOAD.into_iter().zip(0..) {
        let mut m = family.encode(enc)?;
        for p in &ml {
            m.gauge(&[&p.name], p.workload[v].load(Relaxed) as i64)?;
        }
    }
    let mut m = f::PORT_CONNECTED.encode(enc)?;
    for p in ports {
        m.gauge(&[&p.name], i64::from(p.connected.load(Relaxed)))?;
    }
    let items: Vec<Item<'_, PortStats>> = ports
        .iter()
        .map(|p| Item {
            labels: vec![p.name.clone()],
            port_kind: p.kind.as_str(),
            stats: p.as_ref(),
        })
        .collect();
    declare::encode(&PortStats::exports(), &items, enc)
}

/// Upper bounds of the sleep overshoot histogram's buckets, ns.
const OVERSHOOT_BOUNDS_NS: [u64; 10] = [
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
];

/// The `vadapt_worker_*` families.
fn encode_workers(workers: &[Arc<WorkerStats>], enc: &mut DescriptorEncoder) -> fmt::Result {
    let mut m = f::WORKER_CPU.encode(enc)?;
    for w in workers {
        m.counter(&[&w.name], w.cpu_ns() as f64 / 1e9)?;
    }
    let items: Vec<Item<'_, WorkerStats>> = workers
        .iter()
        .map(|w| Item {
            labels: vec![w.name.clone()],
            port_kind: "",
            stats: w.as_ref(),
        })
        .collect();
    declare::encode(&WorkerStats::exports(), &items, enc)?;
    let mut m = f::WORKER_SLEEP_OVERSHOOT.encode(enc)?;
    for w in workers {
        let h = w.overshoot_ns.lock().expect("poisoned");
        // prometheus-client takes per-bucket counts and accumulates them
        // itself; it writes `le="+Inf"` for f64::MAX (and `inf`, valid in
        // neither text format, for f64::INFINITY).
        let mut below = 0;
        let mut buckets: Vec<(f64, u64)> = OVERSHOOT_BOUNDS_NS
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
        m.histogram(&[&w.name], sum, h.len(), &buckets)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::counters::{Dir, DropReason};
    use std::collections::BTreeMap;

    /// The families written are the declared ones, in order, each with the
    /// name, type and help text of its declaration.
    #[test]
    fn every_family_is_written_from_its_declaration() {
        let (reg, counted) = crate::metrics::registry::test_utils::registry();
        let p = Arc::new(PortStats::new("vm1", PortKind::Vm, 1));
        p.predicted_us.store(1000, Relaxed);
        counted.add_port(p);
        counted.add_port(Arc::new(PortStats::new("up0", PortKind::Uplink, 1)));
        counted.add_worker(Arc::new(WorkerStats::new("vm1")));
        let t = reg.openmetrics_text();
        let meta: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("# HELP ") || l.starts_with("# TYPE "))
            .collect();
        let want: Vec<String> = f::all()
            .iter()
            .flat_map(|fam| {
                [
                    format!("# HELP {} {}", fam.name, fam.help),
                    format!("# TYPE {} {}", fam.name, fam.kind.as_str()),
                ]
            })
            .collect();
        assert_eq!(meta, want);
        for fam in f::all() {
            let sample = format!("\n{}", fam.sample_name());
            assert!(t.contains(&sample), "no sample of {}:\n{t}", fam.name);
        }
    }

    #[test]
    fn prometheus_text_has_the_documented_names_and_values() {
        let (reg, counted) = crate::metrics::registry::test_utils::registry();
        let p = Arc::new(PortStats::new("vm1", PortKind::Vm, 2));
        p.queues[1].add(Dir::Tx, 3, 192);
        p.queues[0].drop(DropReason::BadAddress, 2);
        counted.add_port(p);
        counted.add_worker(Arc::new(WorkerStats::new("vm1")));
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
        let (reg, counted) = crate::metrics::registry::test_utils::registry();
        counted.add_port(Arc::new(PortStats::new("vm1", PortKind::Vm, 2)));
        let w = Arc::new(WorkerStats::new("vm1"));
        w.overshoot_ns.lock().unwrap().record(3_000).unwrap();
        w.overshoot_ns.lock().unwrap().record(2_000_000).unwrap();
        counted.add_worker(w);
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
        let (reg, counted) = crate::metrics::registry::test_utils::registry();
        let ml = Arc::new(PortStats::new("ml", PortKind::Vm, 1));
        ml.predicted_us.store(1200, Relaxed);
        ml.search_lo_us.store(700, Relaxed);
        ml.search_hi_us.store(1700, Relaxed);
        ml.workload[0].store(2, Relaxed);
        ml.workload[2].store(64, Relaxed);
        counted.add_port(ml);
        counted.add_port(Arc::new(PortStats::new("plain", PortKind::Vm, 1)));
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
