//! Dirty-page logging against what the ring service really writes: guest
//! memory is snapshotted, logging turned on, traffic moved both ways
//! (transmit: used entries only; receive: buffers and used entries), and
//! every page whose bytes changed must be marked in the log. The test fails
//! if either kind of write goes unlogged: drop `ring.log_written` from the
//! receive path, or `ring.log_used` after `flush_used`, and a changed page
//! is found unmarked.

use super::ring::test_utils::{frame, ring, Guest, UNLIMITED};
use super::ring::Ring;
use super::rx::{RxPending, RxService};
use super::tx::TxService;
use crate::frames::{Backlog, FrameBatch};
use crate::migration::{MappedLog, RingLog};
use crate::net::GuestOffloads;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::sync::Arc;
use vadapt_virtq::mock::{buf, readable, writable, MEM_SIZE};
use vadapt_virtq::{DirtyLog, RingFeatures, LOG_PAGE};
use vadapt_wire::vnet_hdr::HDR_LEN_MRG;

/// A memfd of `bytes`, unsealed: the frontend can shrink it.
fn log_file(bytes: u64) -> File {
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"vadapt-dirty-log".as_ptr(), 0) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(bytes).unwrap();
    f
}

/// A log covering the mock guest's memory, set on `r`.
fn log_on(r: &mut Ring, g: &Guest) -> Arc<MappedLog> {
    let bytes = MEM_SIZE / LOG_PAGE / 8;
    let f = log_file(bytes);
    let log = Arc::new(MappedLog::new(DirtyLog::map(&f, 0, bytes).unwrap(), None));
    set_log(r, g, &log);
    log
}

fn set_log(r: &mut Ring, g: &Guest, log: &Arc<MappedLog>) {
    r.log = Some(RingLog {
        log: Arc::clone(log),
        used_gpa: g.layout.used,
        used_len: 6 + 8 * u64::from(g.layout.size),
        device_event_gpa: None,
    });
}

fn snapshot(g: &Guest) -> Vec<u8> {
    let mut m = vec![0u8; MEM_SIZE as usize];
    g.mem.read(0, &mut m).unwrap();
    m
}

/// Pages whose bytes differ between `before` and now, and whether each is
/// marked in `log`.
fn changed_pages(g: &Guest, before: &[u8], log: &DirtyLog) -> Vec<(u64, bool)> {
    let now = snapshot(g);
    now.chunks(LOG_PAGE as usize)
        .zip(before.chunks(LOG_PAGE as usize))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(p, _)| {
            let gpa = p as u64 * LOG_PAGE;
            (gpa, log.is_marked(gpa))
        })
        .collect()
}

#[test]
fn every_page_the_transmit_service_writes_is_logged() {
    let (mut r, mut g) = ring(256, RingFeatures::default());
    // The guest's frames are in memory before logging starts, as in a
    // migration that starts under traffic.
    for slot in 0..64 {
        let f = frame(slot as u8, 1000);
        let at = buf(slot);
        g.mem.write(at, &[0; HDR_LEN_MRG]).unwrap();
        g.mem.write(at + HDR_LEN_MRG as u64, &f).unwrap();
        g.driver
            .add(&[
                readable(at, HDR_LEN_MRG as u32),
                readable(at + HDR_LEN_MRG as u64, f.len() as u32),
            ])
            .unwrap();
    }
    let before = snapshot(&g);
    let log = log_on(&mut r, &g);
    g.driver.publish();
    // The driver's own writes (avail ring) are not the device's: take the
    // snapshot after them.
    let before_device = snapshot(&g);
    assert_ne!(before, before_device, "the guest published");
    let mut tx = TxService::new(HDR_LEN_MRG, 32);
    let pass = tx.serve(&mut r, &g.mem, UNLIMITED, |_b: &FrameBatch| {});
    assert_eq!(pass.packets, 64);
    let changed = changed_pages(&g, &before_device, log.log());
    assert!(!changed.is_empty(), "the used ring was written");
    for (gpa, marked) in &changed {
        assert!(marked, "page at {gpa:#x} changed but is not in the log");
    }
}

