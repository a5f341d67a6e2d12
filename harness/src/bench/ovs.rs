//! OVS-DPDK (Debian `openvswitch-switch-dpdk`) as a benchmark anchor, by
//! the recipe verified in docs/architecture.md ("Facts the code relies on"):
//! `ovsdb-server` and the DPDK build of `ovs-vswitchd` run by hand in a
//! private run directory (no systemd),
//! `dpdk-extra="--no-huge -m 1024 --no-pci --legacy-mem"`,
//! `per-port-memory=true`, main lcore on the sender CPU (0), PMD on the
//! backend CPU (1), one netdev bridge `br0`. B6 and B8 add their own ports
//! and flows.
//!
//! The synthetic guest is a vhost-user frontend (client), so OVS's ports are
//! server-mode `dpdkvhostuser` ports, whose sockets OVS creates in its run
//! directory (deprecated in favour of `dpdkvhostuserclient`, which would need
//! the guest to listen).
//!
//! What is read, and from where:
//! - `ovs-appctl dpif-netdev/pmd-stats-show` after `pmd-stats-clear`: per PMD
//!   thread, packets received and the TSC cycles of iterations that received
//!   packets ("processing cycles") and of those that did not ("idle
//!   cycles") — the same busy-cycles definition as testpmd's and vadapt's;
//! - `ovs-ofctl dump-flows`: a flow's `n_packets`;
//! - `/proc/<pid>/task/*`: the PMD threads' CPU time.
//!
//! Not a port's counters: OVS 3.1 registers a server-mode vhost port
//! without the vhost library's statistics, so `ovs-ofctl dump-ports` shows
//! `?` for all of them; the guests' own reports stand in.

use super::child::{run_once, threads_cpu_seconds, wait_path, Child, Spawn};
use super::ctx::Ctx;
use super::error::BenchError;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vadapt_results::ResultFile;

/// The DPDK build of ovs-vswitchd in Debian's package.
pub const OVS_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";

/// The largest `pmd-maxsleep` OVS accepts, µs: the setting that parks an
/// idle PMD (it then wakes at most about 100 times a second) while another
/// backend is measured on its CPU.
pub const PARKED_MAXSLEEP_US: u32 = 10_000;

/// Why OVS-DPDK cannot be used here, if it cannot: a line with the install
/// command.
pub fn unavailable() -> Option<String> {
    let missing: Vec<&str> = [
        "ovsdb-server",
        "ovsdb-tool",
        "ovs-vsctl",
        "ovs-ofctl",
        "ovs-appctl",
    ]
    .into_iter()
    .filter(|p| crate::machine::which(p).is_none())
    .collect();
    if !Path::new(OVS_DPDK).is_file() || !missing.is_empty() {
        let what = if Path::new(OVS_DPDK).is_file() {
            missing.join(", ")
        } else {
            OVS_DPDK.to_string()
        };
        return Some(format!(
            "OVS-DPDK not installed ({what} missing): skipped (install with `apt-get install openvswitch-switch-dpdk`)"
        ));
    }
    None
}

/// A running OVS-DPDK (ovsdb-server + ovs-vswitchd) in its own directory,
/// with a netdev bridge `br0`.
#[derive(Debug)]
pub struct Ovs {
    dir: PathBuf,
    vswitchd: Child,
    _db: Child,
}

/// Counters of all PMD threads from `pmd-stats-show` (the main thread's
/// block, which serves non-PMD ports, is left out).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PmdStats {
    /// Packets the PMDs received from their rx queues.
    pub packets: u64,
    /// TSC cycles of iterations that received packets ("processing cycles").
    pub busy_cycles: u64,
    /// TSC cycles of iterations that received none ("idle cycles").
    pub idle_cycles: u64,
}

fn env(dir: &Path) -> Vec<(String, String)> {
    ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"]
        .iter()
        .map(|k| (k.to_string(), dir.display().to_string()))
        .collect()
}

fn db(dir: &Path) -> String {
    format!("unix:{}", dir.join("db.sock").display())
}

