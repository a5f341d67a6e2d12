//! DPDK `dpdk-testpmd` in interactive mode, driven over stdin: the DPDK vhost
//! PMD reference backend and the virtio-user txonly frontend (their command
//! lines: docs/architecture.md, "Facts the code relies on").
//!
//! Interactive mode (`-i`) matters for the benchmark: between `start` and
//! `stop` the forwarding lcore busy-polls, outside it the lcore blocks, so
//! several backends can stay up on the same cores and be measured in turn
//! (A/B/A/B) without one's polling disturbing the other's run.

use super::child::{wait_path, Child, Spawn};
use super::ctx::Ctx;
use super::error::BenchError;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vadapt_results::ResultFile;

/// The testpmd binary.
pub const TESTPMD: &str = "dpdk-testpmd";

/// How long testpmd may take to come up (it maps 1 GB without hugepages).
const STARTUP: Duration = Duration::from_secs(60);

/// Counters of a `stop` report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FwdStats {
    /// RX-packets of the accumulated block.
    pub rx: u64,
    /// TX-packets.
    pub tx: u64,
    /// TX-dropped (frontend: ring full).
    pub tx_dropped: u64,
    /// `CPU cycles/packet` from `--record-core-cycles` (busy cycles of
    /// non-empty bursts / received packets), when printed.
    pub cycles_per_packet: Option<f64>,
    /// Busy cycles (the numerator of the above), when printed: TSC cycles of
    /// the bursts that received (or, `txonly`, sent) packets. DPDK 23.03+
    /// labels them `busy cycles=`; 22.11 labels them `total cycles=` but
    /// counts the same thing, since its forwarding engines return before
    /// stopping the cycle count when a burst is empty (`iofwd.c`,
    /// `rxonly.c`: `if (unlikely(nb_rx == 0)) return;` before
    /// `get_end_cycles`).
    pub busy_cycles: Option<u64>,
}

/// `show port stats` counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortCounters {
    /// RX-packets since port start.
    pub rx_packets: u64,
    /// RX-bytes since port start.
    pub rx_bytes: u64,
    /// TX-packets since port start.
    pub tx_packets: u64,
}

/// A running testpmd.
#[derive(Debug)]
pub struct Testpmd {
    /// The process.
    pub child: Child,
    runtime_dir: PathBuf,
    forwarding: bool,
}

/// Whether `dpdk-testpmd` can be run, else a line saying how to get it.
pub fn available() -> Result<(), String> {
    if crate::machine::which(TESTPMD).is_some() {
        Ok(())
    } else {
        Err(format!(
            "{TESTPMD} not installed: skipped (install with `apt-get install dpdk`, or run scripts/install-deps.sh)"
        ))
    }
}

/// The `--vdev` of a vhost PMD backend port on `sock`.
pub fn vhost_vdev(sock: &Path) -> Vec<String> {
    vec![
        "--vdev".into(),
        format!("net_vhost0,iface={},queues=1", sock.display()),
    ]
}

/// The ring a DPDK virtio-user frontend drives, and in which order it
/// expects buffers back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRing {
    /// `packed_vq=1`: the packed ring (`VIRTIO_F_RING_PACKED`).
    pub packed: bool,
    /// `in_order=1`: `VIRTIO_F_IN_ORDER` offered.
    pub in_order: bool,
}

impl UserRing {
    /// A split ring.
    pub const fn split(in_order: bool) -> Self {
        UserRing {
            packed: false,
            in_order,
        }
    }

    /// A packed ring.
    pub const fn packed(in_order: bool) -> Self {
        UserRing {
            packed: true,
            in_order,
        }
    }

    /// How results name it: `in_order=1` (split), `packed, in_order=1`.
    pub fn label(self) -> String {
        let order = format!("in_order={}", u8::from(self.in_order));
        if self.packed {
            format!("packed, {order}")
        } else {
            order
        }
    }

