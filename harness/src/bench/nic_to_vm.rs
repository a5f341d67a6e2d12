//! B10 — NIC to VM: what a packet from the physical network costs on its
//! way into a VM (and back) through vadapt's AF_XDP uplink, against DPDK's
//! own path and the kernel's (issue #27).
//!
//! The NIC is the host end of a veth pair whose other end sits in a
//! network namespace ([`VethWire`]). Three backends take that end in turn,
//! each round (A/B/A/B), with the same VM frontend — the synthetic guest in
//! echo mode (`vadapt guest --mode echo`, which answers requests addressed
//! to its MAC and drops everything else, so that it is also a receiver):
//! * **DPDK**: `dpdk-testpmd` `io` forwarding between `net_af_xdp` on the
//!   veth end and a `net_vhost` port (`--record-core-cycles`);
//! * **vadapt**: `serve --uplink` on the veth end, a VM port, the uplink
//!   under each policy (busy-poll, EE-KBP, interrupt, NetAP) and the VM
//!   port on interrupt;
//! * **the kernel** (EE-KBP's NAPI baseline): the veth end in a Linux
//!   bridge with a TAP, which vadapt serves as a `--tap` port.
//!
//! The saturating sender is not ours: `dpdk-testpmd` `txonly` on
//! `net_af_xdp` inside the namespace. The paced sender (10 % and 50 % of
//! DPDK's rate) and the request/response client are an `AF_PACKET` socket
//! in the namespace ([`veth_wire`](super::veth_wire)); the VM-to-NIC
//! sender is the synthetic guest's closed-loop stream.
//!
//! Busy cycles per packet at saturation: DPDK's `--record-core-cycles`;
//! vadapt's: the VM port worker's busy cycles plus every other thread's
//! CPU time in TSC cycles (the uplink's queue workers keep no busy-cycle
//! counter yet, so their whole CPU counts: an upper bound).

use super::child::{process_cpu_seconds, Child};
use super::ctx::Ctx;
use super::error::BenchError;
use super::table::{metric_table, LabelCol};
use super::testpmd::{self, Testpmd};
use super::vadapt_proc::{Daemon, GuestOpts, GuestProc, VmPort, Workers};
use super::veth_wire::{self, Bridge, VethWire, WireSocket, WIRE_MAC};
use std::time::{Duration, Instant};
use vadapt_dataplane::metrics::StatsSnapshot;
use vadapt_policy::PolicyKind;
use vadapt_results::{ResultFile, Row};

/// Title.
pub const TITLE: &str =
    "NIC to VM: vadapt's AF_XDP uplink vs DPDK net_af_xdp↔vhost and the kernel's bridge→TAP";

/// The uplink's policies, in round order.
const POLICIES: [PolicyKind; 4] = [
    PolicyKind::BusyPoll,
    PolicyKind::Eekbp,
    PolicyKind::Interrupt,
    PolicyKind::Netap,
];

/// The guest's MAC.
const GUEST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x01];

/// Frame bytes.
const FRAME: u32 = 64;

/// Request rates, per second: low and medium.
const RR_RATES: [f64; 2] = [1_000.0, 10_000.0];

/// Offered loads, fractions of DPDK's saturation rate.
const LOADS: [f64; 2] = [0.10, 0.50];

/// Time after `start` before a window opens.
const SETTLE: Duration = Duration::from_millis(300);

/// One backend of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq)]
enum System {
    /// testpmd io between net_af_xdp and net_vhost.
    Dpdk,
    /// vadapt's uplink under this policy.
    Vadapt(PolicyKind),
    /// veth → bridge → TAP → vadapt's TAP port.
    Kernel,
}

impl System {
    fn backend(self) -> &'static str {
        match self {
            System::Dpdk => "dpdk-af-xdp",
            System::Vadapt(_) => "vadapt-uplink",
            System::Kernel => "kernel-bridge-tap",
        }
    }

    fn policy(self) -> &'static str {
        match self {
            System::Dpdk => "io",
            System::Vadapt(p) => p.as_str(),
            System::Kernel => "tap",
        }
    }

    fn row(self, table: &str, variant: &str, run: u32) -> Row {
        Row::new(table, "wire", self.backend(), self.policy(), variant).at(FRAME, run)
    }
}

