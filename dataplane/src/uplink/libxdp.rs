//! The part of the distribution's libxdp (Debian's `libxdp1`, 1.3) that
//! the uplink calls, loaded at run time (`dlopen`), and the AF_XDP ring accessors that
//! `<xdp/xsk.h>` defines as inline functions (so no library exports them).
//!
//! Why the system library and not a Rust binding crate: `libxdp-sys` (and
//! `xsk-rs` above it) builds a vendored libxdp and its BPF programs from
//! source with clang at every build; the distribution's libxdp ships the
//! same default AF_XDP program precompiled (`xsk_def_xdp_prog.o`) and the
//! multi-program dispatcher, which is what loads and attaches here. The
//! uplink needs a dozen entry points; they are below, with the layouts of
//! `<xdp/xsk.h>` and `<xdp/libxdp.h>` they take.
//!
//! The accessors follow `<xdp/xsk.h>` (and the kernel's
//! `net/xdp/xsk_queue.h` for their ordering): a producer writes entries,
//! then publishes its index with a release store; a consumer reads the
//! other side's index with an acquire load before the entries.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

/// `struct xsk_ring_prod` / `struct xsk_ring_cons` (`DEFINE_XSK_RING`):
/// libxdp fills it in when it maps a ring; the pointers point into the
/// ring's mapping, which lives as long as the socket or UMEM that owns it.
#[repr(C)]
#[derive(Debug)]
pub struct XskRing {
    cached_prod: u32,
    cached_cons: u32,
    mask: u32,
    size: u32,
    producer: *mut u32,
    consumer: *mut u32,
    ring: *mut c_void,
    flags: *mut u32,
}

impl Default for XskRing {
    fn default() -> Self {
        XskRing {
            cached_prod: 0,
            cached_cons: 0,
            mask: 0,
            size: 0,
            producer: std::ptr::null_mut(),
            consumer: std::ptr::null_mut(),
            ring: std::ptr::null_mut(),
            flags: std::ptr::null_mut(),
        }
    }
}

// SAFETY: the ring's mapping is process memory shared with the kernel; one
// queue worker owns each ring (the socket or UMEM it belongs to moves with
// it), so moving the handle between threads is sound.
unsafe impl Send for XskRing {}

/// `struct xdp_desc`: one RX or TX ring entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct XdpDesc {
    /// Offset of the frame in the UMEM.
    pub addr: u64,
    /// Frame length, bytes.
    pub len: u32,
    /// `XDP_PKT_CONTD` and friends (multi-buffer; not used here).
    pub options: u32,
}

/// `struct xsk_umem_config`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XskUmemConfig {
    /// Fill ring entries (a power of two).
    pub fill_size: u32,
    /// Completion ring entries (a power of two).
    pub comp_size: u32,
    /// Bytes per UMEM frame (2048 or 4096 for aligned frames).
    pub frame_size: u32,
    /// Headroom the kernel leaves in front of each received frame.
    pub frame_headroom: u32,
    /// `XDP_UMEM_UNALIGNED_CHUNK_FLAG` (not used).
    pub flags: u32,
}

/// `struct xsk_socket_config`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XskSocketConfig {
    /// RX ring entries (a power of two).
    pub rx_size: u32,
    /// TX ring entries (a power of two).
    pub tx_size: u32,
    /// `XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD` or 0 (load the default program).
    pub libxdp_flags: u32,
    /// `XDP_FLAGS_*` for attaching the program (0: native, else generic).
    pub xdp_flags: u32,
    /// `XDP_COPY`, `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`.
    pub bind_flags: u16,
}

/// `bind_flags`: force copy mode.
pub const XDP_COPY: u16 = 1 << 1;
/// `bind_flags`: force zero-copy mode (fails where the driver has none).
pub const XDP_ZEROCOPY: u16 = 1 << 2;
/// `bind_flags`: the kernel sets a ring's need-wakeup flag instead of
/// being woken by every `sendto`/`poll`.
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// A ring's `flags` bit: the kernel waits for a `sendto` (TX) or `poll`/
/// `recvfrom` (fill ring) to go on.
const XDP_RING_NEED_WAKEUP: u32 = 1;