    /// A short tag for file and process names: `io1`, `pio1`.
    pub fn tag(self) -> String {
        format!(
            "{}io{}",
            if self.packed { "p" } else { "" },
            u8::from(self.in_order)
        )
    }
}

/// The `--vdev` of a virtio-user frontend port on `sock`.
pub fn virtio_user_vdev(sock: &Path, ring: UserRing) -> Vec<String> {
    vec![
        // One memfd per segment: the backend maps the frontend's memory.
        "--single-file-segments".into(),
        "--vdev".into(),
        format!(
            "net_virtio_user0,path={},queues=1,in_order={}{}",
            sock.display(),
            u8::from(ring.in_order),
            if ring.packed { ",packed_vq=1" } else { "" }
        ),
    ]
}

/// A DPDK vhost PMD backend listening on `sock`, its forwarding lcore on the
/// backend CPU, with testpmd application arguments `app` (the forward mode);
/// its command goes into `f`. `None` when testpmd is not installed, with the
/// reason said and kept as a note in `f`.
pub fn vhost_backend(
    ctx: &Ctx,
    f: &mut ResultFile,
    name: &str,
    sock: &Path,
    app: &[String],
) -> Result<Option<Testpmd>, BenchError> {
    match available() {
        Ok(()) => {
            let b = Testpmd::spawn(
                ctx,
                name,
                &format!("0@{},1@{}", ctx.frontend_cpu, ctx.backend_cpu),
                &vhost_vdev(sock),
                app,
                Some(sock),
            )?;
            f.commands.push(ctx.show(&b.child.argv));
            Ok(Some(b))
        }
        Err(msg) => {
            ctx.say(&msg);
            f.notes.push(msg);
            Ok(None)
        }
    }
}

impl Testpmd {
    /// Start testpmd named `name` with `lcores` (e.g. `0@0,1@1`: main lcore 0
    /// on CPU 0, forwarding lcore 1 on CPU 1), EAL arguments `eal` and
    /// application arguments `app`; waits until its port is up and, when
    /// `wait_socket` is given (a vhost backend), until its socket exists.
    pub fn spawn(
        ctx: &Ctx,
        name: &str,
        lcores: &str,
        eal: &[String],
        app: &[String],
        wait_socket: Option<&Path>,
    ) -> Result<Testpmd, BenchError> {
        Testpmd::spawn_in(ctx, name, None, lcores, eal, app, wait_socket)
    }

    /// [`Testpmd::spawn`] inside network namespace `netns` when given
    /// (`ip netns exec`): a sender on the far end of a veth wire.
    pub fn spawn_in(
        ctx: &Ctx,
        name: &str,
        netns: Option<&str>,
        lcores: &str,
        eal: &[String],
        app: &[String],
        wait_socket: Option<&Path>,
    ) -> Result<Testpmd, BenchError> {
        let prefix = format!("vb{}-{name}", std::process::id());
        let mut argv: Vec<String> = match netns {
            Some(ns) => vec!["ip".into(), "netns".into(), "exec".into(), ns.into()],
            None => Vec::new(),
        };
        argv.extend([
            // testpmd writes with stdio: line-buffer it, else the pipe holds
            // the `stop` report back.
            "stdbuf".into(),
            "-oL".into(),
            TESTPMD.into(),
            "--lcores".into(),
            lcores.into(),
            "--no-huge".into(),
            "-m".into(),
            "1024".into(),
            "--no-pci".into(),
            format!("--file-prefix={prefix}"),
        ]);
        argv.extend(eal.iter().cloned());
        argv.extend(["--".into(), "-i".into(), "--total-num-mbufs=8192".into()]);
        argv.extend(app.iter().cloned());
        let mut s = Spawn::new(name, argv, &ctx.work);
        s.stdin = true;
        let mut child = Child::spawn(s, &ctx.stop)?;
        child.wait_line("port start", 0, STARTUP, |l| {
            l.starts_with("Port 0: ") || l.contains("testpmd>")
        })?;
        if let Some(sock) = wait_socket {
            wait_path(sock, STARTUP, &mut child)?;
        }
        Ok(Testpmd {
            child,
            runtime_dir: PathBuf::from("/var/run/dpdk").join(prefix),
            forwarding: false,
        })
    }

