//! B7 — memory per port (issue 16, goal 3): the daemon's resident memory
//! with 1, 16 and 64 connected, idle VM ports (256-entry rings, a synthetic
//! guest sending one packet per second on each), and under a reconnect
//! loop.
//!
//! Resident memory is read from `/proc/<pid>/status` and split as the
//! kernel splits it: `RssShmem` is the guests' memory, which the daemon maps
//! from each frontend's memfd and which the goal leaves out; `RssAnon +
//! RssFile` is the daemon's own. The cost of a port is the slope of the
//! daemon's own memory between the smallest and the largest port count of a
//! round, so the fixed cost of a daemon (binary, metrics, control) does not
//! dilute it. The reconnect loop reads the same figure after every round of
//! guests connecting, sending and leaving; the soak
//! (`scripts/soak.py`, docs/reliability.md) is the long version.

use super::ctx::Ctx;
use super::error::BenchError;
use super::table::{metric_table, table, LabelCol};
use super::vadapt_proc::{Daemon, GuestOpts, GuestProc, VmPort};
use std::time::{Duration, Instant};
use vadapt_dataplane::metrics::PortKind;
use vadapt_policy::PolicyKind;
use vadapt_results::{cell, spread, ResultFile, Row};

/// Title.
pub const TITLE: &str = "memory per port: daemon RSS with idle VM ports and under reconnects";

/// The goal: at most this many MiB per port beyond guest-memory mappings.
pub const GOAL_MIB_PER_PORT: f64 = 2.0;

/// How long to wait for every guest to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Memory of a process, MiB, as `/proc/<pid>/status` splits it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rss {
    /// Anonymous pages (heap, stacks).
    pub anon: f64,
    /// File-backed pages (the binary, libraries).
    pub file: f64,
    /// Shared memory: the guests' memfds.
    pub shmem: f64,
}

impl Rss {
    /// The daemon's own memory: everything but the guests' memory.
    pub fn own(&self) -> f64 {
        self.anon + self.file
    }

    /// Parse the `RssAnon`, `RssFile` and `RssShmem` lines of a
    /// `/proc/<pid>/status` text (kB); `None` if one is missing.
    pub fn parse(status: &str) -> Option<Rss> {
        let kb = |key: &str| -> Option<f64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map(|k| k / 1024.0)
        };
        Some(Rss {
            anon: kb("RssAnon:")?,
            file: kb("RssFile:")?,
            shmem: kb("RssShmem:")?,
        })
    }

    /// Read the memory of process `pid`.
    pub fn of(pid: i32) -> Result<Rss, BenchError> {
        let path = format!("/proc/{pid}/status");
        let text = std::fs::read_to_string(&path).map_err(|e| BenchError::Parse {
            what: path.clone(),
            detail: e.to_string(),
        })?;
        Rss::parse(&text).ok_or_else(|| BenchError::Parse {
            what: path,
            detail: "no RssAnon/RssFile/RssShmem lines".into(),
        })
    }
}

/// Port counts: 1, 16 and 64 (quick: 1, 4 and 8).
fn port_counts(ctx: &Ctx) -> [u32; 3] {
    if ctx.quick {
        [1, 4, 8]
    } else {
        [1, 16, 64]
    }
}

/// An idle guest: one packet per second for longer than the measurement.
fn idle_guest() -> GuestOpts {
    GuestOpts {
        rate: "1".into(),
        ..GuestOpts::stream(
            64,
            Duration::from_secs(600),
            vadapt_guest::config::DEFAULT_EXIT_COST_NS,
        )
    }
}

/// A daemon with `n` VM ports `b7-<tag>-<i>` (interrupt mode).
fn ports(ctx: &Ctx, tag: &str, n: u32) -> Vec<VmPort> {
    (0..n)
        .map(|i| VmPort::new(&ctx.work, &format!("b7{tag}{i}"), 1, PolicyKind::Interrupt))
        .collect()
}

