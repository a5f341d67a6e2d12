//! The OVS-DPDK harness of B6, by DESIGN.md's verified recipe: `ovsdb-server`
//! and the DPDK build of `ovs-vswitchd` run by hand in a private run
//! directory (no systemd), `dpdk-extra="--no-huge -m 1024 --no-pci
//! --legacy-mem"`, `per-port-memory=true`, main lcore on CPU 0, PMD on CPU 1,
//! a netdev bridge with one vhost-user port and a flow that drops what the
//! port sends (its `n_packets` counts what OVS took).
//!
//! The synthetic guest is a vhost-user client, so the port is OVS's
//! server-mode `dpdkvhostuser` (deprecated and without interface statistics,
//! hence the flow counter). Two PMD modes: busy polling (`pmd-maxsleep=0`)
//! and load-based sleep (`pmd-maxsleep=500` µs). Loads: idle (1 packet/s,
//! as B4) and the 10 % / 50 % rates of B2 (absolute rates taken from B2's
//! saturation in the same output directory when present, else 1 Mpps).
//! CPU is the PMD thread's (`/proc/<pid>/task/*/comm` = `pmd…`).

use super::child::{run_once, threads_cpu_seconds, Child, Spawn};
use super::ctx::Ctx;
use super::error::BenchError;
use super::table::{label, metric_table};
use super::vadapt_proc::{GuestOpts, GuestProc};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vadapt_results::{ResultFile, Row};

/// The DPDK build of ovs-vswitchd in Debian's package.
pub const OVS_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";

/// PMD sleep settings measured, µs (0 = busy polling).
const MAXSLEEP: [u32; 2] = [0, 500];

/// A running OVS-DPDK (ovsdb-server + ovs-vswitchd) in its own directory.
#[derive(Debug)]
struct Ovs {
    dir: PathBuf,
    vswitchd: Child,
    _db: Child,
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

/// Run an OVS tool against the database in `dir`.
fn tool(ctx: &Ctx, dir: &Path, prog: &str, args: &[&str]) -> Result<Vec<String>, BenchError> {
    let mut argv = vec![prog.to_string()];
    if prog == "ovs-vsctl" {
        argv.push(format!("--db={}", db(dir)));
        argv.push("--timeout=30".into());
    }
    argv.extend(args.iter().map(|a| a.to_string()));
    let mut s = Spawn::new(prog, argv, &ctx.work);
    s.env = env(dir);
    run_once(s, &ctx.stop, Duration::from_secs(40))
}

impl Ovs {
    fn vsctl(&self, ctx: &Ctx, args: &[&str]) -> Result<Vec<String>, BenchError> {
        tool(ctx, &self.dir, "ovs-vsctl", args)
    }

    fn ofctl(&self, ctx: &Ctx, args: &[&str]) -> Result<Vec<String>, BenchError> {
        tool(ctx, &self.dir, "ovs-ofctl", args)
    }

    /// Start both daemons and build `br0` with vhost-user port `vh0`.
    fn start(ctx: &Ctx, f: &mut ResultFile) -> Result<Ovs, BenchError> {
        let dir = ctx.work.join("ovs");
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
        super::child::wait_path(&sock, Duration::from_secs(20), &mut db_server)?;
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
            format!("--unixctl={}", dir.join("vswitchd.ctl").display()),
            "--log-file".into(),
        ];
        f.commands.push(ctx.show(&argv));
        let mut s = Spawn::new("ovs-vswitchd", argv, &ctx.work);
        s.env = env;
        let mut ovs = Ovs {
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
        ovs.vsctl(
            ctx,
            &[
                "add-port",
                "br0",
                "vh0",
                "--",
                "set",
                "Interface",
                "vh0",
                "type=dpdkvhostuser",
            ],
        )?;
        super::child::wait_path(&ovs.socket(), Duration::from_secs(60), &mut ovs.vswitchd)?;
        ovs.ofctl(ctx, &["del-flows", "br0"])?;
        ovs.ofctl(ctx, &["add-flow", "br0", "in_port=vh0,actions=drop"])?;
        Ok(ovs)
    }

    /// The vhost-user socket of port `vh0` (server mode: OVS creates it).
    fn socket(&self) -> PathBuf {
        self.dir.join("vh0")
    }

    /// Packets the drop flow matched so far.
    fn flow_packets(&self, ctx: &Ctx) -> Result<u64, BenchError> {
        let out = self.ofctl(ctx, &["dump-flows", "br0"])?;
        parse_n_packets(&out).ok_or_else(|| BenchError::Parse {
            what: "ovs-ofctl dump-flows".into(),
            detail: out.join("\n"),
        })
    }