    /// `start` forwarding; returns when testpmd acknowledged it.
    pub fn start(&mut self) -> Result<(), BenchError> {
        let mark = self.child.mark();
        self.child.send("start")?;
        self.child
            .wait_line("start", mark, Duration::from_secs(20), |l| {
                l.contains("packet forwarding") || l.contains("Packet forwarding already started")
            })?;
        self.forwarding = true;
        Ok(())
    }

    /// `stop` forwarding; the report's counters.
    pub fn stop(&mut self) -> Result<FwdStats, BenchError> {
        let mark = self.child.mark();
        self.child.send("stop")?;
        let (done, _) =
            self.child
                .wait_line("stop report", mark, Duration::from_secs(30), |l| {
                    l.trim() == "Done."
                })?;
        self.forwarding = false;
        let lines = self.child.lines_since(mark);
        let lines = &lines[..(done - mark).min(lines.len())];
        parse_stop(lines).ok_or_else(|| BenchError::Parse {
            what: format!("{} stop report", self.child.name),
            detail: lines.join("\n"),
        })
    }

    /// `show port stats 0`.
    pub fn port_stats(&mut self) -> Result<PortCounters, BenchError> {
        self.port_stats_of(0)
    }

    /// `show port stats PORT`.
    pub fn port_stats_of(&mut self, port: u16) -> Result<PortCounters, BenchError> {
        let mark = self.child.mark();
        self.child.send(&format!("show port stats {port}"))?;
        let (end, _) = self
            .child
            .wait_line("port stats", mark, Duration::from_secs(20), |l| {
                l.contains("Tx-pps")
            })?;
        let lines = self.child.lines_since(mark);
        let lines = &lines[..(end - mark).min(lines.len())];
        parse_port_stats(lines).ok_or_else(|| BenchError::Parse {
            what: format!("{} port stats", self.child.name),
            detail: lines.join("\n"),
        })
    }

    /// Send any command (e.g. `set txpkts 1518`) and give it a moment.
    pub fn command(&mut self, line: &str) -> Result<(), BenchError> {
        self.child.send(line)?;
        super::child::sleep(Duration::from_millis(200), self.child.stop_flag())
    }

    /// CPU seconds of the whole process (all threads) so far.
    pub fn cpu_seconds(&self) -> f64 {
        super::child::process_cpu_seconds(self.child.pid()).unwrap_or(0.0)
    }

    /// `quit` and wait; SIGTERM/SIGKILL if it does not go.
    pub fn quit(mut self) {
        let t = Instant::now();
        if self.forwarding {
            let _ = self.stop();
        }
        if self.child.send("quit").is_ok() {
            let _ = self
                .child
                .wait_exit(Duration::from_secs(15).saturating_sub(t.elapsed()));
        }
        // Drop does the rest (and removes the runtime directory).
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        self.child.terminate(libc::SIGTERM, super::child::GRACE);
        let _ = std::fs::remove_dir_all(&self.runtime_dir);
    }
}

fn num_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// Counters of a `stop` report: the last RX/TX lines (the accumulated block
/// when there are several ports) and the core-cycles line.
pub fn parse_stop(lines: &[String]) -> Option<FwdStats> {
    let mut s = FwdStats::default();
    let (mut rx, mut tx) = (false, false);
    for l in lines {
        if let Some(v) = num_after(l, "RX-packets:") {
            s.rx = v;
            rx = true;
        }
        if let Some(v) = num_after(l, "TX-packets:") {
            s.tx = v;
            tx = true;
            s.tx_dropped = num_after(l, "TX-dropped:").unwrap_or(0);
        }
        if let Some(i) = l.find("CPU cycles/packet=") {
            let rest = &l[i + "CPU cycles/packet=".len()..];
            s.cycles_per_packet = rest.split_whitespace().next().and_then(|v| v.parse().ok());
            s.busy_cycles = num_after(l, "busy cycles=").or_else(|| num_after(l, "total cycles="));
        }
    }
    (rx && tx).then_some(s)
}

