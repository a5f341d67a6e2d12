//! The body of one pool worker: serve the queue sets it holds, block in
//! one epoll set over their waiters when none is due, and take commands
//! (take a set, release one, pin, exit) between passes.
//!
//! A set is released only between two of its passes, with its wait still
//! under way; the worker that takes it adds its waiter to its own epoll set
//! and re-checks the rings at once if the set was waiting for a kick
//! ([`QueueSet::after_handoff`]). The rings' positions and the avail/used
//! indexes live in the set and in guest memory, and kick eventfds keep
//! their count, so an ordered handoff loses nothing.

use crate::worker::queue_set::QueueSet;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

/// epoll token of the inbox's eventfd (set tokens are their ids, which are
/// switch port ids and never this large).
const TOKEN_INBOX: u64 = u64::MAX;

/// What a worker is asked to do.
pub(crate) enum Command {
    /// Serve this set from now on.
    Take(Box<QueueSet>),
    /// Hand set `id` back on the channel (`None`: not held here).
    Release(u64, Sender<Option<Box<QueueSet>>>),
    /// Run on this CPU only (`None`: leave the affinity as it is).
    Pin(Option<usize>),
    /// Leave the loop; sets still held are handed back on the channel.
    Exit(Sender<Vec<QueueSet>>),
}

/// Where a worker's commands wait, and the eventfd that wakes it.
///
/// `pending` spares the worker a `read(2)` of the eventfd on every turn of
/// its loop: a busy-polling worker turns it millions of times a second,
/// and the read was half its time (perf, B8's one-worker leg). The eventfd
/// is read only when epoll says it is readable, which also clears a count
/// left by commands already taken.
pub(crate) struct Inbox {
    commands: Mutex<Vec<Command>>,
    pending: AtomicBool,
    wake: EventFd,
}

impl Inbox {
    /// An empty inbox.
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Inbox {
            commands: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            wake: EventFd::new(libc::EFD_NONBLOCK)?,
        })
    }

    /// Queue `c` and wake the worker.
    pub(crate) fn send(&self, c: Command) {
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
        // After the push: a worker that sees `pending` finds the command.
        self.pending.store(true, Ordering::Release);
        let _ = self.wake.write(1);
    }

    /// The commands queued since the last call (none, without a system
    /// call or a lock, when `pending` is clear).
    fn take_all(&self) -> Vec<Command> {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.commands.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Clear the eventfd's count (after epoll reported it readable).
    fn clear_wake(&self) {
        let _ = self.wake.read();
    }
}

fn watch(epoll: &Epoll, op: ControlOperation, set: &QueueSet) {
    // A world on a virtual clock has nothing to watch: it is polled.
    let Some(fd) = set.queues.waiter_fd() else {
        return;
    };
    if let Err(e) = epoll.ctl(op, fd, EpollEvent::new(EventSet::IN, set.id)) {
        // Only a bug gets here (the fd is the set's own epoll set).
        tracing::error!(port = set.port_name(), error = %e, "queue worker: epoll_ctl on a queue set failed");
    }
}

/// The epoll set a worker blocks in, with `inbox`'s eventfd in it (made
/// by the pool before the thread, so that failing to make it fails the
/// spawn rather than leaving a worker that cannot wait).
pub(crate) fn epoll_for(inbox: &Inbox) -> std::io::Result<Epoll> {
    let ep = Epoll::new()?;
    ep.ctl(
        ControlOperation::Add,
        inbox.wake.as_raw_fd(),
        EpollEvent::new(EventSet::IN, TOKEN_INBOX),
    )?;
    Ok(ep)
}

/// A thread of one set's own (a pool of one) shows as the set's worker:
/// its id and CPU time go to the set's counters while it serves the set.
/// Only the first set a thread serves, and only while no other joined it:
/// its CPU time is then the set's alone. Every other set a thread serves
/// (sets that share a thread, the NQ pool's) has the time of its own
/// polls and passes measured and added to its counters (`run`).
fn own(set: &QueueSet, tid: u32, serving: bool) {
    let Some(ws) = set.queues.worker_stats() else {
        return;
    };
    if serving {
        ws.tid.store(tid as i32, Ordering::Release);
    } else {
        ws.tid.store(0, Ordering::Release);
        ws.cpu_ns_retired
            .fetch_add(crate::metrics::thread_cpu_ns(tid as i32), Ordering::Relaxed);
    }
}