/// How the tables name a row's system.
fn system_label(r: &Row) -> String {
    match r.backend.as_str() {
        "dpdk-af-xdp" => "DPDK af_xdp↔vhost io".into(),
        "kernel-bridge-tap" => "kernel bridge→TAP (vadapt TAP port)".into(),
        _ => format!("vadapt uplink {}", r.policy),
    }
}

/// Counters of a backend at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at: Option<Instant>,
    /// Frames delivered to the VM's ring.
    to_vm: u64,
    /// The backend process's CPU, s.
    cpu_s: f64,
    /// The queue workers' busy cycles (cycles of passes that moved
    /// packets, as DPDK's `--record-core-cycles` counts) and CPU, s: the
    /// VM port's worker and the uplink's (vadapt only).
    vm_busy_cycles: u64,
    vm_cpu_s: f64,
}

/// A backend up on the wire's host end.
enum Up {
    Dpdk(Testpmd),
    Vadapt {
        daemon: Daemon,
        /// The kernel's path: the bridge the TAP is in (dropped after the daemon).
        _bridge: Option<Bridge>,
    },
}

impl Up {
    fn child(&self) -> &Child {
        match self {
            Up::Dpdk(t) => &t.child,
            Up::Vadapt { daemon, .. } => &daemon.child,
        }
    }

    fn sample(&mut self) -> Result<Sample, BenchError> {
        let cpu_s = process_cpu_seconds(self.child().pid()).unwrap_or(0.0);
        let mut s = Sample {
            at: Some(Instant::now()),
            cpu_s,
            ..Sample::default()
        };
        match self {
            // Port 1 is the vhost port: its TX is what the VM got.
            Up::Dpdk(t) => s.to_vm = t.port_stats_of(1)?.tx_packets,
            Up::Vadapt { daemon, .. } => {
                let st: StatsSnapshot = daemon.stats()?;
                s.to_vm = st.port_total("vm", |q| q.rx_packets).unwrap_or(0);
                for w in st
                    .workers
                    .iter()
                    .filter(|w| w.name == "vm" || w.name.starts_with("up0/"))
                {
                    s.vm_busy_cycles += w.busy_cycles;
                    s.vm_cpu_s += w.cpu_seconds;
                }
            }
        }
        Ok(s)
    }

    /// DPDK forwards only between `start` and `stop`.
    fn start(&mut self) -> Result<(), BenchError> {
        match self {
            Up::Dpdk(t) => t.start(),
            Up::Vadapt { .. } => Ok(()),
        }
    }

    /// DPDK's busy cycles per packet since `start`.
    fn stop(&mut self) -> Result<Option<f64>, BenchError> {
        match self {
            Up::Dpdk(t) => Ok(t.stop()?.cycles_per_packet),
            Up::Vadapt { .. } => Ok(None),
        }
    }

    fn quit(self) {
        match self {
            Up::Dpdk(t) => t.quit(),
            Up::Vadapt { daemon, .. } => drop(daemon),
        }
    }
}

/// `b - a`: frames, seconds, CPU seconds, and vadapt's busy cycles
/// (the queue workers' busy cycles + the other threads' CPU in cycles: a
/// TAP reader, for the kernel's path).
fn diff(a: &Sample, b: &Sample, tsc_per_ns: f64) -> (u64, f64, f64, f64) {
    let dt = match (a.at, b.at) {
        (Some(x), Some(y)) => y.duration_since(x).as_secs_f64(),
        _ => 0.0,
    };
    let pk = b.to_vm.saturating_sub(a.to_vm);
    let cpu = (b.cpu_s - a.cpu_s).max(0.0);
    let others = (cpu - (b.vm_cpu_s - a.vm_cpu_s)).max(0.0);
    let busy = b.vm_busy_cycles.saturating_sub(a.vm_busy_cycles) as f64 + others * 1e9 * tsc_per_ns;
    (pk, dt, cpu, busy)
}