/// `struct xsk_umem` (opaque).
#[repr(C)]
pub struct XskUmem {
    _private: [u8; 0],
}

/// `struct xsk_socket` (opaque).
#[repr(C)]
pub struct XskSocket {
    _private: [u8; 0],
}

/// `struct xdp_multiprog` (opaque).
#[repr(C)]
pub struct XdpMultiprog {
    _private: [u8; 0],
}

/// `struct xdp_program` (opaque).
#[repr(C)]
pub struct XdpProgram {
    _private: [u8; 0],
}

/// `libxdp_print_fn_t`: (level, format, va_list); the va_list is passed
/// as the pointer it is on x86-64 and aarch64.
pub type PrintFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void) -> c_int;

/// The entry points of libxdp (and libbpf's print hook), loaded at run
/// time: a host without libxdp runs every other port, and an uplink there
/// fails with one line naming the package.
// Fields named as the C functions they hold.
#[allow(clippy::type_complexity, non_snake_case)]
pub(crate) struct Libxdp {
    pub(crate) xsk_umem__create: unsafe extern "C" fn(
        *mut *mut XskUmem,
        *mut c_void,
        u64,
        *mut XskRing,
        *mut XskRing,
        *const XskUmemConfig,
    ) -> c_int,
    pub(crate) xsk_umem__delete: unsafe extern "C" fn(*mut XskUmem) -> c_int,
    pub(crate) xsk_socket__create: unsafe extern "C" fn(
        *mut *mut XskSocket,
        *const c_char,
        u32,
        *mut XskUmem,
        *mut XskRing,
        *mut XskRing,
        *const XskSocketConfig,
    ) -> c_int,
    pub(crate) xsk_socket__delete: unsafe extern "C" fn(*mut XskSocket),
    pub(crate) xsk_socket__fd: unsafe extern "C" fn(*const XskSocket) -> c_int,
    pub(crate) xdp_multiprog__get_from_ifindex: unsafe extern "C" fn(c_int) -> *mut XdpMultiprog,
    pub(crate) xdp_multiprog__next_prog:
        unsafe extern "C" fn(*const XdpProgram, *const XdpMultiprog) -> *mut XdpProgram,
    pub(crate) xdp_multiprog__main_prog:
        unsafe extern "C" fn(*const XdpMultiprog) -> *mut XdpProgram,
    pub(crate) xdp_multiprog__is_legacy: unsafe extern "C" fn(*const XdpMultiprog) -> bool,
    pub(crate) xdp_multiprog__detach: unsafe extern "C" fn(*mut XdpMultiprog) -> c_int,
    pub(crate) xdp_multiprog__close: unsafe extern "C" fn(*mut XdpMultiprog),
    pub(crate) xdp_program__name: unsafe extern "C" fn(*const XdpProgram) -> *const c_char,
    pub(crate) libxdp_get_error: unsafe extern "C" fn(*const c_void) -> std::ffi::c_long,
    libxdp_set_print: unsafe extern "C" fn(Option<PrintFn>) -> Option<PrintFn>,
    libbpf_set_print: unsafe extern "C" fn(Option<PrintFn>) -> Option<PrintFn>,
}

/// The library file loaded (Debian's `libxdp1`).
pub const LIBXDP: &str = "libxdp.so.1";
const LIBBPF: &str = "libbpf.so.1";

/// Why libxdp could not be loaded: what is missing.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum LibraryError {
    /// A library file could not be loaded.
    #[error("cannot load {name}: the uplink needs libxdp (Debian/Ubuntu: apt install libxdp1)")]
    Open {
        /// The library file.
        name: &'static str,
    },
    /// A library loaded lacks a function the uplink calls.
    #[error("{LIBXDP} has no `{symbol}`")]
    Symbol {
        /// The function.
        symbol: &'static str,
    },
}

