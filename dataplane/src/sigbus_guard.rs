//! Surviving SIGBUS from guest memory whose file shrank after it was mapped.
//!
//! Where a port accepts guest-memory files that are not sealed against
//! shrinking (see [`crate::port::memory_file`]), the frontend can
//! `ftruncate` the file under the daemon; the next access to a page past the
//! new end raises SIGBUS, whose default action kills the daemon and every
//! VM's network with it.
//!
//! The design: each mapped guest region is registered in a fixed table that
//! a SIGBUS handler reads without locks. When the faulting address lies in
//! a registered region, the handler maps an anonymous page over the faulting
//! page (`MAP_FIXED`; a page of the region's own size, 2 MiB or 1 GiB for
//! hugetlbfs memory, which cannot be split at less) and counts the fault; the access is retried on return
//! and completes on that page (the daemon reads zeros, its writes go
//! nowhere). The port's worker sees the count after its pass and resets the
//! port. A fault anywhere else gets the default action, as before.
//!
//! Why not `siglongjmp` out of the access: unwinding through Rust frames
//! that way is undefined behaviour, and the ring code would be left
//! half-updated. Replacing the page needs only `mmap`, a plain system call,
//! and leaves every invariant of the ring code intact: it only ever sees
//! guest-controlled bytes, which it already treats as hostile.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Regions that can be guarded at once (64 ports of 8 regions).
const SLOTS: usize = 512;

struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    /// The mapping's page size: the system's, or a hugetlb mapping's
    /// (which cannot be split, so replaced, at less).
    page: AtomicUsize,
    faults: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    page: AtomicUsize::new(0),
    faults: AtomicU64::new(0),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Serialises slot allocation (the handler never takes it).
static ALLOC: Mutex<()> = Mutex::new(());
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// Faults handled in any region, ever: workers compare it every pass (one
/// load) and look at their own regions only when it moved.
static TOTAL: AtomicU64 = AtomicU64::new(0);

/// Faults handled in any guarded region since the daemon started.
pub fn total_faults() -> u64 {
    TOTAL.load(Ordering::Acquire)
}
/// Whether the handler was installed; `Err`: `sigaction`'s `errno`.
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

/// Why a region could not be guarded.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// `sigaction` failed.
    #[error("cannot install the SIGBUS handler")]
    Install(#[source] std::io::Error),
    /// Every slot is taken.
    #[error("more than {SLOTS} guest memory regions guarded at once")]
    Full,
}

/// One guarded region; dropping it stops guarding (before unmapping).
#[derive(Debug)]
pub struct Guard {
    idx: usize,
}

impl Guard {
    /// Faults handled in this region so far.
    pub fn faults(&self) -> u64 {
        TABLE[self.idx].faults.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let s = &TABLE[self.idx];
        s.len.store(0, Ordering::Release);
        s.start.store(0, Ordering::Release);
    }
}

/// Guard `[start, start + len)`, a mapping of guest memory whose pages are
/// `hugepage` bytes (a hugetlb mapping), or the system's (`None`).
pub fn guard(start: *const u8, len: usize, hugepage: Option<u64>) -> Result<Guard, GuardError> {
    install().map_err(|errno| GuardError::Install(std::io::Error::from_raw_os_error(errno)))?;
    let _g = ALLOC.lock().unwrap_or_else(|e| e.into_inner());
    let idx = TABLE
        .iter()
        .position(|s| s.len.load(Ordering::Acquire) == 0)
        .ok_or(GuardError::Full)?;
    let s = &TABLE[idx];
    let page = hugepage
        .and_then(|p| usize::try_from(p).ok())
        .filter(|p| p.is_power_of_two())
        .unwrap_or_else(|| PAGE.load(Ordering::Relaxed));
    s.faults.store(0, Ordering::Release);
    s.page.store(page, Ordering::Release);
    s.start.store(start as usize, Ordering::Release);
    s.len.store(len, Ordering::Release);
    Ok(Guard { idx })
}

/// Installs the handler once; `Err`: `sigaction`'s `errno`, every time.
fn install() -> Result<(), i32> {
    *INSTALLED.get_or_init(|| {
        // SAFETY: sysconf takes an integer name.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: an all-zero sigaction is a valid starting value; the
        // handler has the SA_SIGINFO signature and touches only atomics
        // and mmap (see `on_sigbus`).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        Ok(())
    })
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers;
    // si_addr is the faulting address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &TABLE {
        let len = s.len.load(Ordering::Acquire);
        let start = s.start.load(Ordering::Acquire);
        if len != 0 && addr.wrapping_sub(start) < len {
            // A whole page of the mapping's own size: a hugetlb mapping
            // refuses to be split at less (mmap fails with EINVAL).
            let page = s.page.load(Ordering::Acquire).max(1);
            let at = addr & !(page - 1);
            // SAFETY: `at` is a page inside a mapping the daemon owns and
            // registered; replacing that page with an anonymous one only
            // changes what the retried access reads or writes.
            let r = unsafe {
                libc::mmap(
                    at as *mut libc::c_void,
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                s.faults.fetch_add(1, Ordering::AcqRel);
                TOTAL.fetch_add(1, Ordering::AcqRel);
                return;
            }
        }
    }
    // Not guest memory (or the page could not be replaced): the default
    // action, as if no handler were installed; the access faults again.
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd};

    /// A 4-page shared mapping of an unsealed memfd.
    fn mapping() -> (std::fs::File, *mut u8, usize) {
        // SAFETY: NUL-terminated literal name; result checked.
        let fd = unsafe { libc::memfd_create(c"vadapt-sigbus".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        let len = 4 * PAGE.load(Ordering::Relaxed).max(4096);
        f.set_len(len as u64).unwrap();
        // SAFETY: a new shared mapping of our own file, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        (f, p.cast(), len)
    }

    #[test]
    fn a_shrunk_guarded_mapping_reads_zeros_and_counts_the_fault() {
        let (f, p, len) = mapping();
        let g = guard(p, len, None).unwrap();
        // SAFETY: `p` maps `len` bytes.
        unsafe { p.add(len - 1).write_volatile(7) };
        f.set_len(0).unwrap();
        // SAFETY: still mapped; the page past the file's end faults, the
        // handler replaces it, the read completes.
        let v = unsafe { p.add(len - 1).read_volatile() };
        assert_eq!(v, 0);
        // SAFETY: as above, another page.
        unsafe { p.write_volatile(1) };
        assert_eq!(g.faults(), 2);
        drop(g);
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(p.cast(), len) };
    }

    #[test]
    fn a_fault_outside_guarded_memory_still_kills() {
        let (f, p, len) = mapping();
        let _g = guard(std::ptr::null(), 1, None).unwrap(); // handler installed
        f.set_len(0).unwrap();
        // SAFETY: fork in a test; the child touches the unguarded, truncated
        // mapping (SIGBUS expected) and exits without returning to Rust code.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: child: the read faults; `_exit` if it does not.
            unsafe {
                let _ = p.read_volatile();
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFSIGNALED(status), "status {status:#x}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGBUS);
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(p.cast(), len) };
    }
}
