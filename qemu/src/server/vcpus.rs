//! The guest's "vCPUs" as a VMM sees them: which host thread plays each one, and whether
//! the VM runs or is paused.
//!
//! Each sending thread (the synthetic guest's `worker`) plays one vCPU: it registers its thread id when it
//! starts and leaves when it ends. [`super::qmp_server`] lists them for `query-cpus-fast` and
//! pauses and resumes them for `stop` and `cont`, so the core manager finds and controls this
//! guest exactly as it does a QEMU VM.
//!
//! A pause is real: the threads block on a condition variable at their next pause point (the
//! top of each send loop, so a request already sent is still waited for) and use no CPU
//! until they are resumed. The run's duration keeps running meanwhile, as wall-clock time
//! does for a paused VM.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::qmp::VcpuThread;

/// The vCPU threads of one guest and its run state. Shared by the sending threads, the QMP
/// server and the library user.
#[derive(Debug, Default)]
pub struct Vcpus {
    /// Fast path of [`Vcpus::wait_while_paused`]: a running guest's threads never lock.
    paused: AtomicBool,
    /// Fast path of [`Vcpus::wait_while_held`]: paused, or some vCPU offline.
    held: AtomicBool,
    state: Mutex<State>,
    resumed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// vCPU index (the sending thread's number) → host thread id.
    threads: BTreeMap<u32, u32>,
    paused: bool,
    /// How many vCPUs the guest has (its sending threads), for the guest agent.
    count: u32,
    /// vCPUs set offline through the guest agent (`guest-set-vcpus`).
    offline: std::collections::BTreeSet<u32>,
}

impl State {
    fn held(&self) -> bool {
        self.paused || !self.offline.is_empty()
    }
}

impl Vcpus {
    /// No thread, running.
    pub fn new() -> Vcpus {
        Vcpus::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a map and a flag, consistent after every statement: a panic elsewhere
        // while holding the lock leaves nothing half-done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that host thread `tid` plays vCPU `index` (replacing an earlier one).
    pub fn register(&self, index: u32, tid: u32) {
        self.lock().threads.insert(index, tid);
    }

    /// Forgets vCPU `index` (its thread is ending).
    pub fn unregister(&self, index: u32) {
        self.lock().threads.remove(&index);
    }

    /// The live vCPU threads, in index order.
    pub fn threads(&self) -> Vec<VcpuThread> {
        self.lock()
            .threads
            .iter()
            .map(|(&cpu_index, &thread_id)| VcpuThread {
                cpu_index,
                thread_id,
            })
            .collect()
    }

    /// Pauses the vCPUs (QMP `stop`). Returns whether they were running.
    pub fn pause(&self) -> bool {
        let mut s = self.lock();
        let was_running = !s.paused;
        s.paused = true;
        self.paused.store(true, Ordering::Release);
        self.held.store(true, Ordering::Release);
        was_running
    }

    /// Resumes the vCPUs (QMP `cont`). Returns whether they were paused.
    pub fn resume(&self) -> bool {
        let mut s = self.lock();
        let was_paused = s.paused;
        s.paused = false;
        self.paused.store(false, Ordering::Release);
        self.held.store(s.held(), Ordering::Release);
        drop(s);
        self.resumed.notify_all();
        was_paused
    }

    /// Whether the vCPUs are paused.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// A vCPU's pause point: returns at once when running; when paused, blocks until resumed
    /// or `slice` passed. Returns whether the guest is still paused, so that the caller can
    /// check its own stop conditions and wait again.
    pub fn wait_while_paused(&self, slice: Duration) -> bool {
        if !self.paused.load(Ordering::Acquire) {
            return false;
        }
        let s = self.lock();
        let (s, _) = self
            .resumed
            .wait_timeout_while(s, slice, |s| s.paused)
            .unwrap_or_else(|e| e.into_inner());
        s.paused
    }
}

/// Why `guest-set-vcpus` could not apply an entry (qemu-ga's wording).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SetVcpuError {
    /// No such vCPU.
    #[error("vCPU {0} does not exist")]
    NoSuchVcpu(u32),
    /// vCPU 0 stays online, as on most Linux guests.
    #[error("vCPU 0 cannot be offlined")]
    CannotOffline,
}

impl Vcpus {
    /// Sets how many vCPUs the guest has (its sending threads).
    pub fn set_count(&self, n: u32) {
        self.lock().count = n;
    }

    /// Every vCPU with whether it is online, in index order (`guest-get-vcpus`).
    pub fn online_states(&self) -> Vec<(u32, bool)> {
        let s = self.lock();
        (0..s.count).map(|i| (i, !s.offline.contains(&i))).collect()
    }

    /// Brings vCPU `index` online or offline (`guest-set-vcpus`): an offline vCPU's
    /// sending thread blocks at its pause point until it is online again.
    pub fn set_online(&self, index: u32, online: bool) -> Result<(), SetVcpuError> {
        let mut s = self.lock();
        if index >= s.count {
            return Err(SetVcpuError::NoSuchVcpu(index));
        }
        if index == 0 && !online {
            return Err(SetVcpuError::CannotOffline);
        }
        if online {
            s.offline.remove(&index);
        } else {
            s.offline.insert(index);
        }
        self.held.store(s.held(), Ordering::Release);
        drop(s);
        self.resumed.notify_all();
        Ok(())
    }

    /// vCPU `index`'s pause point: returns at once when the guest runs and the vCPU is
    /// online; else blocks until both hold or `slice` passed. Returns whether it is still
    /// held (paused or offline).
    pub fn wait_while_held(&self, index: u32, slice: Duration) -> bool {
        if !self.held.load(Ordering::Acquire) {
            return false;
        }
        let s = self.lock();
        let (s, _) = self
            .resumed
            .wait_timeout_while(s, slice, |s| s.paused || s.offline.contains(&index))
            .unwrap_or_else(|e| e.into_inner());
        s.paused || s.offline.contains(&index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn threads_are_listed_in_index_order() {
        let v = Vcpus::new();
        v.register(1, 200);
        v.register(0, 100);
        v.register(2, 300);
        v.unregister(2);
        let t = v.threads();
        assert_eq!(
            t.iter()
                .map(|t| (t.cpu_index, t.thread_id))
                .collect::<Vec<_>>(),
            [(0, 100), (1, 200)]
        );
    }

    #[test]
    fn pause_blocks_until_resume() {
        let v = Arc::new(Vcpus::new());
        assert!(!v.wait_while_paused(Duration::from_secs(10)));
        assert!(v.pause());
        assert!(!v.pause(), "already paused");
        let start = Instant::now();
        assert!(v.wait_while_paused(Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));

        let v2 = Arc::clone(&v);
        let waiter = std::thread::spawn(move || {
            let start = Instant::now();
            while v2.wait_while_paused(Duration::from_secs(10)) {}
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(v.resume());
        assert!(!v.resume(), "already running");
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        assert!(
            waited < Duration::from_secs(5),
            "woken by the resume, not the slice"
        );
    }
}
