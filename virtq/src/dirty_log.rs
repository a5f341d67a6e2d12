//! The vhost-user dirty-page log: one bit per 4 KiB page of guest-physical
//! memory, in a shared memory area the frontend gives the backend
//! (`VHOST_USER_SET_LOG_BASE` with `VHOST_USER_PROTOCOL_F_LOG_SHMFD`) and
//! reads while it migrates the guest. While logging is on
//! (`VHOST_F_LOG_ALL`), every write the backend makes into guest memory
//! marks its pages, so the frontend sends them again.
//!
//! Page `p` is bit `p % 8` of byte `p / 8`, as QEMU and DPDK lay it out.
//! Bits are set with atomic ORs: the frontend clears them concurrently
//! (QEMU takes each word with an atomic exchange).

use crate::mem::{MemError, MmapRegion};
use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Bytes of guest memory per bit of the log.
pub const LOG_PAGE: u64 = 4096;

/// Why a log area was refused.
#[derive(Debug, thiserror::Error)]
pub enum DirtyLogError {
    /// The area is empty, or does not fit in the file the frontend sent.
    #[error(
        "log area of {size} bytes at offset {offset} does not fit in its file of {file} bytes"
    )]
    DoesNotFit {
        /// `mmap_size` asked for.
        size: u64,
        /// `mmap_offset` asked for.
        offset: u64,
        /// The file's size.
        file: u64,
    },
    /// The file's size could not be read.
    #[error("cannot read the log file's size")]
    Stat(#[source] std::io::Error),
    /// The area could not be mapped.
    #[error("cannot map the log area")]
    Map(#[source] MemError),
}

/// A mapped dirty-page log (see the module documentation).
#[derive(Debug)]
pub struct DirtyLog {
    map: MmapRegion,
    /// Offset of the log's first byte in `map` (the frontend's offset need
    /// not be page-aligned).
    start: usize,
    /// Bytes of log: it covers `8 * len * LOG_PAGE` bytes of guest memory.
    len: u64,
    /// Marks that fell past the end of the log (a guest address the
    /// frontend's log does not cover): counted, never written.
    outside: AtomicU64,
}

// SAFETY: the mapping is only written through atomic operations on its
// bytes, and it lives as long as the `DirtyLog`.
unsafe impl Send for DirtyLog {}
// SAFETY: as above; `&DirtyLog` only does atomic ORs and loads.
unsafe impl Sync for DirtyLog {}

impl DirtyLog {
    /// Maps `size` bytes of `file` from `offset`, after checking that they
    /// lie inside the file: a frontend that sends a short file is refused
    /// rather than given a mapping whose end faults.
    pub fn map(file: &File, offset: u64, size: u64) -> Result<Self, DirtyLogError> {
        let file_len = file.metadata().map_err(DirtyLogError::Stat)?.len();
        let does_not_fit = DirtyLogError::DoesNotFit {
            size,
            offset,
            file: file_len,
        };
        let end = offset.checked_add(size).ok_or(does_not_fit)?;
        if size == 0 || end > file_len {
            return Err(DirtyLogError::DoesNotFit {
                size,
                offset,
                file: file_len,
            });
        }
        // mmap wants a page-aligned file offset: map from the page start.
        let page = 4096;
        let aligned = offset - offset % page;
        let start = (offset - aligned) as usize;
        let map =
            MmapRegion::map_file(file, aligned, size + start as u64).map_err(DirtyLogError::Map)?;
        Ok(DirtyLog {
            map,
            start,
            len: size,
            outside: AtomicU64::new(0),
        })
    }

    /// Bytes of guest-physical memory the log covers, from address 0.
    pub fn covers(&self) -> u64 {
        self.len.saturating_mul(8 * LOG_PAGE)
    }

    /// Marks every page that `[gpa, gpa + len)` touches. A range past the
    /// log's end is counted ([`DirtyLog::outside`]) and not written.
    pub fn mark(&self, gpa: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = gpa / LOG_PAGE;
        let last = gpa.saturating_add(len - 1) / LOG_PAGE;
        for page in first..=last {
            let byte = page / 8;
            if byte >= self.len {
                self.outside.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.byte(byte).fetch_or(1 << (page % 8), Ordering::Relaxed);
        }
    }

    /// Whether the page holding `gpa` is marked.
    pub fn is_marked(&self, gpa: u64) -> bool {
        let page = gpa / LOG_PAGE;
        page / 8 < self.len && self.byte(page / 8).load(Ordering::Relaxed) & (1 << (page % 8)) != 0
    }

    /// Takes every mark, as a frontend syncing its log does (an atomic
    /// exchange with 0 per byte, so no concurrent mark is lost), calling
    /// `marked` with the guest-physical address of each marked page.
    /// Returns how many there were.
    pub fn drain(&self, mut marked: impl FnMut(u64)) -> u64 {
        let mut n = 0;
        for i in 0..self.len {
            let byte = self.byte(i);
            if byte.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let bits = byte.swap(0, Ordering::Relaxed);
            for b in 0..8 {
                if bits & (1 << b) != 0 {
                    marked((i * 8 + b) * LOG_PAGE);
                    n += 1;
                }
            }
        }
        n
    }

    /// The mapping the log lives in: its first byte and its length in
    /// bytes (page-aligned start; the log itself may begin inside it). For
    /// a backend that guards the mapping against its file shrinking.
    pub fn mapping(&self) -> (*const u8, usize) {
        (self.map.as_ptr(), self.map.len() as usize)
    }

    /// Marks that fell outside the log so far.
    pub fn outside(&self) -> u64 {
        self.outside.load(Ordering::Relaxed)
    }

    fn byte(&self, i: u64) -> &AtomicU8 {
        debug_assert!(i < self.len);
        // SAFETY: `i < len`, and `start + len` bytes are mapped; AtomicU8
        // has the alignment and size of u8.
        unsafe { &*(self.map.as_ptr().add(self.start + i as usize) as *const AtomicU8) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn memfd(size: u64) -> File {
        // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"vadapt-log-test".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        let f = unsafe { File::from_raw_fd(fd) };
        f.set_len(size).unwrap();
        f
    }

    #[test]
    fn a_range_marks_every_page_it_touches_and_nothing_else() {
        let f = memfd(8192);
        let log = DirtyLog::map(&f, 100, 16).unwrap();
        assert_eq!(log.covers(), 16 * 8 * LOG_PAGE);
        log.mark(LOG_PAGE - 1, 2); // pages 0 and 1
        log.mark(10 * LOG_PAGE, 1); // page 10
        for p in 0..128 {
            let want = [0, 1, 10].contains(&p);
            assert_eq!(log.is_marked(p * LOG_PAGE + 7), want, "page {p}");
        }
        // The bits are where the frontend looks: byte 0 = pages 0..8.
        let mut b = [0u8; 2];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, 100).unwrap();
        assert_eq!(b, [0b11, 0b100]);
        log.mark(0, 0);
        assert_eq!(log.outside(), 0);
        log.mark(128 * LOG_PAGE, 1);
        assert_eq!(log.outside(), 1, "past the end: counted, not written");
        log.mark(u64::MAX - 2, 10);
        assert_eq!(
            log.outside(),
            2,
            "no overflow at the top of the address space"
        );
    }

    #[test]
    fn a_drain_takes_every_mark_once() {
        let f = memfd(4096);
        let log = DirtyLog::map(&f, 0, 4).unwrap();
        for p in [0, 7, 8, 31] {
            log.mark(p * LOG_PAGE, 1);
        }
        let mut got = vec![];
        assert_eq!(log.drain(|gpa| got.push(gpa / LOG_PAGE)), 4);
        assert_eq!(got, [0, 7, 8, 31]);
        assert!(!log.is_marked(0) && !log.is_marked(31 * LOG_PAGE));
        assert_eq!(log.drain(|_| panic!("nothing is left")), 0);
    }

    #[test]
    fn an_area_that_does_not_fit_its_file_is_refused() {
        let f = memfd(4096);
        for (offset, size) in [(0, 4097), (4000, 100), (0, 0), (u64::MAX, 2)] {
            assert!(
                matches!(
                    DirtyLog::map(&f, offset, size),
                    Err(DirtyLogError::DoesNotFit { .. })
                ),
                "{offset} {size}"
            );
        }
        assert!(DirtyLog::map(&f, 4095, 1).is_ok());
    }
}
