//! Live migration's part in the data path: while the frontend logs dirty
//! pages (`VHOST_F_LOG_ALL` acked, a log given with `SET_LOG_BASE` over
//! `VHOST_USER_PROTOCOL_F_LOG_SHMFD`), every page the backend writes in
//! guest memory is marked in the log, so the frontend sends it again.
//!
//! The log itself (mapping, checks, atomic marks) is
//! [`vadapt_virtq::DirtyLog`]; the vhost-user side (`crate::port`) maps it
//! and hands each running ring a [`RingLog`]; the ring service
//! (`crate::queue`) reports what it wrote through it: the bytes a receive
//! put in a buffer, and the used ring after every flush and notification
//! change.
//!
//! The log is guest memory too: the frontend can shrink its file under the
//! daemon as it can its guest RAM. A port maps only what
//! [`crate::port::memory_file`] takes (sealed against shrinking, or any
//! file where the port says `unsealed_memory = "accept"`); an unsealed log
//! is mapped under a [`crate::sigbus_guard`] ([`MappedLog`]), and the first
//! fault ends logging for the port: every later mark is skipped, and the
//! worker says so once ([`MappedLog::end`]): a migration that goes on
//! without the device's writes would corrupt the guest, so the line is an
//! ERROR, but the daemon and every other port carry on.
//!
//! The announcement after the move is the guest's own
//! (`VIRTIO_NET_F_GUEST_ANNOUNCE` is offered; QEMU asks the guest), or
//! vadapt's on the frontend's `SEND_RARP` (`crate::port`'s raw requests).

use crate::sigbus_guard::Guard;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vadapt_virtq::{Chain, DirtyLog};

/// The frontend's dirty-page log as a port maps it: the mapping, and the
/// SIGBUS guard over it when its file could shrink.
#[derive(Debug)]
pub struct MappedLog {
    /// Declared before `log`: fields drop in order, and the guard must stop
    /// covering the mapping's addresses before they are unmapped (another
    /// mapping could be made there).
    guard: Option<Guard>,
    log: DirtyLog,
    /// Someone said that logging ended ([`MappedLog::end`]).
    ended: AtomicBool,
}

impl MappedLog {
    /// `log`, guarded by `guard` when its file is not sealed against
    /// shrinking (`None`: it is, and cannot fault).
    pub fn new(log: DirtyLog, guard: Option<Guard>) -> Self {
        MappedLog {
            guard,
            log,
            ended: AtomicBool::new(false),
        }
    }

    /// The log.
    pub fn log(&self) -> &DirtyLog {
        &self.log
    }

    /// Whether the file was sealed against shrinking (no guard needed).
    pub fn is_sealed(&self) -> bool {
        self.guard.is_none()
    }

    /// Whether marks still go into the log: false once a page of it faulted
    /// (its file shrank; the page is an anonymous one now, which the
    /// frontend never reads). One atomic load for an unsealed log, none for
    /// a sealed one.
    pub fn is_live(&self) -> bool {
        self.guard.as_ref().is_none_or(|g| g.faults() == 0)
    }

    /// Whether logging ended and nobody said so yet: true exactly once,
    /// for whoever is to write the line and count the event.
    pub fn end(&self) -> bool {
        !self.is_live() && !self.ended.swap(true, Ordering::AcqRel)
    }
}

/// A ring's part in dirty-page logging: the log, and the guest-physical
/// extent of the ring's used ring (`log_guest_addr` of `SET_VRING_ADDR`),
/// which the device writes: used elements, `used.idx`, `used.flags` and
/// `avail_event`.
#[derive(Debug, Clone)]
pub struct RingLog {
    /// The frontend's log.
    pub log: Arc<MappedLog>,
    /// Guest-physical address of the used ring.
    pub used_gpa: u64,
    /// Its length, bytes (`6 + 8 * size`: flags, idx, elements, avail_event).
    /// On a packed ring, the descriptor ring the device writes used
    /// descriptors into (`16 * size`).
    pub used_len: u64,
    /// A packed ring's device event suppression area (guest-physical
    /// address, 4 bytes), which the device writes too.
    pub device_event_gpa: Option<u64>,
}

impl RingLog {
    /// Marks the used ring's pages: the whole used ring, a page or two,
    /// rather than tracking which of its bytes moved.
    pub fn used(&self) {
        if !self.log.is_live() {
            return;
        }
        let log = self.log.log();
        log.mark(self.used_gpa, self.used_len);
        if let Some(e) = self.device_event_gpa {
            log.mark(e, 4);
        }
    }

    /// Marks the pages of the first `written` bytes of `chain`'s writable
    /// buffers.
    pub fn written(&self, chain: &Chain, written: usize) {
        if !self.log.is_live() {
            return;
        }
        let log = self.log.log();
        let mut left = written as u64;
        for s in chain.segments().filter(|s| s.writable) {
            if left == 0 {
                break;
            }
            let n = left.min(u64::from(s.len));
            log.mark(s.gpa, n);
            left -= n;
        }
    }
}
