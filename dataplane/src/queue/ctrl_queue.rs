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
//! ([`CtrlThread`]) rather than a place in the data path's passes, whose
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
use super::VmPort;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::{Chain, DeviceRing};
use vmm_sys_util::eventfd::EventFd;

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
    fn enable_kicks(&mut self) -> bool {
        !self.ring.broken && self.ring.q.enable_notifications().unwrap_or(false)
    }
}

/// Serves `queue` for `port` and counts and logs what a pass did. Every
/// line goes through the port's limits ([`VmPort::may_log`]), one per
/// kind of line: a guest can send commands as fast as it likes, and make
/// the frontend restart this queue's thread with every ring message.
pub fn serve_and_count(queue: &mut CtrlQueue, mem: &GuestMemory, port: &VmPort, features: u64) {
    let target = CtrlTarget {
        features,
        pairs: port.cfg.queues,
        offloads: &port.guest_offloads,
        rss: &port.rss,
    };
    let pass = queue.serve(mem, &target);
    let stats = &port.stats;
    for ((class, command), outcome) in &pass.answered {
        match outcome {
            Ok(done) => {
                stats.ctrl_accepted.fetch_add(1, Ordering::Relaxed);
                if let Some(held_back) = port.may_log(ACCEPTED) {
                    tracing::info!(
                        port = port.name(),
                        class,
                        command,
                        ?done,
                        held_back,
                        "control command accepted"
                    );
                }
            }
            Err(e) => {
                stats.ctrl_refused.fetch_add(1, Ordering::Relaxed);
                if let Some(held_back) = port.may_log(REFUSED) {
                    tracing::warn!(
                        port = port.name(),
                        class,
                        command,
                        held_back,
                        reason = %vadapt_host::error_chain::error_chain(e),
                        "control command refused (VIRTIO_NET_ERR)"
                    );
                }
            }
        }
    }
    for why in &pass.unanswered {
        stats.ctrl_refused.fetch_add(1, Ordering::Relaxed);
        if let Some(held_back) = port.may_log("control chain unanswered") {
            tracing::warn!(
                port = port.name(),
                reason = why,
                held_back,
                "control chain given back unanswered"
            );
        }
    }
    if pass.broke_ring {
        if let Some(held_back) = port.may_log("control queue corrupted") {
            tracing::error!(
                port = port.name(),
                held_back,
                "guest corrupted its control queue (avail index ran ahead); not served until the frontend resets it"
            );
        }
    }
}

/// The port's limit of "control command accepted" lines.
pub const ACCEPTED: &str = "control command accepted";
/// The port's limit of "control command refused" lines.
pub const REFUSED: &str = "control command refused";

/// A thread serving a port's control queue until stopped.
#[derive(Debug)]
pub struct CtrlThread {
    stop: Arc<AtomicBool>,
    wake: EventFd,
    join: JoinHandle<CtrlQueue>,
}

impl CtrlThread {
    /// Starts serving `queue` over `mem` for `port`, whose frontend acked
    /// `features`.
    pub fn start(
        port: Arc<VmPort>,
        mem: GuestMemory,
        mut queue: CtrlQueue,
        features: u64,
    ) -> std::io::Result<CtrlThread> {
        let wake = EventFd::new(libc::EFD_NONBLOCK)?;
        let woken = wake.try_clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let join = std::thread::Builder::new()
            .name(format!("vadapt-c-{}", port.name()))
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    serve_and_count(&mut queue, &mem, &port, features);
                    if queue.enable_kicks() {
                        continue;
                    }
                    wait_readable(queue.kick(), &woken);
                    let _ = super::eventfd_io::drain(queue.kick());
                    let _ = woken.read();
                }
                queue
            })?;
        Ok(CtrlThread { stop, wake, join })
    }

    /// Stops the thread and gives the queue back (`None` if it panicked).
    pub fn stop(self) -> Option<CtrlQueue> {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.write(1);
        self.join.join().ok()
    }
}

/// Blocks until `kick` or `wake` is readable (or poll fails: the loop
/// then serves once more and looks at its stop flag).
fn wait_readable(kick: &std::fs::File, wake: &EventFd) {
    let mut fds = [
        libc::pollfd {
            fd: kick.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a valid array of two pollfd for the call's duration;
    // both descriptors are open (borrowed from live owners).
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
    if r < 0 {
        // EINTR or worse: do not spin hot on a persistent error.
        std::thread::sleep(std::time::Duration::from_millis(1));
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

    /// Issue 36, finding 6: a guest floods its control queue with
    /// `VQ_PAIRS_SET` (10,000 accepted: one INFO line each before), and
    /// with refused commands while its frontend restarts the queue's server
    /// between every 20 (each restart began a fresh limit before: 200
    /// restarts gave 2,000 WARN lines). The lines are the port's to limit,
    /// per reason, whatever serves the queue: at most 10 a second each.
    #[test]
    fn command_floods_log_a_bounded_number_of_lines_across_restarts() {
        let port = crate::queue::vm_port::tests::port("ctrl-flood", 2);
        let (mut r, mut g) = ring(256, RingFeatures::default());
        let started = std::time::Instant::now();
        // `pairs` per command, `per_restart` commands per incarnation of
        // the queue's server.
        let mut flood = |pairs: u16, commands: usize, per_restart: usize, r0: Ring| {
            let mut r = r0;
            let mut left = commands;
            while left > 0 {
                let n = left.min(per_restart);
                for i in 0..n as u64 {
                    let cmd = [4, 0, pairs as u8, (pairs >> 8) as u8];
                    let c = put(&g, 2 * i, &cmd);
                    g.driver
                        .add(&[readable(c, 4), writable(buf(2 * i + 1), 1)])
                        .unwrap();
                }
                g.driver.publish();
                // A fresh server over the same ring, as after a restart.
                let mut q = CtrlQueue::new(r);
                serve_and_count(&mut q, &g.mem.clone(), &port, VIRTIO_NET_F_MQ);
                while g.driver.pop_used().is_some() {}
                r = q.ring;
                left -= n;
            }
            r
        };
        r = flood(1, 10_000, 64, r);
        let _ = flood(0, 4_000, 20, r);
        let elapsed = started.elapsed();
        let bound = crate::log_limit::peer_lines_bound(elapsed);
        let stats = &port.stats;
        assert_eq!(stats.ctrl_accepted.load(Ordering::Relaxed), 10_000);
        assert_eq!(stats.ctrl_refused.load(Ordering::Relaxed), 4_000);
        for reason in [ACCEPTED, REFUSED] {
            let (written, held_back) = port.log_totals(reason);
            assert!(written <= bound, "{reason}: {written} lines in {elapsed:?}");
            assert!(held_back > 0, "{reason}: the rest held back and counted");
        }
    }
}
