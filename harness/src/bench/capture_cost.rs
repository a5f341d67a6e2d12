//! What a running `vadapt capture` costs B1's port (issue 40, "Measured":
//! busy cycles a packet with and without, in one run).
//!
//! B1's saturation setup, one port: a sender never waits and addresses its
//! 64-byte frames to vadapt's sink; the port's worker busy-polls on the
//! backend CPU. Senders, as B1 has them: DPDK virtio-user `txonly` (split
//! ring, `in_order=1`, B1's default) where DPDK is installed, and the
//! synthetic guest (closed loop, exit cost 0) always. In each round each
//! sender takes two turns on the one daemon, in an order that alternates
//! from round to round: without a capture, and with `vadapt capture PORT
//! --dir both -w FILE` running from before the window opens until after it
//! closes (the file is removed after each turn). A turn reports the port's
//! rate and its worker's busy cycles a packet (TSC cycles of non-empty
//! service passes over the packets they moved, B1's definition); the
//! capture's turn also the frames it wrote and those its tap could not keep
//! (`capture_dropped`: its writer behind, the frames went on as ever). The
//! report gives the with/without ratio per round, median with min–max.
//!
//! The whole daemon is pinned to the backend CPU (as in every benchmark),
//! and with it the capture's writer thread: on this 2-CPU machine the
//! writer takes time from the busy-polling worker, and a writer that
//! preempts the worker inside a pass adds its time to that pass's cycles.
//! That is the capture's cost on a host whose daemon has one CPU; the
//! `vadapt capture` client (it copies the stream to the file) is not
//! pinned.

use super::child::{Child, Spawn};
use super::ctx::Ctx;
use super::error::BenchError;
use super::shared::per_mpkt;
use super::table::{label, metric_table, LabelCol};
use super::testpmd::{self, Testpmd, UserRing};
use super::vadapt_proc::{delta, Daemon, GuestOpts, GuestProc, PortDelta, VmPort, SINK_MAC};
use std::time::{Duration, Instant};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_policy::PolicyKind;
use vadapt_results::{ratio, ResultFile, Row, Spread};

/// Title.
pub const TITLE: &str =
    "capture cost: B1's port busy polling, with and without a running `vadapt capture -w FILE`";

/// Frame size, bytes (B1's smallest: the most frames a second to copy).
const FRAME: u32 = 64;

/// The variant of a turn without a capture.
pub const WITHOUT: &str = "without capture";
/// The variant of a turn with one.
pub const WITH: &str = "with capture";

/// Time after the sender starts before the window opens.
const SETTLE: Duration = Duration::from_millis(300);

/// Longest the capture client may take to say it started, and to end.
const CAPTURE_WAIT: Duration = Duration::from_secs(20);

/// Run it.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(3.0, 0.5);
    f.run_seconds = window.as_secs_f64();
    // A port per sender, as B1 has (a vhost-user socket takes one
    // frontend, and DPDK's stays connected between its turns).
    let vms = [
        VmPort::new(&ctx.work, "capd", 1, PolicyKind::Interrupt),
        VmPort::new(&ctx.work, "capg", 1, PolicyKind::Interrupt),
    ];
    let mut d = Daemon::spawn(ctx, "capcost-vadapt", &vms)?;
    let vm = &vms[0];
    f.commands.push(ctx.show(&d.command));
    let mut fe = match testpmd::available() {
        Ok(()) => {
            let ring = UserRing::split(true);
            let fe = Testpmd::spawn(
                ctx,
                "capcost-fe-dpdk",
                &format!("0@{},1@{}", ctx.backend_cpu, ctx.frontend_cpu),
                &testpmd::virtio_user_vdev(&vm.socket, ring),
                &[
                    "--forward-mode=txonly".into(),
                    format!("--txpkts={FRAME}"),
                    format!("--eth-peer=0,{SINK_MAC}"),
                ],
                None,
            )?;
            f.commands.push(ctx.show(&fe.child.argv));
            Some((fe, ring.label()))
        }
        Err(msg) => {
            ctx.say(&msg);
            f.notes.push(msg);
            None
        }
    };
    let opts = GuestOpts::stream(FRAME, window, 0);
    let file = ctx.work.join("capcost.pcapng");
    f.commands
        .push(ctx.show(&capture_argv(ctx, &d, &vm.name, &file)));
    // `--quick` (CI's smoke): one round of half-second windows.
    let runs = if ctx.quick { 1 } else { ctx.runs };
    for run in 0..runs {
        ctx.say(&format!("capture cost round {}/{runs}", run + 1));
        // Alternate which turn goes first, so that neither always follows
        // the other's leftovers (a file's page cache, a warm writer).
        let order = if run % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for capture in order {
            if let Some((fe, variant)) = fe.as_mut() {
                let r = dpdk_turn(ctx, &mut d, fe, vm, capture, &file, window, run)?;
                f.rows.push(r.named("dpdk-fe", "dpdk-virtio-user", variant));
            }
        }
        for capture in order {
            let r = guest_turn(ctx, &mut d, &vms[1], capture, &file, &opts, run)?;
            f.rows.push(r.named("guest", "guest", ""));
        }
    }
    if let Some((fe, _)) = fe {
        fe.quit();
    }
    Ok(())
}