/// Everything a round needs besides the backend.
struct Bench<'a> {
    ctx: &'a Ctx,
    wire: &'a VethWire,
    sock: &'a WireSocket,
    /// testpmd is here to saturate the wire (it is started for each
    /// saturation cell only: its XDP program on the far end takes every
    /// frame the far end receives, the request/response client's too).
    has_sender: bool,
    window: Duration,
    tsc_per_ns: f64,
    /// DPDK's saturation rate, pps (the first measured), for the partial loads.
    ref_pps: Option<f64>,
}

/// Run B10.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(2.5, 0.6);
    f.run_seconds = window.as_secs_f64();
    let wire = VethWire::new("n")?;
    f.notes.push(format!(
        "wire: veth {} (host) – {} in namespace {}; backend on CPU {}, sender, client and guest on CPU {}",
        wire.host, wire.peer, wire.ns, ctx.backend_cpu, ctx.frontend_cpu
    ));
    let sock = WireSocket::open(&wire)?;
    let dpdk = testpmd::available();
    if let Err(msg) = &dpdk {
        ctx.say(msg);
        f.notes
            .push(format!("{msg}: no saturating sender and no DPDK anchor"));
    }
    let mut systems = Vec::new();
    if dpdk.is_ok() {
        systems.push(System::Dpdk);
    }
    systems.extend(POLICIES.iter().map(|p| System::Vadapt(*p)));
    systems.push(System::Kernel);
    let mut b = Bench {
        ctx,
        wire: &wire,
        sock: &sock,
        has_sender: dpdk.is_ok(),
        window,
        tsc_per_ns: vadapt_dataplane::clock::calibrate_tsc(100),
        ref_pps: None,
    };
    for run in 0..ctx.runs {
        for &sys in &systems {
            ctx.say(&format!(
                "{} {} round {}/{}",
                sys.backend(),
                sys.policy(),
                run + 1,
                ctx.runs
            ));
            b.system(f, sys, run)?;
        }
    }
    add_ratios(f);
    Ok(())
}

/// The EAL arguments of a `net_af_xdp` port on `iface`'s queue 0.
fn af_xdp_vdev(iface: &str) -> Vec<String> {
    vec![
        "--vdev".into(),
        format!("net_af_xdp0,iface={iface},start_queue=0,queue_count=1"),
    ]
}