/// Counters of a `show port stats` block.
pub fn parse_port_stats(lines: &[String]) -> Option<PortCounters> {
    let mut c = PortCounters::default();
    let mut seen = false;
    for l in lines {
        if let Some(v) = num_after(l, "RX-packets:") {
            c.rx_packets = v;
            c.rx_bytes = num_after(l, "RX-bytes:").unwrap_or(0);
            seen = true;
        }
        if let Some(v) = num_after(l, "TX-packets:") {
            c.tx_packets = v;
        }
    }
    seen.then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn stop_report_with_core_cycles() {
        let r = lines(
            "Telling cores to stop...\n\
             \n  ---------------------- Forward statistics for port 0  ----------------------\n\
             \x20 RX-packets: 1000           RX-dropped: 0             RX-total: 1000\n\
             \x20 TX-packets: 0              TX-dropped: 0             TX-total: 0\n\
             \x20 +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++\n\
             \x20 RX-packets: 123456         RX-dropped: 0             RX-total: 123456\n\
             \x20 TX-packets: 7              TX-dropped: 99            TX-total: 106\n\
             \n  CPU cycles/packet=142.50 (busy cycles=17592320 / total RX packets=123456) at 2600 MHz Clock\n",
        );
        let s = parse_stop(&r).unwrap();
        assert_eq!(s.rx, 123456);
        assert_eq!(s.tx, 7);
        assert_eq!(s.tx_dropped, 99);
        assert_eq!(s.cycles_per_packet, Some(142.5));
        assert_eq!(s.busy_cycles, Some(17592320));
    }

    #[test]
    fn core_cycles_as_dpdk_22_11_labels_them() {
        let r = lines(
            "  RX-packets: 450000         RX-dropped: 0             RX-total: 450000\n\
             \x20 TX-packets: 449990         TX-dropped: 10            TX-total: 450000\n\
             \n  CPU cycles/packet=310.00 (total cycles=139500000 / total io packets=450000) at 2600 MHz Clock\n",
        );
        let s = parse_stop(&r).unwrap();
        assert_eq!(s.cycles_per_packet, Some(310.0));
        assert_eq!(s.busy_cycles, Some(139_500_000));
    }

    #[test]
    fn stop_report_without_counters_is_refused() {
        assert!(parse_stop(&lines("Telling cores to stop...\nDone.")).is_none());
    }

    #[test]
    fn port_stats_block() {
        let r = lines(
            "  ######################## NIC statistics for port 0  ########################\n\
             \x20 RX-packets: 512        RX-missed: 0          RX-bytes:  32768\n\
             \x20 RX-errors: 0\n  TX-packets: 3          TX-errors: 0          TX-bytes:  0\n\
             \x20 Rx-pps:            0          Rx-bps:            0\n",
        );
        let c = parse_port_stats(&r).unwrap();
        assert_eq!(c.rx_packets, 512);
        assert_eq!(c.rx_bytes, 32768);
        assert_eq!(c.tx_packets, 3);
    }

    #[test]
    fn vdev_arguments() {
        let v = virtio_user_vdev(Path::new("/tmp/a.sock"), UserRing::split(false));
        assert!(
            v[2].ends_with("path=/tmp/a.sock,queues=1,in_order=0"),
            "{v:?}"
        );
        let p = virtio_user_vdev(Path::new("/tmp/a.sock"), UserRing::packed(true));
        assert!(p[2].ends_with("in_order=1,packed_vq=1"), "{p:?}");
        assert_eq!(UserRing::packed(true).label(), "packed, in_order=1");
        assert_eq!(UserRing::split(true).label(), "in_order=1");
        assert_ne!(UserRing::packed(true).tag(), UserRing::split(true).tag());
        assert_eq!(
            vhost_vdev(Path::new("/x"))[1],
            "net_vhost0,iface=/x,queues=1"
        );
    }
}