/// One turn's figures, before they become a row.
struct Turn {
    capture: bool,
    run: u32,
    x: PortDelta,
    secs: f64,
    written: Option<u64>,
    capture_dropped: u64,
}

impl Turn {
    fn named(self, table: &str, sender: &str, ring: &str) -> Row {
        let variant = match (self.capture, ring.is_empty()) {
            (false, true) => WITHOUT.to_string(),
            (true, true) => WITH.to_string(),
            (false, false) => format!("{ring}, {WITHOUT}"),
            (true, false) => format!("{ring}, {WITH}"),
        };
        let mut r = Row::new(
            table,
            sender,
            "vadapt",
            PolicyKind::BusyPoll.as_str(),
            &variant,
        )
        .at(FRAME, self.run);
        r.set("mpps", self.x.tx_packets as f64 / self.secs / 1e6)
            .set(
                "cycles_per_pkt",
                self.x.cycles_per_packet().unwrap_or(f64::NAN),
            )
            .set("worker_cpu_pct", self.x.cpu_seconds / self.secs * 100.0)
            .set("kicks_per_mpkt", per_mpkt(self.x.kicks, self.x.tx_packets))
            .set("dropped", self.x.dropped as f64);
        if self.capture {
            r.set_some("captured", self.written.map(|w| w as f64))
                .set("capture_dropped", self.capture_dropped as f64)
                .set(
                    "capture_kept_pct",
                    self.written.map_or(f64::NAN, |w| {
                        100.0 * w as f64 / (w + self.capture_dropped).max(1) as f64
                    }),
                );
        }
        r
    }
}

/// `vadapt capture PORT -w FILE` against `d`'s control socket.
fn capture_argv(ctx: &Ctx, d: &Daemon, port: &str, file: &std::path::Path) -> Vec<String> {
    vec![
        ctx.exe.display().to_string(),
        "capture".into(),
        port.into(),
        "--control".into(),
        d.control.display().to_string(),
        "--dir".into(),
        "both".into(),
        "-w".into(),
        file.display().to_string(),
    ]
}

/// A running capture client.
struct RunningCapture {
    child: Child,
    file: std::path::PathBuf,
}

impl RunningCapture {
    /// Start `vadapt capture` of `port` into `file`; returns once the
    /// daemon has started it.
    fn start(
        ctx: &Ctx,
        d: &Daemon,
        port: &str,
        file: &std::path::Path,
    ) -> Result<RunningCapture, BenchError> {
        let s = Spawn::new(
            "capcost-capture",
            capture_argv(ctx, d, port, file),
            &ctx.work,
        );
        let mut child = Child::spawn(s, &ctx.stop)?;
        let from = child.mark();
        child.wait_line("the capture's start", from, CAPTURE_WAIT, |l| {
            l.contains("vadapt: capturing")
        })?;
        Ok(RunningCapture {
            child,
            file: file.to_owned(),
        })
    }

    /// End it as Ctrl-C does; the frames it wrote (from its summary line),
    /// `None` if it printed none. The file is removed.
    fn stop(mut self) -> Result<Option<u64>, BenchError> {
        let from = self.child.mark();
        self.child.signal(libc::SIGINT);
        let code = self.child.wait_exit(CAPTURE_WAIT)?;
        let written = self.child.lines_since(from).iter().find_map(|l| {
            l.split_once("vadapt: ")?
                .1
                .split_once(" frame(s) captured")?
                .0
                .trim()
                .parse()
                .ok()
        });
        let _ = std::fs::remove_file(&self.file);
        if code != Some(0) {
            return Err(BenchError::Failed(format!(
                "`vadapt capture` exited with {code:?}\n{}",
                self.child.tail(20)
            )));
        }
        Ok(written)
    }
}

/// The port's `capture_dropped` in snapshot `s`.
fn capture_dropped(s: &StatsSnapshot, port: &str) -> u64 {
    s.ports
        .iter()
        .find(|p| p.name == port)
        .map_or(0, |p| p.capture_dropped)
}

/// A turn's start: the port busy polling, and with `capture` a capture of
/// it running into `file`.
fn begin_turn(
    ctx: &Ctx,
    d: &mut Daemon,
    vm: &VmPort,
    capture: bool,
    file: &std::path::Path,
) -> Result<Option<RunningCapture>, BenchError> {
    d.set_policy(&vm.name, PolicyKind::BusyPoll)?;
    capture
        .then(|| RunningCapture::start(ctx, d, &vm.name, file))
        .transpose()
}

/// A turn's end: its capture stopped (the frames it wrote), the port back
/// in interrupt mode, and the turn from the port's counters `(before,
/// after)` a window of `secs`.
fn end_turn(
    d: &mut Daemon,
    vm: &VmPort,
    cap: Option<RunningCapture>,
    run: u32,
    (s0, s1): (&StatsSnapshot, &StatsSnapshot),
    secs: f64,
) -> Result<Turn, BenchError> {
    let capture = cap.is_some();
    let written = cap.map(RunningCapture::stop).transpose()?.flatten();
    d.set_policy(&vm.name, PolicyKind::Interrupt)?;
    Ok(Turn {
        capture,
        run,
        x: delta(s0, s1, &vm.name),
        secs,
        written,
        capture_dropped: capture_dropped(s1, &vm.name)
            .saturating_sub(capture_dropped(s0, &vm.name)),
    })
}