impl Bench<'_> {
    /// Bring `sys` up on the wire, measure every cell, take it down.
    fn system(&mut self, f: &mut ResultFile, sys: System, run: u32) -> Result<(), BenchError> {
        let ctx = self.ctx;
        // A program a killed backend left on the veth end would refuse the next one.
        let _ = std::process::Command::new("ip")
            .args(["link", "set", "dev", &self.wire.host, "xdp", "off"])
            .status();
        // `VmPort::new`'s socket for port `vm`: DPDK listens on the same path.
        let sock = ctx.work.join("vm.sock");
        let mut up = self.bring_up(f, sys, &sock, run)?;
        let echo = GuestOpts {
            mode: "echo",
            dst_mac: vadapt_wire::Mac(WIRE_MAC).to_string(),
            ..GuestOpts::stream(FRAME, Duration::from_secs(3600), 0)
        };
        let mac = ["--mac".to_string(), vadapt_wire::Mac(GUEST_MAC).to_string()];
        let guest = GuestProc::spawn_with(ctx, "b10-echo", &sock, &echo, &mac)?;
        if run == 0 && sys == System::Dpdk {
            f.commands.push(ctx.show(&echo.argv(
                &ctx.exe.display().to_string(),
                &sock,
                ctx.frontend_cpu,
            )));
        }
        ctx.sleep(ctx.secs(1.0, 0.5))?;
        if matches!(sys, System::Vadapt(PolicyKind::Netap)) {
            // NetAP's search (11 rounds of its default 1 s) before measuring.
            ctx.sleep(ctx.secs(13.0, 0.0))?;
        }
        self.idle(f, &mut up, sys, run)?;
        for rate in RR_RATES {
            self.rr(f, &mut up, sys, run, rate)?;
        }
        self.saturation(f, &mut up, sys, run)?;
        for load in LOADS {
            self.partial(f, &mut up, sys, run, load)?;
        }
        guest.interrupt()?;
        self.vm_to_nic(f, &mut up, sys, run, &sock)?;
        up.quit();
        Ok(())
    }

    fn bring_up(
        &mut self,
        f: &mut ResultFile,
        sys: System,
        sock: &std::path::Path,
        run: u32,
    ) -> Result<Up, BenchError> {
        let ctx = self.ctx;
        let vm = [VmPort::new(&ctx.work, "vm", 1, PolicyKind::Interrupt)];
        let first = run == 0;
        Ok(match sys {
            System::Dpdk => {
                let mut eal = af_xdp_vdev(&self.wire.host);
                eal.extend(testpmd::vhost_vdev(sock));
                let t = Testpmd::spawn(
                    ctx,
                    "b10-dpdk",
                    &format!("0@{},1@{}", ctx.frontend_cpu, ctx.backend_cpu),
                    &eal,
                    &[
                        "--forward-mode=io".into(),
                        "--record-core-cycles".into(),
                        "--total-num-mbufs=65536".into(),
                    ],
                    Some(sock),
                )?;
                if first {
                    f.commands.push(ctx.show(&t.child.argv));
                }
                Up::Dpdk(t)
            }
            System::Vadapt(p) => {
                let ports = [
                    "--uplink".to_string(),
                    format!("name=up0,iface={},policy={}", self.wire.host, p.as_str()),
                    "--policy".into(),
                    "interrupt".into(),
                ];
                let d = Daemon::spawn_ports(ctx, "b10-vadapt", &vm, Workers::PerPort, &ports)?;
                if first && p == PolicyKind::BusyPoll {
                    f.commands.push(ctx.show(&d.command));
                }
                Up::Vadapt {
                    daemon: d,
                    _bridge: None,
                }
            }
            System::Kernel => {
                let bridge = Bridge::new(self.wire)?;
                let tap = self.wire.host.replacen("vbh", "vbt", 1);
                let ports = [
                    "--tap".to_string(),
                    tap.clone(),
                    "--policy".into(),
                    "interrupt".into(),
                ];
                let d = Daemon::spawn_ports(ctx, "b10-kernel", &vm, Workers::PerPort, &ports)?;
                bridge.add(&tap)?;
                if first {
                    f.commands.push(format!(
                        "ip link add BR type bridge; ip link set {} master BR; {}; ip link set {tap} master BR",
                        self.wire.host,
                        ctx.show(&d.command)
                    ));
                }
                Up::Vadapt {
                    daemon: d,
                    _bridge: Some(bridge),
                }
            }
        })
    }

    /// CPU with the guest connected and nothing sent.
    fn idle(
        &mut self,
        f: &mut ResultFile,
        up: &mut Up,
        sys: System,
        run: u32,
    ) -> Result<(), BenchError> {
        up.start()?;
        let a = up.sample()?;
        self.ctx.sleep(self.window)?;
        let b = up.sample()?;
        up.stop()?;
        let (_, dt, cpu, _) = diff(&a, &b, self.tsc_per_ns);
        let mut r = sys.row("idle", "", run);
        r.set("cpu_pct", cpu / dt * 100.0);
        f.rows.push(r);
        Ok(())
    }

    /// Request/response from the wire to the echo guest at `rate`.
    fn rr(
        &mut self,
        f: &mut ResultFile,
        up: &mut Up,
        sys: System,
        run: u32,
        rate: f64,
    ) -> Result<(), BenchError> {
        up.start()?;
        let a = up.sample()?;
        let rt = veth_wire::request_response(
            self.sock,
            GUEST_MAC,
            FRAME as usize,
            rate,
            self.window,
            self.ctx.frontend_cpu,
        );
        let b = up.sample()?;
        up.stop()?;
        let (_, dt, cpu, _) = diff(&a, &b, self.tsc_per_ns);
        let mut r = sys.row("rr", &format!("{rate:.0}/s"), run);
        r.set_some("p50_us", rt.quantile(0.5).map(|v| v / 1e3))
            .set_some("p99_us", rt.quantile(0.99).map(|v| v / 1e3))
            .set("answered", rt.rtt_ns.len() as f64)
            .set("lost", rt.lost as f64)
            .set("cpu_pct", cpu / dt * 100.0);
        f.rows.push(r);
        Ok(())
    }

    /// The saturating sender: testpmd `txonly` on `net_af_xdp` on the far
    /// end, in the namespace.
    fn spawn_sender(&self) -> Result<Testpmd, BenchError> {
        let ctx = self.ctx;
        Testpmd::spawn_in(
            ctx,
            "b10-sender",
            Some(&self.wire.ns),
            &format!("0@{},1@{}", ctx.backend_cpu, ctx.frontend_cpu),
            &af_xdp_vdev(&self.wire.peer),
            &[
                "--forward-mode=txonly".into(),
                format!("--txpkts={FRAME}"),
                format!("--eth-peer=0,{}", vadapt_wire::Mac(GUEST_MAC)),
                // The PMD's UMEM comes from this pool: 8192 stalls its TX.
                "--total-num-mbufs=65536".into(),
            ],
            None,
        )
    }

    /// testpmd txonly from the wire as fast as it goes.
    fn saturation(
        &mut self,
        f: &mut ResultFile,
        up: &mut Up,
        sys: System,
        run: u32,
    ) -> Result<(), BenchError> {
        if !self.has_sender {
            return Ok(());
        }
        let mut sender = self.spawn_sender()?;
        if run == 0 && sys == System::Dpdk {
            f.commands.push(self.ctx.show(&sender.child.argv));
        }
        up.start()?;
        sender.start()?;
        self.ctx.sleep(SETTLE)?;
        let a = up.sample()?;
        self.ctx.sleep(self.window)?;
        let b = up.sample()?;
        let sent = sender.stop()?;
        sender.quit();
        let dpdk_cycles = up.stop()?;
        let (pk, dt, cpu, busy) = diff(&a, &b, self.tsc_per_ns);
        let pps = pk as f64 / dt;
        if sys == System::Dpdk && self.ref_pps.is_none() {
            self.ref_pps = Some(pps);
        }
        let mut r = sys.row("saturation", "nic-to-vm", run);
        r.set("mpps", pps / 1e6)
            .set(
                "cycles_per_pkt",
                dpdk_cycles.unwrap_or(if pk > 0 { busy / pk as f64 } else { f64::NAN }),
            )
            .set(
                "cpu_ns_per_pkt",
                if pk > 0 {
                    cpu * 1e9 / pk as f64
                } else {
                    f64::NAN
                },
            )
            .set("cpu_pct", cpu / dt * 100.0)
            .set(
                "sender_mpps",
                sent.tx as f64 / (dt + SETTLE.as_secs_f64()) / 1e6,
            );
        f.rows.push(r);
        Ok(())
    }

    /// The paced sender at `load` × DPDK's saturation rate.
    fn partial(
        &mut self,
        f: &mut ResultFile,
        up: &mut Up,
        sys: System,
        run: u32,
        load: f64,
    ) -> Result<(), BenchError> {
        // Without DPDK, the first system's own saturation rate; without any, 1 Mpps.
        let reference = match self.ref_pps {
            Some(p) => p,
            None => {
                let p = f
                    .table("saturation")
                    .filter_map(|r| r.m.get("mpps"))
                    .next()
                    .map_or(1e6, |m| m * 1e6);
                self.ref_pps = Some(p);
                p
            }
        };
        up.start()?;
        let a = up.sample()?;
        let sent = veth_wire::send_paced(
            self.sock,
            GUEST_MAC,
            FRAME as usize,
            reference * load,
            self.window,
            self.ctx.frontend_cpu,
        );
        // Frames in flight reach the VM.
        self.ctx.sleep(Duration::from_millis(50))?;
        let b = up.sample()?;
        up.stop()?;
        let (pk, dt, cpu, _) = diff(&a, &b, self.tsc_per_ns);
        let mut r = sys.row("load", &format!("{:.0} %", load * 100.0), run);
        r.set("offered_kpps", reference * load / 1e3)
            .set("sent_kpps", sent.sent as f64 / sent.elapsed.max(1e-9) / 1e3)
            .set("delivered_kpps", pk as f64 / dt / 1e3)
            .set(
                "cpu_ns_per_pkt",
                if pk > 0 {
                    cpu * 1e9 / pk as f64
                } else {
                    f64::NAN
                },
            )
            .set("cpu_pct", cpu / dt * 100.0);
        f.rows.push(r);
        Ok(())
    }

    /// The guest's closed-loop stream to the wire, counted where it lands.
    fn vm_to_nic(
        &mut self,
        f: &mut ResultFile,
        up: &mut Up,
        sys: System,
        run: u32,
        sock: &std::path::Path,
    ) -> Result<(), BenchError> {
        let mut opts = GuestOpts::stream(FRAME, self.window, 0);
        opts.dst_mac = vadapt_wire::Mac(WIRE_MAC).to_string();
        up.start()?;
        let a = up.sample()?;
        let w0 = self.wire.peer_rx_packets()?;
        let g = GuestProc::spawn(self.ctx, "b10-stream", sock, &opts)?;
        let res = g.finish()?;
        let w1 = self.wire.peer_rx_packets()?;
        let b = up.sample()?;
        up.stop()?;
        let (_, dt, cpu, _) = diff(&a, &b, self.tsc_per_ns);
        let pk = w1.saturating_sub(w0);
        let mut r = sys.row("saturation", "vm-to-nic", run);
        r.set("mpps", pk as f64 / res.elapsed.max(1e-9) / 1e6)
            .set(
                "cpu_ns_per_pkt",
                if pk > 0 {
                    cpu * 1e9 / pk as f64
                } else {
                    f64::NAN
                },
            )
            .set("cpu_pct", cpu / dt * 100.0)
            .set(
                "guest_sent_mpps",
                res.sent_packets as f64 / res.elapsed.max(1e-9) / 1e6,
            );
        f.rows.push(r);
        Ok(())
    }
}