/// libxdp, loaded on first use; the error says what is missing.
pub(crate) fn libxdp() -> Result<&'static Libxdp, LibraryError> {
    static LIB: std::sync::OnceLock<Result<Libxdp, LibraryError>> = std::sync::OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| *e)
}

fn open(name: &'static str) -> Result<*mut c_void, LibraryError> {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: dlopen of a NUL-terminated name; the handle is never closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(LibraryError::Open { name });
    }
    Ok(h)
}

// Each transmute's target is the type of the field it initialises.
#[allow(clippy::missing_transmute_annotations)]
fn load() -> Result<Libxdp, LibraryError> {
    let xdp = open(LIBXDP)?;
    let bpf = open(LIBBPF)?;
    macro_rules! sym {
        ($h:expr, $name:ident) => {{
            let c = concat!(stringify!($name), "\0");
            // SAFETY: dlsym on a live handle with a NUL-terminated name.
            let p = unsafe { libc::dlsym($h, c.as_ptr().cast()) };
            if p.is_null() {
                return Err(LibraryError::Symbol {
                    symbol: stringify!($name),
                });
            }
            // SAFETY: the symbol is the function declared in <xdp/xsk.h>
            // or <xdp/libxdp.h> (<bpf/libbpf.h> for the print hook) with
            // the signature of the field it goes into.
            unsafe { std::mem::transmute::<*mut c_void, _>(p) }
        }};
    }
    Ok(Libxdp {
        xsk_umem__create: sym!(xdp, xsk_umem__create),
        xsk_umem__delete: sym!(xdp, xsk_umem__delete),
        xsk_socket__create: sym!(xdp, xsk_socket__create),
        xsk_socket__delete: sym!(xdp, xsk_socket__delete),
        xsk_socket__fd: sym!(xdp, xsk_socket__fd),
        xdp_multiprog__get_from_ifindex: sym!(xdp, xdp_multiprog__get_from_ifindex),
        xdp_multiprog__next_prog: sym!(xdp, xdp_multiprog__next_prog),
        xdp_multiprog__main_prog: sym!(xdp, xdp_multiprog__main_prog),
        xdp_multiprog__is_legacy: sym!(xdp, xdp_multiprog__is_legacy),
        xdp_multiprog__detach: sym!(xdp, xdp_multiprog__detach),
        xdp_multiprog__close: sym!(xdp, xdp_multiprog__close),
        xdp_program__name: sym!(xdp, xdp_program__name),
        libxdp_get_error: sym!(xdp, libxdp_get_error),
        libxdp_set_print: sym!(xdp, libxdp_set_print),
        libbpf_set_print: sym!(bpf, libbpf_set_print),
    })
}

