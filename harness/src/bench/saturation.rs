//! B1 — saturation: how many packets a backend takes when the sender never
//! waits, and how many busy cycles each one costs it.
//!
//! Two senders: DPDK virtio-user `txonly` (the guest driver's ring logic in
//! a DPDK loop, issue 2's comparison) and the synthetic guest (closed loop,
//! exit cost 0, issue 3's "is the guest or the backend the bottleneck").
//! Receivers: DPDK vhost PMD (testpmd `rxonly`, `--record-core-cycles`) and
//! vadapt's sink under each policy. All backends stay up for the whole
//! benchmark and are measured in turn within each round; between its turns a
//! vadapt port is parked on `interrupt` and testpmd is `stop`ped, so no idle
//! busy-poller shares CPU 1 with the backend being measured.
//!
//! Every sender addresses its frames to vadapt's sink (`SINK_MAC`;
//! testpmd `--eth-peer`), so that vadapt's switch delivers each frame once,
//! as DPDK's `rxonly` consumes it once. Until issue 28 (2026-11-27) the
//! DPDK sender used testpmd's default peer 02:00:00:00:00:00: the switch
//! flooded the first frames, the echo port answered one with that address as
//! its source, the switch learnt it on the echo port, and from then on every
//! frame went fe → echo → back to fe's receive ring (full: testpmd `txonly`
//! never takes it), a second copy and a counted drop for each packet that
//! DPDK's leg did not pay. B1's DPDK-sender figures for vadapt recorded
//! before that are low by that much (1518 B most: 0.64× DPDK's rate then).
//! A round in which vadapt counts drops now says so in the file's notes.
//!
//! The synthetic guest also sends through a third port configured as a
//! tenant's ([`tenant_keys`]: port security, a VLAN, a policer it never
//! exceeds), to a sink of its own in that VLAN,
//! under busy-poll right after the plain port's busy-poll turn in each
//! round: issue 37's overhead, judged in the report ([`tenant_ratio`]).
//!
//! Busy cycles per packet: DPDK's `CPU cycles/packet` counts TSC cycles of
//! non-empty bursts; vadapt's `busy_cycles / busy_packets` counts TSC cycles
//! of non-empty service passes — the same definition on both sides.

use super::ctx::Ctx;
use super::error::BenchError;
use super::shared::{pct, per_mpkt, tenant_keys, GOAL_TENANT_OVERHEAD, TENANT_VLAN};
use super::table::{label, metric_table, LabelCol};
use super::testpmd::{self, Testpmd, UserRing};
use super::vadapt_proc::{
    delta, Daemon, GuestOpts, GuestProc, VmPort, Workers, ECHO_MAC, SINK_MAC,
};
use std::time::{Duration, Instant};
use vadapt_policy::PolicyKind;
use vadapt_results::{ratio, ResultFile, Row, Spread};

/// Title.
pub const TITLE: &str =
    "saturation: DPDK vhost PMD vs vadapt, DPDK virtio-user and synthetic-guest senders";

/// vadapt policies measured, in round order.
const POLICIES: [PolicyKind; 6] = [
    PolicyKind::BusyPoll,
    PolicyKind::Netap,
    PolicyKind::NetapMl,
    PolicyKind::Growshrink,
    PolicyKind::Eekbp,
    PolicyKind::Interrupt,
];

/// The policy column's mark of a turn on the tenant's port.
pub const TENANT: &str = "tenant";

/// The MAC of the tenant's port (`mac=`): the synthetic guest sends from
/// the MAC its device offers, so port security passes every frame.
const TENANT_MAC: &str = "02:00:00:00:7e:01";

/// The MAC of the sink in the tenant's VLAN, to which its guest sends.
const TENANT_SINK_MAC: &str = "02:00:00:00:7e:5e";

/// Frame sizes, bytes.
const FRAMES: [u32; 2] = [64, 1518];

/// Time after `start` before the window opens (rings fill, NetAP's safety net engages).
const SETTLE: Duration = Duration::from_millis(300);