    /// CPU seconds of the PMD thread(s).
    fn pmd_cpu(&self) -> f64 {
        threads_cpu_seconds(self.vswitchd.pid(), |c| c.starts_with("pmd")).unwrap_or(0.0)
    }
}

/// `n_packets` of the `in_port=vh0` flow in `ovs-ofctl dump-flows` output.
pub fn parse_n_packets(lines: &[String]) -> Option<u64> {
    lines
        .iter()
        .find(|l| l.contains("in_port"))
        .and_then(|l| l.split("n_packets=").nth(1))
        .and_then(|r| r.split([',', ' ']).next())
        .and_then(|v| v.parse().ok())
}

/// Run OVS-DPDK under the idle and partial loads.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(4.0, 1.0);
    f.run_seconds = window.as_secs_f64();
    let sat = ResultFile::read(&ctx.out_dir(), "b2")
        .ok()
        .flatten()
        .and_then(|b| b.params.get("saturation_mpps").copied())
        .unwrap_or(10.0);
    f.params.insert("saturation_mpps".into(), sat);
    let ovs = Ovs::start(ctx, f)?;
    let exit = vadapt_guest::config::DEFAULT_EXIT_COST_NS;
    for run in 0..ctx.runs {
        for ms in MAXSLEEP {
            ovs.vsctl(
                ctx,
                &[
                    "set",
                    "Open_vSwitch",
                    ".",
                    &format!("other_config:pmd-maxsleep={ms}"),
                ],
            )?;
            let mode = format!("maxsleep={ms}");
            ctx.say(&format!("{mode} round {}/{}", run + 1, ctx.runs));
            for (variant, rate) in [("idle", 1.0), ("10%", sat * 0.1e6), ("50%", sat * 0.5e6)] {
                let opts = GuestOpts {
                    rate: format!("{rate:.0}"),
                    ..GuestOpts::stream(64, window, exit)
                };
                let p0 = ovs.flow_packets(ctx)?;
                let c0 = ovs.pmd_cpu();
                let t0 = Instant::now();
                let g = GuestProc::spawn(ctx, "b6-guest", &ovs.socket(), &opts)?.finish()?;
                let dt = t0.elapsed().as_secs_f64();
                let cpu = ovs.pmd_cpu() - c0;
                let pk = ovs.flow_packets(ctx)?.saturating_sub(p0);
                let table = if variant == "idle" { "idle" } else { "load" };
                let mut r = Row::new(table, "guest", "ovs-dpdk", &mode, variant).at(64, run);
                r.set("cpu_pct", cpu / dt * 100.0)
                    .set("mpps", pk as f64 / g.elapsed / 1e6)
                    .set(
                        "loss_pct",
                        super::b1::pct(g.sent_packets.saturating_sub(pk), g.sent_packets),
                    );
                if table == "load" {
                    // Per-packet figures of a handful of idle packets mean nothing.
                    let mpkt = pk as f64 / 1e6;
                    r.set("cpu_s_per_mpkt", if pk > 0 { cpu / mpkt } else { f64::NAN })
                        .set(
                            "kicks_per_mpkt",
                            super::b1::per_mpkt(g.kicks, g.sent_packets),
                        );
                }
                f.rows.push(r);
            }
        }
    }
    Ok(())
}

/// Tables of B6.
pub fn render(f: &ResultFile) -> String {
    let rows: Vec<&Row> = f.rows.iter().collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nOVS-DPDK PMD on CPU 1, synthetic guest (64 B, exit cost on) on CPU 0; loads as B4 (idle, 1 packet/s) \
         and B2 (percent of busy-poll saturation, {:.3} Mpps). CPU is the PMD thread's.\n\n",
        f.params.get("saturation_mpps").copied().unwrap_or(0.0)
    );
    s.push_str(&metric_table(
        &rows,
        &[("load", |r| r.variant.clone()), ("backend", label)],
        &[
            ("mpps", "Mpps", 3),
            ("cpu_pct", "PMD CPU %", 1),
            ("cpu_s_per_mpkt", "CPU-s/Mpkt", 3),
            ("kicks_per_mpkt", "kicks/Mpkt", 0),
            ("loss_pct", "loss %", 2),
        ],
        &[],
        |_, _| false,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_counter_is_read_from_dump_flows() {
        let out: Vec<String> = [
            "NXST_FLOW reply (xid=0x4):",
            " cookie=0x0, duration=3.2s, table=0, n_packets=123456, n_bytes=7901184, in_port=vh0 actions=drop",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(parse_n_packets(&out), Some(123456));
        assert_eq!(parse_n_packets(&out[..1]), None);
    }
}