/// Per-round ratios to DPDK (same table, variant, round) on each row.
fn add_ratios(f: &mut ResultFile) {
    let base: Vec<Row> = f
        .rows
        .iter()
        .filter(|r| r.backend == "dpdk-af-xdp")
        .cloned()
        .collect();
    for r in f.rows.iter_mut().filter(|r| r.backend != "dpdk-af-xdp") {
        let Some(b) = base
            .iter()
            .find(|b| b.table == r.table && b.variant == r.variant && b.run == r.run)
        else {
            continue;
        };
        for (k, out) in [("mpps", "ratio_mpps"), ("cycles_per_pkt", "ratio_cycles")] {
            if let (Some(x), Some(y)) = (r.m.get(k).copied(), b.m.get(k).copied()) {
                if y != 0.0 {
                    r.set(out, x / y);
                }
            }
        }
    }
}

/// The B10 tables.
pub fn render(f: &ResultFile) -> String {
    let mut s = String::new();
    let sys: &[LabelCol<'_>] = &[("system", system_label)];
    let with_variant: &[LabelCol<'_>] = &[("", |r| r.variant.clone()), ("system", system_label)];
    let dpdk = |b: &Row, r: &Row| {
        b.backend == "dpdk-af-xdp" && b.variant == r.variant && b.table == r.table
    };
    for (v, what) in [
        (
            "nic-to-vm",
            "NIC → VM, testpmd txonly on net_af_xdp in the namespace",
        ),
        (
            "vm-to-nic",
            "VM → NIC, the synthetic guest's closed-loop stream",
        ),
    ] {
        let rows: Vec<&Row> = f.table("saturation").filter(|r| r.variant == v).collect();
        if rows.is_empty() {
            continue;
        }
        s.push_str(&format!("\n**Saturation, {what}** ({FRAME} B frames).\n\n"));
        s.push_str(&metric_table(
            &rows,
            sys,
            &[
                ("mpps", "Mpps", 3),
                ("cycles_per_pkt", "busy cycles/pkt", 0),
                ("cpu_ns_per_pkt", "backend CPU ns/pkt", 0),
                ("cpu_pct", "backend CPU %", 0),
            ],
            &[("mpps", "rate × DPDK"), ("cycles_per_pkt", "cycles × DPDK")],
            dpdk,
        ));
    }
    let rows: Vec<&Row> = f.table("load").collect();
    if !rows.is_empty() {
        s.push_str("\n**Partial load, NIC → VM** (paced AF_PACKET sender in the namespace; load = share of DPDK's saturation rate).\n\n");
        s.push_str(&metric_table(
            &rows,
            with_variant,
            &[
                ("offered_kpps", "offered kpps", 0),
                ("delivered_kpps", "delivered kpps", 0),
                ("cpu_ns_per_pkt", "backend CPU ns/pkt", 0),
                ("cpu_pct", "backend CPU %", 1),
            ],
            &[],
            dpdk,
        ));
    }
    let rows: Vec<&Row> = f.table("rr").collect();
    if !rows.is_empty() {
        s.push_str("\n**Request/response NIC → VM → NIC** (one request outstanding, from an AF_PACKET client in the namespace to the guest's echo).\n\n");
        s.push_str(&metric_table(
            &rows,
            with_variant,
            &[
                ("p50_us", "p50 µs", 1),
                ("p99_us", "p99 µs", 1),
                ("lost", "lost", 0),
                ("cpu_pct", "backend CPU %", 1),
            ],
            &[],
            dpdk,
        ));
    }
    let rows: Vec<&Row> = f.table("idle").collect();
    if !rows.is_empty() {
        s.push_str("\n**Idle** (guest connected, nothing sent).\n\n");
        s.push_str(&metric_table(
            &rows,
            sys,
            &[("cpu_pct", "backend CPU % of a core", 2)],
            &[],
            dpdk,
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_cycles_add_the_other_threads_cpu() {
        let t = Instant::now();
        let a = Sample {
            at: Some(t),
            to_vm: 100,
            cpu_s: 1.0,
            vm_busy_cycles: 1_000,
            vm_cpu_s: 0.5,
        };
        let b = Sample {
            at: Some(t + Duration::from_secs(1)),
            to_vm: 1_100,
            cpu_s: 1.5,
            vm_busy_cycles: 3_000,
            vm_cpu_s: 0.7,
        };
        let (pk, dt, cpu, busy) = diff(&a, &b, 2.0);
        assert_eq!(pk, 1_000);
        assert!((dt - 1.0).abs() < 1e-9 && (cpu - 0.5).abs() < 1e-9);
        // 2000 VM busy cycles + 0.3 s of other threads at 2 cycles/ns.
        assert!((busy - (2_000.0 + 0.3e9 * 2.0)).abs() < 1.0, "{busy}");
    }

    #[test]
    fn ratios_pair_dpdk_of_the_same_round_and_tables_name_systems() {
        let mut f = ResultFile::default();
        for run in 0..2 {
            let mut d = System::Dpdk.row("saturation", "nic-to-vm", run);
            d.set("mpps", 1.0).set("cycles_per_pkt", 100.0);
            let mut v = System::Vadapt(PolicyKind::BusyPoll).row("saturation", "nic-to-vm", run);
            v.set("mpps", 0.5).set("cycles_per_pkt", 200.0);
            let mut k = System::Kernel.row("idle", "", run);
            k.set("cpu_pct", 0.1);
            f.rows.extend([d, v, k]);
        }
        add_ratios(&mut f);
        let v = f
            .rows
            .iter()
            .find(|r| r.backend == "vadapt-uplink")
            .unwrap();
        assert_eq!((v.m["ratio_mpps"], v.m["ratio_cycles"]), (0.5, 2.0));
        let t = render(&f);
        assert!(
            t.contains("| vadapt uplink busy-poll | 0.500 | 200 |"),
            "{t}"
        );
        assert!(t.contains("kernel bridge→TAP"), "{t}");
    }
}