/// Run B1.
pub fn run(ctx: &Ctx, f: &mut ResultFile) -> Result<(), BenchError> {
    let window = ctx.secs(3.0, 0.8);
    f.run_seconds = window.as_secs_f64();
    let dpdk = testpmd::available();
    if let Err(msg) = &dpdk {
        ctx.say(msg);
        f.notes.push(msg.clone());
    }
    let vms = [
        VmPort::new(&ctx.work, "fe", 1, PolicyKind::Interrupt),
        VmPort::new(&ctx.work, "g", 1, PolicyKind::Interrupt),
        VmPort::new(&ctx.work, "gt", 1, PolicyKind::Interrupt).with_keys(tenant_keys(TENANT_MAC)),
    ];
    // The tenant's port is in its VLAN: a sink of its own there.
    let ports = [
        "--sink".into(),
        format!("sink0,mac={SINK_MAC}"),
        "--echo".into(),
        format!("echo0,mac={ECHO_MAC}"),
        "--sink".into(),
        format!("sinkt,mac={TENANT_SINK_MAC},vlan={TENANT_VLAN}"),
    ];
    let mut d = Daemon::spawn_ports(ctx, "b1-vadapt", &vms, Workers::PerPort, &ports)?;
    f.commands.push(ctx.show(&d.command));
    let be_sock = ctx.work.join("b1-dpdk.sock");
    let mut be = match dpdk {
        Ok(()) => {
            let b = Testpmd::spawn(
                ctx,
                "b1-dpdk-be",
                &format!("0@{},1@{}", ctx.frontend_cpu, ctx.backend_cpu),
                &testpmd::vhost_vdev(&be_sock),
                &[
                    "--forward-mode=rxonly".into(),
                    "--record-core-cycles".into(),
                ],
                Some(&be_sock),
            )?;
            f.commands.push(ctx.show(&b.child.argv));
            Some(b)
        }
        Err(_) => None,
    };
    // DPDK virtio-user sender: both IN_ORDER settings on a split ring (it was
    // worth a few Mpps to DPDK and changed vadapt's rate in one run; see
    // docs/architecture.md, "Facts the code relies on"), and the packed ring,
    // which both DPDK's vhost library and vadapt offer. Only the default in
    // the quick run.
    if be.is_some() {
        let rings: &[UserRing] = if ctx.quick {
            &[UserRing::split(true)]
        } else {
            &[
                UserRing::split(true),
                UserRing::split(false),
                UserRing::packed(true),
            ]
        };
        for &ring in rings {
            dpdk_sender(ctx, f, &mut d, be.as_mut(), &be_sock, &vms[0], ring, window)?;
        }
    }
    guest_sender(
        ctx,
        f,
        &mut d,
        be.as_mut(),
        &be_sock,
        (&vms[1], &vms[2]),
        window,
    )?;
    if let Some(b) = be.take() {
        b.quit();
    }
    add_ratios(f);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn dpdk_sender(
    ctx: &Ctx,
    f: &mut ResultFile,
    d: &mut Daemon,
    mut be: Option<&mut Testpmd>,
    be_sock: &std::path::Path,
    vm: &VmPort,
    ring: UserRing,
    window: Duration,
) -> Result<(), BenchError> {
    let lcores = format!("0@{},1@{}", ctx.backend_cpu, ctx.frontend_cpu);
    let app = |frame: u32| {
        vec![
            "--forward-mode=txonly".to_string(),
            format!("--txpkts={frame}"),
            format!("--eth-peer=0,{SINK_MAC}"),
        ]
    };
    let variant = ring.label();
    let mut fe_d = match be {
        Some(_) => Some(Testpmd::spawn(
            ctx,
            &format!("b1-fe-dpdk-{}", ring.tag()),
            &lcores,
            &testpmd::virtio_user_vdev(be_sock, ring),
            &app(64),
            None,
        )?),
        None => None,
    };
    let mut fe_v = Testpmd::spawn(
        ctx,
        &format!("b1-fe-vadapt-{}", ring.tag()),
        &lcores,
        &testpmd::virtio_user_vdev(&vm.socket, ring),
        &app(64),
        None,
    )?;
    if f.commands.len() < 5 {
        if let Some(fe) = &fe_d {
            f.commands.push(ctx.show(&fe.child.argv));
        }
        f.commands.push(ctx.show(&fe_v.child.argv));
    }
    for frame in FRAMES {
        for fe in fe_d.iter_mut().chain(std::iter::once(&mut fe_v)) {
            fe.command(&format!("set txpkts {frame}"))?;
        }
        for run in 0..ctx.runs {
            ctx.say(&format!(
                "dpdk sender {variant} {frame} B round {}/{}",
                run + 1,
                ctx.runs
            ));
            if let (Some(be), Some(fe)) = (be.as_deref_mut(), fe_d.as_mut()) {
                be.start()?;
                fe.start()?;
                ctx.sleep(SETTLE)?;
                let c0 = be.port_stats()?;
                let t0 = Instant::now();
                ctx.sleep(window)?;
                let c1 = be.port_stats()?;
                let dt = t0.elapsed().as_secs_f64();
                let sent = fe.stop()?;
                let st = be.stop()?;
                let mut r = Row::new("dpdk-fe", "dpdk-virtio-user", "dpdk-vhost", "pmd", &variant)
                    .at(frame, run);
                let pk = c1.rx_packets.saturating_sub(c0.rx_packets) as f64;
                r.set("mpps", pk / dt / 1e6)
                    .set(
                        "gbps",
                        c1.rx_bytes.saturating_sub(c0.rx_bytes) as f64 * 8.0 / dt / 1e9,
                    )
                    .set("cycles_per_pkt", st.cycles_per_packet.unwrap_or(f64::NAN))
                    .set(
                        "sender_dropped_pct",
                        pct(sent.tx_dropped, sent.tx + sent.tx_dropped),
                    );
                f.rows.push(r);
            }
            for p in POLICIES {
                d.set_policy(&vm.name, p)?;
                fe_v.start()?;
                ctx.sleep(SETTLE)?;
                let s0 = d.stats()?;
                let t0 = Instant::now();
                ctx.sleep(window)?;
                let s1 = d.stats()?;
                let dt = t0.elapsed().as_secs_f64();
                let sent = fe_v.stop()?;
                d.set_policy(&vm.name, PolicyKind::Interrupt)?;
                let x = delta(&s0, &s1, &vm.name);
                let mut r = Row::new(
                    "dpdk-fe",
                    "dpdk-virtio-user",
                    "vadapt",
                    p.as_str(),
                    &variant,
                )
                .at(frame, run);
                r.set("mpps", x.tx_packets as f64 / dt / 1e6)
                    .set("gbps", x.tx_bytes as f64 * 8.0 / dt / 1e9)
                    .set("cycles_per_pkt", x.cycles_per_packet().unwrap_or(f64::NAN))
                    .set("worker_cpu_pct", x.cpu_seconds / dt * 100.0)
                    .set("kicks_per_mpkt", per_mpkt(x.kicks, x.tx_packets))
                    .set("dropped", x.dropped as f64)
                    .set(
                        "sender_dropped_pct",
                        pct(sent.tx_dropped, sent.tx + sent.tx_dropped),
                    );
                if x.dropped > 0 {
                    let msg = format!(
                        "vadapt {} dropped {} of {} frames ({variant}, {frame} B, round {}): \
                         its figures there include work no frame reached the sink by",
                        p.as_str(),
                        x.dropped,
                        x.tx_packets,
                        run + 1
                    );
                    ctx.say(&msg);
                    f.notes.push(msg);
                }
                f.rows.push(r);
            }
        }
    }
    if let Some(fe) = fe_d {
        fe.quit();
    }
    fe_v.quit();
    Ok(())
}

/// The synthetic guest as sender: DPDK's vhost PMD, then vadapt's port
/// `vm` under each policy and, after busy-poll, `tenant` (the port again
/// configured as a tenant's, [`tenant_keys`]) under busy-poll.
#[allow(clippy::too_many_arguments)]
fn guest_sender(
    ctx: &Ctx,
    f: &mut ResultFile,
    d: &mut Daemon,
    mut be: Option<&mut Testpmd>,
    be_sock: &std::path::Path,
    (vm, tenant): (&VmPort, &VmPort),
    window: Duration,
) -> Result<(), BenchError> {
    for frame in FRAMES {
        // Exit cost 0: the lightest sender, to show the backend's capacity.
        let opts = GuestOpts::stream(frame, window, 0);
        for run in 0..ctx.runs {
            ctx.say(&format!(
                "guest sender {frame} B round {}/{}",
                run + 1,
                ctx.runs
            ));
            if let Some(be) = be.as_deref_mut() {
                be.start()?;
                let g = GuestProc::spawn(ctx, "b1-guest-dpdk", be_sock, &opts)?;
                let res = g.finish()?;
                let st = be.stop()?;
                let mut r = Row::new("guest", "guest", "dpdk-vhost", "pmd", "").at(frame, run);
                r.set("mpps", st.rx as f64 / res.elapsed / 1e6)
                    .set(
                        "gbps",
                        st.rx as f64 * f64::from(frame) * 8.0 / res.elapsed / 1e9,
                    )
                    .set("cycles_per_pkt", st.cycles_per_packet.unwrap_or(f64::NAN))
                    .set(
                        "guest_ns_per_pkt",
                        res.cpu_seconds * 1e9 / res.sent_packets.max(1) as f64,
                    )
                    .set("guest_cpu_pct", res.cpu_seconds / res.elapsed * 100.0);
                f.rows.push(r);
            }
            for p in POLICIES {
                f.rows.push(guest_turn(ctx, d, vm, p, &opts, run)?);
                if p == PolicyKind::BusyPoll {
                    // The tenant's port right after the plain one, the
                    // same guest and policy, to the sink in its VLAN.
                    let opts = GuestOpts {
                        dst_mac: TENANT_SINK_MAC.into(),
                        ..opts.clone()
                    };
                    f.rows.push(guest_turn(ctx, d, tenant, p, &opts, run)?);
                }
            }
        }
    }
    Ok(())
}

/// The synthetic guest's turn on vadapt's port `vm` under `policy`: one
/// row, whose policy column says `tenant` for the tenant's port (the
/// variant column stays the frame's cell).
fn guest_turn(
    ctx: &Ctx,
    d: &mut Daemon,
    vm: &VmPort,
    p: PolicyKind,
    opts: &GuestOpts,
    run: u32,
) -> Result<Row, BenchError> {
    let frame = opts.frame;
    let policy = match vm.keys.is_empty() {
        true => p.as_str().to_string(),
        false => format!("{}, {TENANT}", p.as_str()),
    };
    d.set_policy(&vm.name, p)?;
    let s0 = d.stats()?;
    let g = GuestProc::spawn(ctx, &format!("b1-guest-{}", p.as_str()), &vm.socket, opts)?;
    let res = g.finish()?;
    let s1 = d.stats()?;
    d.set_policy(&vm.name, PolicyKind::Interrupt)?;
    let x = delta(&s0, &s1, &vm.name);
    let mut r = Row::new("guest", "guest", "vadapt", &policy, "").at(frame, run);
    r.set("mpps", x.tx_packets as f64 / res.elapsed / 1e6)
        .set("gbps", x.tx_bytes as f64 * 8.0 / res.elapsed / 1e9)
        .set("cycles_per_pkt", x.cycles_per_packet().unwrap_or(f64::NAN))
        .set("worker_cpu_pct", x.cpu_seconds / res.elapsed * 100.0)
        .set("kicks_per_mpkt", per_mpkt(res.kicks, res.sent_packets))
        .set(
            "guest_ns_per_pkt",
            res.cpu_seconds * 1e9 / res.sent_packets.max(1) as f64,
        )
        .set("guest_cpu_pct", res.cpu_seconds / res.elapsed * 100.0)
        .set("dropped", x.dropped as f64);
    Ok(r)
}

/// The synthetic-guest sender's busy cycles per packet on the tenant's
/// port over the plain port's, busy-poll, per round, at `frame` bytes
/// (issue 37's overhead of port security and a policer not exceeded).
pub fn tenant_ratio(f: &ResultFile, frame: u32) -> Option<Spread> {
    let rows = |policy: &str| -> Vec<&Row> {
        f.table("guest")
            .filter(|r| r.backend == "vadapt" && r.policy == policy && r.frame == frame)
            .collect()
    };
    let tenant = format!("{}, {TENANT}", PolicyKind::BusyPoll.as_str());
    ratio(
        &rows(&tenant),
        &rows(PolicyKind::BusyPoll.as_str()),
        "cycles_per_pkt",
    )
}

/// Per-round ratios to DPDK (same table, variant, frame, round) on each row,
/// for the plots; the report recomputes them from the raw values.
fn add_ratios(f: &mut ResultFile) {
    let base: Vec<Row> = f
        .rows
        .iter()
        .filter(|r| r.backend == "dpdk-vhost")
        .cloned()
        .collect();
    for r in f.rows.iter_mut().filter(|r| r.backend != "dpdk-vhost") {
        let Some(b) = base.iter().find(|b| {
            b.table == r.table && b.variant == r.variant && b.frame == r.frame && b.run == r.run
        }) else {
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

/// The B1 tables.
pub fn render(f: &ResultFile) -> String {
    let mut s = String::new();
    let first: &[LabelCol<'_>] = &[("frame", |r| format!("{} B", r.frame)), ("backend", label)];
    let same = |b: &Row, r: &Row| {
        b.backend == "dpdk-vhost"
            && b.variant == r.variant
            && b.frame == r.frame
            && b.table == r.table
    };
    let mut variants: Vec<String> = f.table("dpdk-fe").map(|r| r.variant.clone()).collect();
    variants.dedup();
    variants.sort();
    variants.dedup();
    for v in variants.iter().rev() {
        let rows: Vec<&Row> = f.table("dpdk-fe").filter(|r| &r.variant == v).collect();
        s.push_str(&format!(
            "\n**Sender: DPDK virtio-user txonly ({v})** — backend worker on CPU 1, sender lcore on CPU 0.\n\n"
        ));
        s.push_str(&metric_table(
            &rows,
            first,
            &[
                ("mpps", "Mpps", 2),
                ("gbps", "Gbit/s", 2),
                ("cycles_per_pkt", "busy cycles/pkt", 0),
                ("worker_cpu_pct", "worker CPU %", 0),
            ],
            &[("mpps", "rate × DPDK"), ("cycles_per_pkt", "cycles × DPDK")],
            same,
        ));
    }
    let rows: Vec<&Row> = f.table("guest").collect();
    if !rows.is_empty() {
        s.push_str("\n**Sender: synthetic guest** (1 thread, closed loop, exit cost 0, pinned to CPU 0).\n\n");
        s.push_str(&metric_table(
            &rows,
            first,
            &[
                ("mpps", "Mpps", 2),
                ("gbps", "Gbit/s", 2),
                ("cycles_per_pkt", "busy cycles/pkt", 0),
                ("guest_ns_per_pkt", "guest ns/pkt", 0),
                ("guest_cpu_pct", "guest CPU %", 0),
            ],
            &[("mpps", "rate × DPDK"), ("cycles_per_pkt", "cycles × DPDK")],
            same,
        ));
        s.push_str(
            "\nGuest CPU near 100 % with a backend that still has idle cycles means the guest is the \
             bottleneck; a guest waiting (CPU well under 100 %) means the backend is.\n",
        );
        let show = |frame| tenant_ratio(f, frame).map_or("– (no rows)".into(), |r| r.show(2));
        s.push_str(&format!(
            "\n`vadapt busy-poll, {TENANT}`: the same guest on a port configured as a tenant's \
             ({}); its busy cycles per packet are {}× the plain port's at 64 B and {}× at 1518 B \
             (issue 37 asks ≤ {GOAL_TENANT_OVERHEAD}×).\n",
            tenant_keys(TENANT_MAC).join(","),
            show(64),
            show(1518),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_the_same_round_and_condition() {
        let mut f = ResultFile::default();
        for run in 0..2 {
            let mut d = Row::new("dpdk-fe", "s", "dpdk-vhost", "pmd", "in_order=1").at(64, run);
            d.set("mpps", 10.0 * f64::from(run + 1))
                .set("cycles_per_pkt", 100.0);
            let mut v = Row::new("dpdk-fe", "s", "vadapt", "busy-poll", "in_order=1").at(64, run);
            v.set("mpps", 5.0 * f64::from(run + 1))
                .set("cycles_per_pkt", 50.0);
            let mut o = Row::new("dpdk-fe", "s", "vadapt", "busy-poll", "in_order=1").at(1518, run);
            o.set("mpps", 1.0);
            f.rows.extend([d, v, o]);
        }
        add_ratios(&mut f);
        let v: Vec<&Row> = f
            .rows
            .iter()
            .filter(|r| r.backend == "vadapt" && r.frame == 64)
            .collect();
        assert!(v
            .iter()
            .all(|r| r.m["ratio_mpps"] == 0.5 && r.m["ratio_cycles"] == 0.5));
        // No DPDK row at 1518 B: no ratio invented.
        assert!(f
            .rows
            .iter()
            .filter(|r| r.frame == 1518)
            .all(|r| !r.m.contains_key("ratio_mpps")));
        let t = render(&f);
        assert!(t.contains("in_order=1"), "{t}");
        assert!(
            t.contains("| 64 B | vadapt busy-poll | 7.50 (5.00–10.00)"),
            "{t}"
        );
    }
}