impl XskRing {
    fn atomic(p: *mut u32) -> &'static AtomicU32 {
        // SAFETY: `p` points at a u32 index or flags word in a ring mapping
        // that libxdp set up and that outlives the ring handle (the caller
        // holds the owning socket/UMEM); `AtomicU32` has u32's layout.
        unsafe { &*(p as *const AtomicU32) }
    }

    /// True while the kernel waits for a wake-up on this ring.
    pub fn needs_wakeup(&self) -> bool {
        Self::atomic(self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer: free entries, at least `want` if there are that many
    /// (`xsk_prod_nb_free`).
    pub fn prod_free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = Self::atomic(self.consumer)
            .load(Ordering::Acquire)
            .wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Producer: reserve `n` entries; the index of the first, or `None`
    /// if there is no room for all (`xsk_ring_prod__reserve`).
    pub fn reserve(&mut self, n: u32) -> Option<u32> {
        if self.prod_free(n) < n {
            return None;
        }
        let at = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        Some(at)
    }

    /// Producer: publish `n` reserved entries (`xsk_ring_prod__submit`).
    pub fn submit(&mut self, n: u32) {
        let p = Self::atomic(self.producer);
        p.store(p.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Consumer: up to `max` entries ready; (index of the first, count)
    /// (`xsk_ring_cons__peek`).
    pub fn peek(&mut self, max: u32) -> (u32, u32) {
        let mut ready = self.cached_prod.wrapping_sub(self.cached_cons);
        if ready == 0 {
            self.cached_prod = Self::atomic(self.producer).load(Ordering::Acquire);
            ready = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        let n = ready.min(max);
        let at = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(n);
        (at, n)
    }

    /// Consumer: true if an entry is ready, without taking it (one load
    /// of the producer index when the cache is empty).
    pub fn has_entries(&mut self) -> bool {
        if self.cached_prod != self.cached_cons {
            return true;
        }
        self.cached_prod = Self::atomic(self.producer).load(Ordering::Acquire);
        self.cached_prod != self.cached_cons
    }

    /// Consumer: entries ready now (one load of the producer index).
    pub fn ready(&mut self) -> u32 {
        self.cached_prod = Self::atomic(self.producer).load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Consumer: hand `n` peeked entries back (`xsk_ring_cons__release`).
    pub fn release(&mut self, n: u32) {
        let c = Self::atomic(self.consumer);
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// The `u64` entry at `idx` of a fill or completion ring.
    ///
    /// # Safety
    /// The ring must be a fill or completion ring, and `idx` reserved
    /// (producer) or peeked (consumer) and not yet submitted/released.
    pub unsafe fn addr(&self, idx: u32) -> *mut u64 {
        // SAFETY: the caller's contract; `idx & mask` is inside the ring.
        unsafe { (self.ring as *mut u64).add((idx & self.mask) as usize) }
    }

    /// The descriptor at `idx` of an RX or TX ring.
    ///
    /// # Safety
    /// The ring must be an RX or TX ring, and `idx` reserved (producer) or
    /// peeked (consumer) and not yet submitted/released.
    pub unsafe fn desc(&self, idx: u32) -> *mut XdpDesc {
        // SAFETY: the caller's contract; `idx & mask` is inside the ring.
        unsafe { (self.ring as *mut XdpDesc).add((idx & self.mask) as usize) }
    }
}

extern "C" {
    fn vsnprintf(buf: *mut c_char, n: usize, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

/// libxdp's messages, as log lines of ours (target `libxdp`) instead of
/// its own lines on stderr: warnings and information as INFO (its
/// "warnings" include the normal "no dispatcher" of a legacy program),
/// debug as DEBUG; control characters escaped. What fails reaches the log
/// as our own error, from libxdp's return value.
unsafe extern "C" fn print_to_tracing(level: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    // SAFETY: libxdp's format and va_list, passed on.
    unsafe { print_at(level, fmt, ap) }
}

/// libbpf's messages: DEBUG whatever their level (its failures reach us,
/// and the log, through libxdp's messages and return values).
unsafe extern "C" fn print_libbpf(_level: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    // SAFETY: as print_to_tracing's.
    unsafe { print_at(2, fmt, ap) }
}

/// Format and log one message.
///
/// # Safety
/// `fmt` and `ap` are a printf format and its `va_list`, as the libraries
/// pass them.
unsafe fn print_at(level: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    let mut buf = [0 as c_char; 512];
    // SAFETY: libxdp passes a printf format and its va_list; the output is
    // bounded by the buffer and NUL-terminated by vsnprintf.
    let n = unsafe { vsnprintf(buf.as_mut_ptr(), buf.len(), fmt, ap) };
    // SAFETY: NUL-terminated above.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    let text = text.trim_end().escape_debug().to_string();
    match level {
        0 | 1 => tracing::info!(target: "libxdp", "{text}"),
        _ => tracing::debug!(target: "libxdp", "{text}"),
    }
    n
}

/// Route libxdp's and libbpf's messages to our log (once per process).
pub(crate) fn log_to_tracing(lib: &Libxdp) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: installs callbacks with the signature both libraries expect.
    ONCE.call_once(|| unsafe {
        (lib.libxdp_set_print)(Some(print_to_tracing));
        (lib.libbpf_set_print)(Some(print_libbpf));
    });
}