#[test]
fn every_page_the_receive_service_writes_is_logged() {
    let (mut r, mut g) = ring(256, RingFeatures::default());
    // Buffers of 512 bytes: frames span several (MRG_RXBUF), and pages.
    for slot in 0..200 {
        g.driver.add(&[writable(buf(slot), 512)]).unwrap();
    }
    g.driver.publish();
    let before = snapshot(&g);
    let log = log_on(&mut r, &g);
    let b = Backlog::new(64);
    let mut batch = FrameBatch::new(64);
    for i in 0..40 {
        assert!(batch.push(&frame(i, 60 + 37 * usize::from(i))));
    }
    let all: Vec<u16> = (0..40).collect();
    b.push(&batch, &all);
    let mut pending = RxPending::for_backlog(&b);
    let mut rx = RxService::new(HDR_LEN_MRG, true);
    let none = GuestOffloads::default();
    let pass = rx.serve(Some(&mut r), &g.mem, &b, &mut pending, UNLIMITED, none);
    assert_eq!(pass.packets, 40);
    let changed = changed_pages(&g, &before, log.log());
    assert!(
        changed.len() > 2,
        "buffers and the used ring were written: {changed:?}"
    );
    for (gpa, marked) in &changed {
        assert!(marked, "page at {gpa:#x} changed but is not in the log");
    }
    assert_eq!(log.log().outside(), 0);
}

#[test]
fn without_a_log_nothing_is_marked_and_the_service_is_unchanged() {
    let (mut r, mut g) = ring(16, RingFeatures::default());
    g.driver.add(&[writable(buf(0), 2048)]).unwrap();
    g.driver.publish();
    let b = Backlog::new(4);
    let mut batch = FrameBatch::new(4);
    batch.push(&frame(1, 100));
    b.push(&batch, &[0]);
    let mut pending = RxPending::for_backlog(&b);
    let mut rx = RxService::new(HDR_LEN_MRG, true);
    let pass = rx.serve(
        Some(&mut r),
        &g.mem,
        &b,
        &mut pending,
        UNLIMITED,
        GuestOffloads::default(),
    );
    assert_eq!(pass.packets, 1);
    assert!(r.log.is_none());
}

/// Issue 36, finding 4: a frontend that shrinks its (unsealed) log under a
/// running ring. Before the fix the used-ring write killed the process
/// (SIGBUS); now the guard takes the fault, logging ends and the ring goes
/// on serving (the port saying so once and counting it is
/// `crate::port::vm_port`'s test).
#[test]
fn a_log_that_shrinks_under_the_ring_ends_logging_and_the_service_goes_on() {
    let (mut r, mut g) = ring(256, RingFeatures::default());
    let bytes = MEM_SIZE / LOG_PAGE / 8;
    let f = log_file(bytes);
    // As `crate::port::log_base` maps an unsealed log the port accepts:
    // under a SIGBUS guard.
    let mapped = DirtyLog::map(&f, 0, bytes).unwrap();
    let (start, len) = mapped.mapping();
    let guard = crate::sigbus_guard::guard(start, len, None).unwrap();
    let log = Arc::new(MappedLog::new(mapped, Some(guard)));
    set_log(&mut r, &g, &log);
    let mut tx = TxService::new(HDR_LEN_MRG, 32);
    let mut send = |g: &mut Guest, r: &mut Ring, slot: u64| {
        let fr = frame(slot as u8, 100);
        g.mem.write(buf(slot), &[0; HDR_LEN_MRG]).unwrap();
        g.mem.write(buf(slot) + HDR_LEN_MRG as u64, &fr).unwrap();
        g.driver
            .add(&[
                readable(buf(slot), HDR_LEN_MRG as u32),
                readable(buf(slot) + HDR_LEN_MRG as u64, fr.len() as u32),
            ])
            .unwrap();
        g.driver.publish();
        tx.serve(r, &g.mem, UNLIMITED, |_b: &FrameBatch| {}).packets
    };
    assert_eq!(send(&mut g, &mut r, 0), 1);
    assert!(log.log().is_marked(g.layout.used), "logging works");
    f.set_len(0).unwrap();
    assert_eq!(send(&mut g, &mut r, 1), 1, "the write after the shrink");
    assert!(!log.is_live(), "the fault ended logging");
    assert_eq!(send(&mut g, &mut r, 2), 1, "and the ring goes on");
    assert!(log.end(), "ended, and nobody said so yet");
}