/// Wait until the daemon reports `n` connected VM ports.
fn wait_connected(ctx: &Ctx, d: &mut Daemon, n: usize) -> Result<(), BenchError> {
    let t0 = Instant::now();
    loop {
        let up = d
            .stats()?
            .ports
            .iter()
            .filter(|p| p.kind == PortKind::Vm && p.connected)
            .count();
        if up >= n {
            return Ok(());
        }
        if t0.elapsed() > CONNECT_TIMEOUT {
            return Err(BenchError::Failed(format!(
                "only {up} of {n} guests connected after {} s",
                CONNECT_TIMEOUT.as_secs()
            )));
        }
        ctx.sleep(Duration::from_millis(100))?;
    }
}

/// Run B7.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let settle = ctx.secs(2.0, 0.5);
    f.run_seconds = settle.as_secs_f64();
    let counts = port_counts(ctx);
    let opts = idle_guest();
    for run in 0..ctx.runs {
        let mut own = Vec::new();
        for &n in &counts {
            ctx.say(&format!("round {}: {n} idle ports", run + 1));
            let vms = ports(ctx, "i", n);
            let mut d = Daemon::spawn(ctx, &format!("b7-idle-{n}"), &vms)?;
            if run == 0 && n == *counts.last().unwrap_or(&1) {
                f.commands.push(ctx.show(&d.command));
                f.commands
                    .push(ctx.show(&opts.argv("vadapt", &vms[0].socket, ctx.frontend_cpu)));
            }
            let guests = vms
                .iter()
                .map(|v| GuestProc::spawn(ctx, &format!("b7-guest-{}", v.name), &v.socket, &opts))
                .collect::<Result<Vec<_>, _>>()?;
            wait_connected(ctx, &mut d, vms.len())?;
            ctx.sleep(settle)?;
            let m = Rss::of(d.child.pid())?;
            let mut r = Row::new(
                "idle-ports",
                "guest",
                "vadapt",
                "interrupt",
                &format!("{n} ports"),
            )
            .at(64, run);
            r.set("ports", f64::from(n))
                .set("own_mib", m.own())
                .set("anon_mib", m.anon)
                .set("file_mib", m.file)
                .set("guest_mib", m.shmem);
            f.rows.push(r);
            own.push((n, m.own()));
            drop(guests);
            drop(d);
        }
        if let (Some(&(n0, a)), Some(&(n1, b))) = (own.first(), own.last()) {
            let mut r = Row::new("per-port", "guest", "vadapt", "interrupt", "").at(64, run);
            r.set("mib_per_port", (b - a) / f64::from(n1 - n0));
            f.rows.push(r);
        }
    }
    reconnect_loop(ctx, f)
}

/// Rounds of guests connecting, sending for a moment and leaving, on a
/// daemon with a few ports; the daemon's own memory after each round.
fn reconnect_loop(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let (nports, rounds) = if ctx.quick { (4, 4) } else { (8, 20) };
    ctx.say(&format!("reconnect loop: {nports} ports, {rounds} rounds"));
    let vms = ports(ctx, "r", nports);
    let d = Daemon::spawn(ctx, "b7-reconnect", &vms)?;
    f.commands.push(ctx.show(&d.command));
    let opts = GuestOpts {
        rate: "20k".into(),
        ..GuestOpts::stream(
            64,
            Duration::from_millis(400),
            vadapt_guest::config::DEFAULT_EXIT_COST_NS,
        )
    };
    for round in 0..rounds {
        let guests = vms
            .iter()
            .map(|v| GuestProc::spawn(ctx, &format!("b7-rc-{}", v.name), &v.socket, &opts))
            .collect::<Result<Vec<_>, _>>()?;
        for g in guests {
            g.finish()?;
        }
        // Let the daemon see every disconnect before reading its memory.
        ctx.sleep(Duration::from_millis(200))?;
        let m = Rss::of(d.child.pid())?;
        let mut r = Row::new("reconnect", "guest", "vadapt", "interrupt", "").at(64, round);
        r.set("own_mib", m.own()).set("anon_mib", m.anon);
        f.rows.push(r);
    }
    Ok(())
}

