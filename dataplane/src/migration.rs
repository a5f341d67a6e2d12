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
//! change. The announcement after the move is the guest's own
//! (`VIRTIO_NET_F_GUEST_ANNOUNCE` is offered; QEMU asks the guest); vadapt
//! cannot send one on the guest's behalf yet (`SEND_RARP`: the `vhost`
//! crate does not dispatch it).

use std::sync::Arc;
use vadapt_virtq::{Chain, DirtyLog};

/// A ring's part in dirty-page logging: the log, and the guest-physical
/// extent of the ring's used ring (`log_guest_addr` of `SET_VRING_ADDR`),
/// which the device writes: used elements, `used.idx`, `used.flags` and
/// `avail_event`.
#[derive(Debug, Clone)]
pub struct RingLog {
    /// The frontend's log.
    pub log: Arc<DirtyLog>,
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
        self.log.mark(self.used_gpa, self.used_len);
        if let Some(e) = self.device_event_gpa {
            self.log.mark(e, 4);
        }
    }

    /// Marks the pages of the first `written` bytes of `chain`'s writable
    /// buffers.
    pub fn written(&self, chain: &Chain, written: usize) {
        let mut left = written as u64;
        for s in chain.segments().filter(|s| s.writable) {
            if left == 0 {
                break;
            }
            let n = left.min(u64::from(s.len));
            self.log.mark(s.gpa, n);
            left -= n;
        }
    }
}