fn vswitchd_ctl(dir: &Path) -> PathBuf {
    dir.join("vswitchd.ctl")
}

/// Run an OVS tool against the database (`ovs-vsctl`) or the vswitchd
/// (`ovs-appctl`) in `dir`.
fn tool(ctx: &Ctx, dir: &Path, prog: &str, args: &[&str]) -> Result<Vec<String>, BenchError> {
    let mut argv = vec![prog.to_string()];
    match prog {
        "ovs-vsctl" => {
            argv.push(format!("--db={}", db(dir)));
            argv.push("--timeout=30".into());
        }
        "ovs-appctl" => argv.push(format!("--target={}", vswitchd_ctl(dir).display())),
        _ => {}
    }
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut s = Spawn::new(prog, argv, &ctx.work);
    s.env = env(dir);
    run_once(s, &ctx.stop, Duration::from_secs(40))
}

impl Ovs {
    /// `ovs-vsctl args`.
    pub fn vsctl(&self, ctx: &Ctx, args: &[&str]) -> Result<Vec<String>, BenchError> {
        tool(ctx, &self.dir, "ovs-vsctl", args)
    }

    /// `ovs-ofctl args`.
    pub fn ofctl(&self, ctx: &Ctx, args: &[&str]) -> Result<Vec<String>, BenchError> {
        tool(ctx, &self.dir, "ovs-ofctl", args)
    }

    /// `ovs-appctl args` against this vswitchd.
    pub fn appctl(&self, ctx: &Ctx, args: &[&str]) -> Result<Vec<String>, BenchError> {
        tool(ctx, &self.dir, "ovs-appctl", args)
    }

    /// Start both daemons in `<work>/<name>` (its command goes into `f`) and
    /// build the netdev bridge `br0`, without ports.
    pub fn start(ctx: &Ctx, f: &mut ResultFile, name: &str) -> Result<Ovs, BenchError> {
        let dir = ctx.work.join(name);
        std::fs::create_dir_all(&dir).map_err(BenchError::io(&dir))?;
        let env = env(&dir);
        let schema = "/usr/share/openvswitch/vswitch.ovsschema";
        let conf = dir.join("conf.db");
        let mut s = Spawn::new(
            "ovsdb-tool",
            vec![
                "ovsdb-tool".into(),
                "create".into(),
                conf.display().to_string(),
                schema.into(),
            ],
            &ctx.work,
        );
        s.env = env.clone();
        run_once(s, &ctx.stop, Duration::from_secs(20))?;
        let sock = dir.join("db.sock");
        let mut s = Spawn::new(
            "ovsdb-server",
            vec![
                "ovsdb-server".into(),
                conf.display().to_string(),
                format!("--remote=punix:{}", sock.display()),
                format!("--unixctl={}", dir.join("ovsdb.ctl").display()),
                "--log-file".into(),
            ],
            &ctx.work,
        );
        s.env = env.clone();
        let mut db_server = Child::spawn(s, &ctx.stop)?;
        wait_path(&sock, Duration::from_secs(20), &mut db_server)?;
        let cpu_mask = |cpu: usize| format!("0x{:x}", 1u64 << cpu);
        tool(ctx, &dir, "ovs-vsctl", &["--no-wait", "init"])?;
        let settings = [
            "other_config:dpdk-init=true".to_string(),
            "other_config:dpdk-extra=\"--no-huge -m 1024 --no-pci --legacy-mem\"".into(),
            "other_config:per-port-memory=true".into(),
            format!(
                "other_config:dpdk-lcore-mask={}",
                cpu_mask(ctx.frontend_cpu)
            ),
            format!("other_config:pmd-cpu-mask={}", cpu_mask(ctx.backend_cpu)),
        ];
        let mut args = vec!["--no-wait", "set", "Open_vSwitch", "."];
        args.extend(settings.iter().map(String::as_str));
        tool(ctx, &dir, "ovs-vsctl", &args)?;
        let argv = vec![
            OVS_DPDK.to_string(),
            db(&dir),
            format!("--unixctl={}", vswitchd_ctl(&dir).display()),
            "--log-file".into(),
        ];
        f.commands.push(ctx.show(&argv));
        let mut s = Spawn::new("ovs-vswitchd", argv, &ctx.work);
        s.env = env;
        let ovs = Ovs {
            vswitchd: Child::spawn(s, &ctx.stop)?,
            dir,
            _db: db_server,
        };
        ovs.vsctl(
            ctx,
            &[
                "add-br",
                "br0",
                "--",
                "set",
                "bridge",
                "br0",
                "datapath_type=netdev",
            ],
        )?;
        Ok(ovs)
    }

