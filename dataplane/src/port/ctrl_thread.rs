//! A VM port's control virtqueue served by a small thread of its own
//! ([`CtrlThread`]), and what a pass did counted into the port and written
//! to its log ([`serve_and_count`]). The queue itself, and the answer to
//! each command, are the ring service's ([`crate::queue::ctrl_queue`],
//! [`crate::queue::ctrl_command`]); why it has a thread rather than a place
//! in the data path's passes is said there.

use super::vm_port::VmPort;
use crate::queue::ctrl_command::CtrlTarget;
use crate::queue::ctrl_queue::CtrlQueue;
use crate::queue::eventfd_io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vadapt_virtq::mem::GuestMemory;
use vmm_sys_util::eventfd::EventFd;

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
                    let _ = eventfd_io::drain(queue.kick());
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
    use crate::net::VIRTIO_NET_F_MQ;
    use crate::queue::ring::test_utils::{ring, Guest};
    use crate::queue::ring::Ring;
    use vadapt_virtq::mock::{buf, readable, writable};
    use vadapt_virtq::RingFeatures;

    /// Puts `bytes` into buffer `i` and returns its address.
    fn put(g: &Guest, i: u64, bytes: &[u8]) -> u64 {
        g.mem.write(buf(i), bytes).unwrap();
        buf(i)
    }

    /// Issue 36, finding 6: a guest floods its control queue with
    /// `VQ_PAIRS_SET` (10,000 accepted: one INFO line each before), and
    /// with refused commands while its frontend restarts the queue's server
    /// between every 20 (each restart began a fresh limit before: 200
    /// restarts gave 2,000 WARN lines). The lines are the port's to limit,
    /// per reason, whatever serves the queue: at most 10 a second each.
    #[test]
    fn command_floods_log_a_bounded_number_of_lines_across_restarts() {
        let port = super::super::vm_port::tests::port("ctrl-flood", 2);
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
                r = q.into_ring();
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
