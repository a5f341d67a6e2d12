//! Dirty-page logging against the running daemon (issue 26, item 2): the
//! synthetic guest is the frontend and logs as QEMU does during a live
//! migration (`--dirty-log`: `VHOST_F_LOG_ALL`, a shared log, rings with
//! `VHOST_VRING_F_LOG`, its marks taken every 50 ms). Request/response
//! through the echo port moves frames both ways, so the daemon writes used
//! entries on both rings and receive buffers. At the end, after
//! `GET_VRING_BASE`, every page of the used rings and receive buffers whose
//! bytes changed must have been marked (the guest's own check, see
//! `vadapt_guest::frontend::FrontendLog`).
//!
//! Every policy, one of them (NetAP) asleep in its interval between
//! passes, and the per-NQ-core worker pool. The check fails when the
//! daemon does not mark a kind of write: with `ring.log_used()` removed
//! from the worker's flush, or `ring.log_written` from the receive path,
//! this test reports pages changed and never marked (run by hand, see the
//! issue's closing note).
//!
//! No timing assertions: counts only.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vadapt_dataplane::config::cores::{ApplyMethod, CoresConfig, QueueWorkers};
use vadapt_dataplane::config::{DaemonConfig, LocalPortConfig, VmPortConfig};
use vadapt_dataplane::Daemon;
use vadapt_guest::{Guest, GuestConfig, Load, Mode};
use vadapt_policy::{PolicyConfig, PolicyKind};
use vadapt_wire::Mac;

mod common;
use common::tmpdir;

const ECHO: Mac = Mac([0x02, 0, 0, 0, 0xec, 0x26]);

fn check(policy: PolicyKind, pool: bool) {
    let tmp = tmpdir("dirtylog");
    let dir = tmp.path();
    let mut cfg = DaemonConfig {
        vm: vec![VmPortConfig::new("vm1", dir.join("vm1.sock"))],
        echo: vec![LocalPortConfig::new("echo0", Some(ECHO))],
        policy: PolicyConfig::default_for(policy),
        control: dir.join("control.sock"),
        ..DaemonConfig::default()
    };
    if pool {
        cfg.cores = CoresConfig {
            cpus: vec![0],
            apply: ApplyMethod::Advise,
            queue_workers: QueueWorkers::PerNqCore,
            ..CoresConfig::default()
        };
    }
    let _d = Daemon::start(cfg).expect("daemon starts");
    let mut g = GuestConfig::new(dir.join("vm1.sock"));
    g.mode = Mode::RequestResponse;
    g.dst_mac = ECHO.0;
    g.load = Load::Rate { pps: 3000.0 };
    g.duration = Duration::from_millis(600);
    g.exit_cost_ns = 0;
    g.dirty_log = true;
    let r = Guest::connect(g)
        .expect("guest connects")
        .run(Arc::new(AtomicBool::new(false)))
        .expect("guest runs");
    assert!(r.error.is_none(), "{policy:?}: guest error {:?}", r.error);
    assert!(r.totals.recv_packets > 100, "{policy:?}: {:?}", r.totals);
    let log = r.dirty_log.expect("a dirty-log report");
    eprintln!(
        "{policy:?} pool={pool}: {log:?}, {} round trips",
        r.totals.recv_packets
    );
    assert!(log.syncs > 2 && log.marks_synced > 0, "{policy:?}: {log:?}");
    // Both used rings and the receive buffers changed.
    assert!(log.device_pages_changed >= 3, "{policy:?}: {log:?}");
    assert_eq!(
        log.device_pages_missed, 0,
        "{policy:?} pool={pool}: pages the daemon wrote and never marked: {log:?}"
    );
}

#[test]
fn every_page_the_daemon_writes_is_logged_under_every_policy() {
    for policy in [
        PolicyKind::Interrupt,
        PolicyKind::BusyPoll,
        PolicyKind::Netap,
        PolicyKind::Eekbp,
    ] {
        check(policy, false);
    }
}

#[test]
fn every_page_the_worker_pool_writes_is_logged() {
    check(PolicyKind::Interrupt, true);
}