    /// Add `dpdkvhostuser` port `port` to `br0` and wait for its socket,
    /// which it returns.
    pub fn add_vhost_port(&mut self, ctx: &Ctx, port: &str) -> Result<PathBuf, BenchError> {
        self.vsctl(
            ctx,
            &[
                "add-port",
                "br0",
                port,
                "--",
                "set",
                "Interface",
                port,
                "type=dpdkvhostuser",
            ],
        )?;
        // Server mode: OVS creates the socket in its run directory (the
        // default vhost-sock-dir), named after the port.
        let sock = self.dir.join(port);
        wait_path(&sock, Duration::from_secs(60), &mut self.vswitchd)?;
        Ok(sock)
    }

    /// Replace `br0`'s flows with `flows` (`ovs-ofctl add-flow` syntax).
    pub fn set_flows(&self, ctx: &Ctx, flows: &[&str]) -> Result<(), BenchError> {
        self.ofctl(ctx, &["del-flows", "br0"])?;
        for fl in flows {
            self.ofctl(ctx, &["add-flow", "br0", fl])?;
        }
        Ok(())
    }

    /// Set the PMDs' load-based sleep bound, µs (0 = busy polling).
    pub fn set_maxsleep(&self, ctx: &Ctx, us: u32) -> Result<(), BenchError> {
        self.vsctl(
            ctx,
            &[
                "set",
                "Open_vSwitch",
                ".",
                &format!("other_config:pmd-maxsleep={us}"),
            ],
        )?;
        Ok(())
    }

    /// `n_packets` of `br0`'s first `in_port` flow so far.
    pub fn flow_packets(&self, ctx: &Ctx) -> Result<u64, BenchError> {
        let out = self.ofctl(ctx, &["dump-flows", "br0"])?;
        parse_n_packets(&out).ok_or_else(|| BenchError::Parse {
            what: "ovs-ofctl dump-flows".into(),
            detail: out.join("\n"),
        })
    }

    /// CPU seconds of the PMD thread(s).
    pub fn pmd_cpu(&self) -> f64 {
        threads_cpu_seconds(self.vswitchd.pid(), |c| c.starts_with("pmd")).unwrap_or(0.0)
    }

    /// Zero the PMDs' packet and cycle counters (`pmd-stats-clear`).
    pub fn clear_pmd_stats(&self, ctx: &Ctx) -> Result<(), BenchError> {
        self.appctl(ctx, &["dpif-netdev/pmd-stats-clear"])?;
        Ok(())
    }

    /// The PMDs' counters since the last [`clear_pmd_stats`](Self::clear_pmd_stats).
    pub fn pmd_stats(&self, ctx: &Ctx) -> Result<PmdStats, BenchError> {
        let out = self.appctl(ctx, &["dpif-netdev/pmd-stats-show"])?;
        parse_pmd_stats(&out).ok_or_else(|| BenchError::Parse {
            what: "ovs-appctl dpif-netdev/pmd-stats-show".into(),
            detail: out.join("\n"),
        })
    }
}

/// `n_packets` of the first `in_port` flow in `ovs-ofctl dump-flows` output.
pub fn parse_n_packets(lines: &[String]) -> Option<u64> {
    lines
        .iter()
        .find(|l| l.contains("in_port"))
        .and_then(|l| l.split("n_packets=").nth(1))
        .and_then(|r| r.split([',', ' ']).next())
        .and_then(|v| v.parse().ok())
}

