//! The human-readable table `vadapt stats` prints: a row per queue pair,
//! whose counters' columns are those declared with them (`counters.rs`),
//! and a row per worker.

use super::counters::QueueSnapshot;
use super::port_kind::PortKind;
use super::snapshot::StatsSnapshot;

impl StatsSnapshot {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let columns = QueueSnapshot::columns();
        let _ = write!(s, "{:<12} {:<5} {:<4} {:>3}", "port", "kind", "conn", "q");
        for c in &columns {
            let _ = write!(s, " {:>w$}", c.header, w = c.width);
        }
        let _ = writeln!(s, "  policy");
        for p in &self.ports {
            for q in &p.queues {
                let _ = write!(
                    s,
                    "{:<12} {:<5} {:<4} {:>3}",
                    p.name,
                    p.kind,
                    if p.connected { "yes" } else { "no" },
                    q.queue
                );
                for c in &columns {
                    let _ = write!(s, " {:>w$}", (c.value)(q), w = c.width);
                }
                let _ = writeln!(
                    s,
                    "  {}{}",
                    p.policy,
                    if p.poll_interval_us > 0 {
                        format!(" ({} us)", p.poll_interval_us)
                    } else {
                        String::new()
                    } + &if p.predicted_us > 0 {
                        format!(
                            " [predicted {} us, search {}-{} us, workload {}/{}/{} B]",
                            p.predicted_us,
                            p.search_range_us.0,
                            p.search_range_us.1,
                            p.workload[0],
                            p.workload[1],
                            p.workload[2]
                        )
                    } else {
                        String::new()
                    }
                );
                for (r, n) in &q.dropped {
                    let _ = writeln!(s, "{:>24} dropped {r}: {n}", "");
                }
                if p.kind == PortKind::Uplink {
                    let _ = writeln!(
                        s,
                        "{:>24} AF_XDP: fill ring found empty {}, TX ring found full {}",
                        "", q.fill_ring_empty, q.tx_ring_full
                    );
                }
            }
            if p.memory_regions > 0 {
                let _ = writeln!(
                    s,
                    "{:>24} guest memory: {} region(s), {} MiB",
                    "",
                    p.memory_regions,
                    p.memory_bytes >> 20
                );
            }
            if p.ctrl_accepted + p.ctrl_refused > 0 {
                let _ = writeln!(
                    s,
                    "{:>24} control queue: {} command(s) accepted, {} refused",
                    "", p.ctrl_accepted, p.ctrl_refused
                );
            }
            if p.dirty_log_shrank > 0 {
                let _ = writeln!(
                    s,
                    "{:>24} dirty-page log shrank under the daemon: {} time(s), logging ended",
                    "", p.dirty_log_shrank
                );
            }
            if p.capture_dropped > 0 {
                let _ = writeln!(
                    s,
                    "{:>24} capture: {} frame(s) not kept (its writer behind)",
                    "", p.capture_dropped
                );
            }
            for (r, n) in &p.fdb_not_learned {
                let _ = writeln!(s, "{:>24} source addresses not learned, {r}: {n}", "");
            }
        }
        let _ = writeln!(
            s,
            "\n{:<12} {:>10} {:>12} {:>10} {:>14} {:>14}",
            "worker", "cpu_s", "cycles/pkt", "passes", "overshoot_p50", "overshoot_p99"
        );
        for w in &self.workers {
            let cpp = if w.busy_packets > 0 {
                format!("{:.1}", w.busy_cycles as f64 / w.busy_packets as f64)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "{:<12} {:>10.3} {:>12} {:>10} {:>12}ns {:>12}ns",
                w.name, w.cpu_seconds, cpp, w.passes, w.overshoot_p50_ns, w.overshoot_p99_ns
            );
        }
        s
    }
}