/// MiB per port of every round (for the goal).
pub fn per_port(f: &ResultFile) -> Vec<&Row> {
    f.table("per-port").collect()
}

/// The B7 tables.
pub fn render(f: &ResultFile) -> String {
    let idle: Vec<&Row> = f.table("idle-ports").collect();
    let variant: LabelCol<'_> = ("ports", |r: &Row| r.variant.clone());
    let mut s = format!(
        "\nResident memory of the daemon, MiB, medians (min–max) over {} rounds; \
         \"own\" = RssAnon + RssFile, \"guest\" = RssShmem (the guests' memfds).\n\n",
        f.runs
    );
    s.push_str(&metric_table(
        &idle,
        &[variant],
        &[
            ("own_mib", "own", 1),
            ("anon_mib", "anon", 1),
            ("file_mib", "file", 1),
            ("guest_mib", "guest", 1),
        ],
        &[],
        |_, _| false,
    ));
    let pp = per_port(f);
    if let Some(x) = spread(&pp, "mib_per_port") {
        s.push_str(&format!(
            "\nOwn memory per port (slope from the fewest to the most ports): **{} MiB** \
             (goal ≤ {GOAL_MIB_PER_PORT} MiB: {}).\n",
            cell(Some(x), 3),
            if x.median <= GOAL_MIB_PER_PORT {
                "met"
            } else {
                "missed"
            }
        ));
    }
    let rc: Vec<&Row> = f.table("reconnect").collect();
    let own: Vec<f64> = rc
        .iter()
        .filter_map(|r| r.m.get("own_mib").copied())
        .collect();
    if let (Some(first), Some(last)) = (own.first(), own.last()) {
        let max = own.iter().copied().fold(f64::MIN, f64::max);
        s.push_str(&format!(
            "\nReconnect loop, {} rounds of every guest connecting, sending 400 ms at 20k/s and leaving:\n\n",
            own.len()
        ));
        s.push_str(&table(
            &[
                "own MiB after round 1",
                "after the last",
                "max",
                "last − first",
            ],
            &[vec![
                format!("{first:.1}"),
                format!("{last:.1}"),
                format!("{max:.1}"),
                format!("{:+.1}", last - first),
            ]],
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_split_as_the_kernel_splits_it() {
        let status = "Name:\tvadapt\nVmRSS:\t  10240 kB\nRssAnon:\t    4096 kB\n\
                      RssFile:\t    2048 kB\nRssShmem:\t    4096 kB\nThreads:\t3\n";
        let r = Rss::parse(status).unwrap();
        assert_eq!(r.anon, 4.0);
        assert_eq!(r.file, 2.0);
        assert_eq!(r.shmem, 4.0);
        assert_eq!(r.own(), 6.0);
        assert!(Rss::parse("VmRSS:\t 1 kB\n").is_none());
    }

    #[test]
    fn this_process_has_memory() {
        let r = Rss::of(std::process::id() as i32).unwrap();
        assert!(r.anon > 0.0 && r.file > 0.0, "{r:?}");
    }

    #[test]
    fn render_states_the_slope_and_the_goal() {
        let mut f = ResultFile {
            bench: "b7".into(),
            runs: 1,
            ..Default::default()
        };
        for (n, own) in [(1, 10.0), (64, 73.0)] {
            let mut r = Row::new(
                "idle-ports",
                "guest",
                "vadapt",
                "interrupt",
                &format!("{n} ports"),
            )
            .at(64, 0);
            r.set("own_mib", own);
            f.rows.push(r);
        }
        let mut r = Row::new("per-port", "guest", "vadapt", "interrupt", "").at(64, 0);
        r.set("mib_per_port", 1.0);
        f.rows.push(r);
        let s = render(&f);
        assert!(s.contains("| 64 ports | 73.0"), "{s}");
        assert!(s.contains("**1.000 MiB**") && s.contains("met"), "{s}");
    }
}
