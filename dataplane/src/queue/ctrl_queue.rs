//! The control virtqueue, served by vadapt when a frontend gives it one.
//!
//! A virtio-net device with `VIRTIO_NET_F_CTRL_VQ` has a control queue
//! after its data queues: vhost-user index `2 × max_virtqueue_pairs`.
//! QEMU and DPDK's virtio-user keep it and answer it themselves, so with
//! them it never reaches vadapt (see below for QEMU 7.2 and RSS); the
//! synthetic guest, and any frontend that forwards its control queue (as
//! vDPA devices get theirs), gives it to the backend. Then this serves it:
//! each chain is one `struct virtio_net_ctrl` (class, command, data:
//! device-readable; the ack byte: device-writable), answered by
//! [`CtrlTarget::status`] and given back with one byte written.
//!
//! Commands are rare (a few at boot, one per `ethtool -L` or `-X`), so the
//! queue has a small thread of its own that sleeps on the ring's kick
//! ([`crate::port::ctrl_thread::CtrlThread`]) rather than a place in the data path's passes, whose
//! policies would otherwise delay an answer a guest spins on. A chain that
//! carries no command (under 2 readable bytes, over [`MAX_COMMAND`], no
//! writable byte for the ack) is given back unanswered and counted as
//! refused.
//!
//! **QEMU 7.2 and `VIRTIO_NET_F_RSS`** (checked in its source; Debian 12
//! ships 7.2): `hw/net/vhost_net.c` lists `VIRTIO_NET_F_RSS` and
//! `VIRTIO_NET_F_HASH_REPORT` in `user_feature_bits` (about line 78-80 of
//! 7.2, just after `VIRTIO_F_RING_RESET`), so QEMU asks a vhost-user
//! backend for them; but `virtio_net_get_features` in
//! `hw/net/virtio-net.c` (about line 780 of 7.2) clears `VIRTIO_NET_F_RSS`
//! for any vhost peer unless its eBPF steering program is loaded, and that
//! program attaches only to a TAP backend (`qemu_set_steering_ebpf`), so a
//! guest behind vhost-user never sees RSS offered. And whatever is
//! negotiated, QEMU's virtio-net keeps the control queue
//! (`virtio_net_handle_ctrl` answers `RSS_CONFIG`/`HASH_CONFIG` into its
//! own `rss_data`); vhost-user has no message that carries the config to
//! a backend (a `vhost_net_set_rss` was proposed upstream later, not in
//! 7.2). So with QEMU 7.2 the guest's key and table never reach vadapt;
//! the synthetic guest tests them (`vadapt/tests/rss.rs`). Seen on the
//! real thing (`tests/interop/test_rss.py`): a Linux 6.1 guest on
//! `virtio-net-pci,...,rss=on` over vhost-user boots with the control
//! queue and without bit 60 in its device's features, and the features
//! QEMU acks to vadapt have neither `VIRTIO_NET_F_RSS` nor even
//! `VIRTIO_NET_F_CTRL_VQ`.
//!
//! The line numbers above come from the upstream patches of the 7.2
//! cycle as the mailing list has them (a `VIRTIO_F_RING_RESET` line added
//! just before `VIRTIO_NET_F_RSS` in November 2022), not from a 7.2
//! tarball: check them there before quoting them.

use super::ctrl_command::{CtrlAccepted, CtrlRefused, CtrlTarget};
use super::ring::Ring;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::{Chain, DeviceRing};

/// Most readable bytes a command may have (header, data): an RSS config
/// at vadapt's limits is 4 + 2 + 2 + 2 × 128 + 2 + 1 + 40 = 307 bytes
/// after the 2-byte header. A longer chain is refused unread.
pub const MAX_COMMAND: usize = 1024;

/// The control queue's ring and the chain it reuses.
#[derive(Debug)]
pub struct CtrlQueue {
    ring: Ring,
    chain: Chain,
}

/// What one [`CtrlQueue::serve`] did.
#[derive(Debug, Default)]
pub struct CtrlPass {
    /// Commands answered, with their outcome ((class, command), outcome).
    pub answered: Vec<((u8, u8), Result<CtrlAccepted, CtrlRefused>)>,
    /// Chains given back without an answer, and why.
    pub unanswered: Vec<&'static str>,
    /// The guest corrupted the ring (avail index ran ahead): it is no
    /// longer served until the frontend resets it.
    pub broke_ring: bool,
}

impl CtrlQueue {
    /// Serves `ring` as the control queue.
    pub fn new(ring: Ring) -> Self {
        CtrlQueue {
            ring,
            chain: Chain::default(),
        }
    }

    /// The ring's next avail position (for `GET_VRING_BASE`).
    pub fn last_avail(&self) -> u16 {
        self.ring.q.last_avail()
    }

    /// The kick eventfd.
    pub fn kick(&self) -> &std::fs::File {
        &self.ring.kick
    }