/// The number after `key` on `line` (up to the next space), if any.
fn num_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// Sum of the PMD threads' blocks of `pmd-stats-show`: each starts with a
/// `pmd thread numa_id N core_id M:` line, the main thread's with `main
/// thread`. OVS leaves out the cycle lines of a PMD that has not counted any
/// cycles yet, so those add nothing. `None` when there is no PMD block.
pub fn parse_pmd_stats(lines: &[String]) -> Option<PmdStats> {
    let mut s = PmdStats::default();
    let (mut in_pmd, mut seen) = (false, false);
    for l in lines {
        if !l.starts_with(char::is_whitespace) {
            in_pmd = l.starts_with("pmd thread");
            seen |= in_pmd;
            continue;
        }
        if !in_pmd {
            continue;
        }
        let t = l.trim_start();
        for (key, to) in [
            ("packets received:", &mut s.packets),
            ("processing cycles:", &mut s.busy_cycles),
            ("idle cycles:", &mut s.idle_cycles),
        ] {
            if t.starts_with(key) {
                *to += num_after(t, key)?;
            }
        }
    }
    seen.then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn flow_counter_is_read_from_dump_flows() {
        let out = lines(
            "NXST_FLOW reply (xid=0x4):\n \
             cookie=0x0, duration=3.2s, table=0, n_packets=123456, n_bytes=7901184, in_port=vh0 actions=drop",
        );
        assert_eq!(parse_n_packets(&out), Some(123456));
        assert_eq!(parse_n_packets(&out[..1]), None);
    }

    /// `pmd-stats-show` of OVS 3.1 (lib/dpif-netdev.c, pmd_info_show_stats),
    /// main thread first as OVS prints it.
    const PMD_STATS: &str = "main thread:\n\
        \x20 packets received: 7\n\
        \x20 avg. packets per output batch: 1.00\n\
        \x20 idle cycles: 5 (50.00%)\n\
        \x20 processing cycles: 5 (50.00%)\n\
        pmd thread numa_id 0 core_id 1:\n\
        \x20 packets received: 450012\n\
        \x20 packet recirculations: 0\n\
        \x20 avg. datapath passes per packet: 1.00\n\
        \x20 emc hits: 450010\n\
        \x20 miss with success upcall: 2\n\
        \x20 avg. packets per output batch: 1.21\n\
        \x20 idle cycles: 2900000000 (72.50%)\n\
        \x20 processing cycles: 1100000000 (27.50%)\n\
        \x20 avg cycles per packet: 8888.65 (4000000000/450012)\n\
        \x20 avg processing cycles per packet: 2444.38 (1100000000/450012)\n";

    #[test]
    fn pmd_stats_sum_pmd_threads_only() {
        let s = parse_pmd_stats(&lines(PMD_STATS)).unwrap();
        assert_eq!(
            s,
            PmdStats {
                packets: 450012,
                busy_cycles: 1_100_000_000,
                idle_cycles: 2_900_000_000,
            }
        );
        // A second PMD adds up; one without cycles yet adds its packets only.
        let two = format!(
            "{PMD_STATS}pmd thread numa_id 0 core_id 3:\n  packets received: 8\n  emc hits: 8\n"
        );
        let s = parse_pmd_stats(&lines(&two)).unwrap();
        assert_eq!((s.packets, s.busy_cycles), (450020, 1_100_000_000));
    }

    #[test]
    fn pmd_stats_without_pmd_or_with_garbage_are_refused() {
        assert_eq!(
            parse_pmd_stats(&lines("main thread:\n  packets received: 7\n")),
            None
        );
        assert_eq!(
            parse_pmd_stats(&lines(
                "pmd thread numa_id 0 core_id 1:\n  processing cycles: lots\n"
            )),
            None
        );
    }
}