/// The calling thread's CPU time, ns (0 if the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    vadapt_host::cputime::current_thread_cpu_time().map_or(0, |d| d.as_nanos() as u64)
}

/// Runs worker `index` until [`Command::Exit`]; publishes its thread id in
/// `tid`. A `dedicated` worker is a pool of one serving one set as a
/// thread of its own (see [`own`]).
pub(crate) fn run(
    index: usize,
    inbox: Arc<Inbox>,
    epoll: Epoll,
    tid: Arc<AtomicU32>,
    dedicated: bool,
) {
    let me = vadapt_host::cputime::current_tid();
    tid.store(me, Ordering::Release);
    // The set the thread is its own of, if any (see `own`).
    let mut owner: Option<u64> = None;
    let mut served_any = false;
    if let Err(e) = vadapt_host::cputime::set_timer_slack(1) {
        tracing::warn!(worker = index, error = %e, "timer slack stays at the default");
    }
    let mut sets: Vec<Box<QueueSet>> = Vec::new();
    let mut events = vec![EpollEvent::default(); 16];
    loop {
        for c in inbox.take_all() {
            match c {
                Command::Take(mut set) => {
                    // A set that stopped itself is only held until its
                    // port takes it back: watching it could spin.
                    if !set.is_stopped() {
                        watch(&epoll, ControlOperation::Add, &set);
                    }
                    set.after_handoff();
                    if dedicated && !served_any {
                        own(&set, me, true);
                        owner = Some(set.id);
                    } else if let Some(first) = owner.take() {
                        if let Some(s) = sets.iter().find(|s| s.id == first) {
                            own(s, me, false);
                        }
                    }
                    served_any = true;
                    sets.push(set);
                }
                Command::Release(id, reply) => {
                    let held = sets.iter().position(|s| s.id == id).map(|i| {
                        let set = sets.swap_remove(i);
                        if !set.is_stopped() {
                            watch(&epoll, ControlOperation::Delete, &set);
                        }
                        if owner == Some(set.id) {
                            owner = None;
                            own(&set, me, false);
                        }
                        set
                    });
                    let _ = reply.send(held);
                }
                Command::Pin(Some(cpu)) => {
                    if let Err(e) = vadapt_host::cputime::pin_current_thread(cpu) {
                        tracing::warn!(worker = index, cpu, error = %e, "cannot pin queue worker");
                    }
                }
                Command::Pin(None) => {}
                Command::Exit(reply) => {
                    for s in &sets {
                        if !s.is_stopped() {
                            watch(&epoll, ControlOperation::Delete, s);
                        }
                        if owner == Some(s.id) {
                            own(s, me, false);
                        }
                    }
                    let _ = reply.send(sets.into_iter().map(|s| *s).collect());
                    return;
                }
            }
        }
        let mut ran = false;
        // A set on a virtual clock has no waiter to block on: look again.
        let mut unwatched = false;
        for set in sets.iter_mut() {
            unwatched |= !set.is_stopped() && set.queues.waiter_fd().is_none();
            // A set this thread is not its own of gets the thread's CPU
            // time it uses, measured (two vDSO clock reads); the owner's
            // is the thread's whole time, read from outside (see `own`).
            let since = (owner != Some(set.id)).then(thread_cpu_ns);
            if set.poll() {
                set.run_pass();
                ran = true;
                if set.is_stopped() {
                    watch(&epoll, ControlOperation::Delete, set);
                }
            }
            if let (Some(t0), Some(ws)) = (since, set.queues.worker_stats()) {
                ws.cpu_ns_retired
                    .fetch_add(thread_cpu_ns().saturating_sub(t0), Ordering::Relaxed);
            }
        }
        if !ran && !unwatched {
            // Level-triggered: whatever became ready since the polls above
            // ends this wait at once.
            match epoll.wait(-1, &mut events) {
                Ok(n) => {
                    if events[..n].iter().any(|e| e.data() == TOKEN_INBOX) {
                        inbox.clear_wake();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(worker = index, error = %e, "queue worker: epoll_wait failed");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }
}