    /// Answers every command the guest has made available (at most one
    /// ring's worth: bounded work), calls the guest if it wants to know.
    pub fn serve(&mut self, mem: &GuestMemory, target: &CtrlTarget<'_>) -> CtrlPass {
        let mut pass = CtrlPass::default();
        if self.ring.broken {
            return pass;
        }
        for _ in 0..self.ring.q.size() {
            let head = match self.ring.q.pop(mem, &mut self.chain) {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => {
                    pass.unanswered.push(e.kind.name());
                    if self.ring.give_back_rejected(&e) {
                        pass.broke_ring = true;
                        break;
                    }
                    continue;
                }
            };
            let readable = self.chain.readable_len() as usize;
            let mut buf = [0u8; MAX_COMMAND];
            let why = if readable < 2 {
                Some("control chain without a command header")
            } else if readable > MAX_COMMAND {
                Some("control command longer than 1024 bytes")
            } else if self.chain.writable_len() == 0 {
                Some("control chain without a writable ack byte")
            } else {
                None
            };
            if let Some(why) = why {
                pass.unanswered.push(why);
                self.ring.q.push_used(head, 0);
                continue;
            }
            let n = self.chain.read_into(0, &mut buf[..readable]);
            let (class, command, data) = (buf[0], buf[1], &buf[2..n]);
            let (status, outcome) = target.status(class, command, data);
            let written = self.chain.write_from(0, &[status]);
            self.ring.log_written(&self.chain, written);
            self.ring.q.push_used(head, written as u32);
            pass.answered.push(((class, command), outcome));
        }
        self.ring.q.flush_used();
        self.ring.log_used();
        self.ring.call_if_needed();
        pass
    }

    /// Asks the guest for kicks; true if commands are already waiting.
    pub fn enable_kicks(&mut self) -> bool {
        !self.ring.broken && self.ring.q.enable_notifications().unwrap_or(false)
    }

    /// The ring, given back (a test serves one ring with several queues in
    /// turn, as a frontend's restarts do).
    #[cfg(test)]
    pub(crate) fn into_ring(self) -> Ring {
        self.ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{VIRTIO_NET_F_MQ, VIRTIO_NET_F_RSS};
    use crate::queue::guest_offloads::GuestOffloadState;
    use crate::queue::ring::test_utils::{ring, take_count, Guest};
    use crate::queue::rss::{encode, RssState, SUPPORTED_HASH_TYPES};
    use vadapt_virtq::mock::{buf, readable, writable};
    use vadapt_virtq::RingFeatures;

    /// Puts `bytes` into buffer `i` and returns its address.
    fn put(g: &Guest, i: u64, bytes: &[u8]) -> u64 {
        g.mem.write(buf(i), bytes).unwrap();
        buf(i)
    }

    fn ack(g: &Guest, i: u64) -> u8 {
        let mut b = [0u8];
        g.mem.read(buf(i), &mut b).unwrap();
        b[0]
    }

    #[test]
    fn commands_are_answered_in_their_ack_byte_and_chains_without_one_given_back() {
        let (r, mut g) = ring(16, RingFeatures::default());
        let mut q = CtrlQueue::new(r);
        let offloads = GuestOffloadState::default();
        let rss = RssState::default();
        let t = CtrlTarget {
            features: VIRTIO_NET_F_MQ | VIRTIO_NET_F_RSS,
            pairs: 4,
            offloads: &offloads,
            rss: &rss,
        };
        // VQ_PAIRS_SET 2: header and data in two descriptors, as Linux.
        let h = put(&g, 0, &[4, 0]);
        let d = put(&g, 1, &2u16.to_le_bytes());
        put(&g, 2, &[0xff]);
        g.driver
            .add(&[readable(h, 2), readable(d, 2), writable(buf(2), 1)])
            .unwrap();
        // An RSS config in one descriptor with its header.
        let mut cmd = vec![4, 1];
        cmd.extend(encode(SUPPORTED_HASH_TYPES, &[3, 2, 1, 0], 0, 4, &[9; 40]));
        let c = put(&g, 3, &cmd);
        put(&g, 4, &[0xff]);
        g.driver
            .add(&[readable(c, cmd.len() as u32), writable(buf(4), 1)])
            .unwrap();
        // The same with a table of three: refused, the first stays.
        let mut bad = vec![4, 1];
        bad.extend(encode(SUPPORTED_HASH_TYPES, &[3, 2, 1], 0, 4, &[9; 40]));
        let b = put(&g, 5, &bad);
        put(&g, 6, &[0xff]);
        g.driver
            .add(&[readable(b, bad.len() as u32), writable(buf(6), 1)])
            .unwrap();
        // No ack byte; one byte of header; longer than MAX_COMMAND.
        g.driver
            .add(&[readable(put(&g, 7, &[4, 0, 1, 0]), 4)])
            .unwrap();
        g.driver
            .add(&[readable(put(&g, 8, &[4]), 1), writable(buf(9), 1)])
            .unwrap();
        g.driver
            .add(&[
                readable(buf(10), 2048),
                readable(buf(11), 2048),
                writable(buf(12), 1),
            ])
            .unwrap();
        g.driver.publish();
        let mem = g.mem.clone();
        let pass = q.serve(&mem, &t);
        assert_eq!(pass.answered.len(), 3, "{pass:?}");
        assert!(pass.answered[0].1.is_ok() && pass.answered[1].1.is_ok());
        assert!(pass.answered[2].1.is_err());
        assert_eq!(pass.unanswered.len(), 3, "{pass:?}");
        assert!(!pass.broke_ring);
        assert_eq!((ack(&g, 2), ack(&g, 4), ack(&g, 6)), (0, 0, 1));
        assert_eq!(rss.get().unwrap().table, vec![3, 2, 1, 0]);
        let used: Vec<u32> = std::iter::from_fn(|| g.driver.pop_used().map(|(_, n)| n)).collect();
        assert_eq!(used, vec![1, 1, 1, 0, 0, 0], "every chain given back");
        assert_eq!(take_count(q.ring.call.as_ref().unwrap()), 1, "one call");
        let again = q.serve(&mem, &t);
        assert!(again.answered.is_empty() && again.unanswered.is_empty());
        assert_eq!(q.last_avail(), 6);
    }
}