/// The DPDK sender's turn.
#[allow(clippy::too_many_arguments)]
fn dpdk_turn(
    ctx: &Ctx,
    d: &mut Daemon,
    fe: &mut Testpmd,
    vm: &VmPort,
    capture: bool,
    file: &std::path::Path,
    window: Duration,
    run: u32,
) -> Result<Turn, BenchError> {
    let cap = begin_turn(ctx, d, vm, capture, file)?;
    fe.start()?;
    ctx.sleep(SETTLE)?;
    let s0 = d.stats()?;
    let t0 = Instant::now();
    ctx.sleep(window)?;
    let s1 = d.stats()?;
    let secs = t0.elapsed().as_secs_f64();
    fe.stop()?;
    end_turn(d, vm, cap, run, (&s0, &s1), secs)
}

/// The synthetic guest's turn.
fn guest_turn(
    ctx: &Ctx,
    d: &mut Daemon,
    vm: &VmPort,
    capture: bool,
    file: &std::path::Path,
    opts: &GuestOpts,
    run: u32,
) -> Result<Turn, BenchError> {
    let cap = begin_turn(ctx, d, vm, capture, file)?;
    let s0 = d.stats()?;
    let g = GuestProc::spawn(ctx, "capcost-guest", &vm.socket, opts)?;
    let res = g.finish()?;
    let s1 = d.stats()?;
    end_turn(d, vm, cap, run, (&s0, &s1), res.elapsed)
}

/// Busy cycles a packet with a capture over without, per round, for the
/// sender of `table` (`dpdk-fe`, `guest`).
pub fn cycles_ratio(f: &ResultFile, table: &str) -> Option<Spread> {
    let rows = |which: &str| -> Vec<&Row> {
        f.table(table)
            .filter(|r| r.variant.ends_with(which))
            .collect()
    };
    ratio(&rows(WITH), &rows(WITHOUT), "cycles_per_pkt")
}

/// The tables.
pub fn render(f: &ResultFile) -> String {
    let mut s = String::new();
    let first: &[LabelCol<'_>] = &[
        ("sender", |r| r.sender.clone()),
        ("backend", label),
        ("turn", |r| r.variant.clone()),
    ];
    let base = |b: &Row, r: &Row| b.table == r.table && b.variant.ends_with(WITHOUT);
    let rows: Vec<&Row> = f.table("dpdk-fe").chain(f.table("guest")).collect();
    if rows.is_empty() {
        return s;
    }
    s.push_str(&format!(
        "\n{FRAME}-byte frames to the sink; worker on CPU 1 busy polling, sender on CPU 0; \
         the capture `--dir both -w FILE`.\n\n"
    ));
    s.push_str(&metric_table(
        &rows,
        first,
        &[
            ("mpps", "Mpps", 2),
            ("cycles_per_pkt", "busy cycles/pkt", 0),
            ("worker_cpu_pct", "worker CPU %", 0),
            ("captured", "frames captured", 0),
            ("capture_dropped", "capture dropped", 0),
            ("capture_kept_pct", "capture kept %", 1),
        ],
        &[
            ("cycles_per_pkt", "cycles × without"),
            ("mpps", "rate × without"),
        ],
        base,
    ));
    for (table, who) in [("dpdk-fe", "DPDK txonly"), ("guest", "synthetic guest")] {
        if let Some(r) = cycles_ratio(f, table) {
            s.push_str(&format!(
                "\n{who}: busy cycles a packet with a running capture are {}× those without \
                 (median, min–max over rounds).\n",
                r.show(2)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_pairs_turns_of_one_round_and_sender() {
        let mut f = ResultFile::default();
        for run in 0..3 {
            for (capture, cycles) in [(false, 100.0), (true, 100.0 + 10.0 * f64::from(run + 1))] {
                let t = Turn {
                    capture,
                    run,
                    x: PortDelta {
                        tx_packets: 1000,
                        busy_cycles: (cycles * 1000.0) as u64,
                        busy_packets: 1000,
                        ..PortDelta::default()
                    },
                    secs: 1.0,
                    written: capture.then_some(900),
                    capture_dropped: 100,
                };
                f.rows.push(t.named("guest", "guest", ""));
            }
        }
        let r = cycles_ratio(&f, "guest").unwrap();
        assert_eq!((r.min, r.median, r.max), (1.1, 1.2, 1.3));
        assert!(cycles_ratio(&f, "dpdk-fe").is_none());
        let with: Vec<&Row> = f.table("guest").filter(|r| r.variant == WITH).collect();
        assert!(with.iter().all(|r| r.m["capture_kept_pct"] == 90.0));
        let t = render(&f);
        assert!(t.contains("1.20 (1.10–1.30)"), "{t}");
    }
}
