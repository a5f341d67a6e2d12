//! Input types and drivers shared by vadapt's fuzz targets (`fuzz_targets/`):
//! each target is a few lines that decode the fuzzer's bytes into one of
//! these inputs and hand it to its driver.
//!
//! * [`ring`] — a virtqueue's device side on arbitrary rings, and its
//!   driver and device on arbitrary operations: one interpreter of each,
//!   generic over the device contract, for split and packed rings alike.
//! * [`vhost_user`] — vhost-user message sequences into the data plane's
//!   real backend request handler, over a real socket pair, its queue
//!   worker stepped in-process.
//! * [`control`] — the control-socket protocol against a real daemon,
//!   served in-process.
//! * [`qmp`], [`qga`] — what QEMU's QMP socket and the guest agent send,
//!   into the core manager's clients, from the server's end.
//! * [`config`] — the config file and command-line spec parsers.
//! * [`source_guard`] — a guest's frame into the frame classifier and the
//!   IP source guard of a port with `allowed_ips`.
//! * [`vnet_hdr`] — a guest's virtio-net header and frame into checksum
//!   completion and TCP segmentation.

pub mod config;
pub mod control;
pub mod qga;
pub mod qmp;
pub mod ring;
pub mod source_guard;
pub mod vhost_user;
pub mod vnet_hdr;

/// As in the daemon (a Rust program, whose runtime ignores SIGPIPE): a
/// peer gone mid-write is an error, not SIGPIPE. libFuzzer's `main` is not
/// Rust's and leaves the signal at its default, which kills the process.
pub fn ignore_sigpipe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: sets a signal's disposition to ignore; no handler runs.
    ONCE.call_once(|| unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    });
}

/// Open file descriptors of this process (entries of `/proc/self/fd`).
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Leak check for targets that open descriptors: call once per input.
/// Every 1000 inputs (in builds with debug assertions, cargo fuzz's
/// default) the count of open descriptors must not have grown since the
/// 1000th input by more than a small slack (libFuzzer's own files).
pub fn check_fd_leaks() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    static BASELINE: AtomicUsize = AtomicUsize::new(0);
    if !cfg!(debug_assertions) {
        return;
    }
    let n = RUNS.fetch_add(1, Ordering::Relaxed) + 1;
    if !n.is_multiple_of(1000) {
        return;
    }
    let fds = open_fds();
    if n == 1000 {
        BASELINE.store(fds, Ordering::Relaxed);
        return;
    }
    let base = BASELINE.load(Ordering::Relaxed);
    debug_assert!(
        fds <= base + 8,
        "descriptor leak: {fds} open after {n} inputs, {base} after 1000"
    );
}

#[cfg(test)]
mod tests {
    use std::sync::{Mutex, MutexGuard};

    /// Tests that open descriptors or count them run one at a time.
    pub fn serial() -> MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }
}
