//! Dirty-page logging from the frontend's side, as QEMU runs it during a
//! live migration (`--dirty-log`): the guest acks `VHOST_F_LOG_ALL`, gives
//! the backend a shared log (`SET_LOG_BASE` over
//! `VHOST_USER_PROTOCOL_F_LOG_SHMFD`) and starts its rings with
//! `VHOST_VRING_F_LOG`; while it runs, it takes the backend's marks every
//! watch period ([`FrontendLog::sync`]), as QEMU's migration thread does
//! each dirty-sync round.
//!
//! It also checks the backend: the bytes only the device writes (the used
//! rings, the receive buffers) are copied when logging starts, and at the
//! end ([`FrontendLog::check`], after `GET_VRING_BASE`, when the backend's
//! log must be complete) every page in which one of them changed must have
//! been marked. A page changed and never marked is one a migration would
//! not have sent again: the destination's guest would read stale memory.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};

use vadapt_virtq::mem::GuestMemory;
use vadapt_virtq::{DirtyLog, LOG_PAGE};
use vhost::VhostUserDirtyLogRegion;

use crate::metrics::DirtyLogReport;

/// The frontend's log and its check (see the module documentation).
#[derive(Debug)]
pub struct FrontendLog {
    file: File,
    log: DirtyLog,
    size: u64,
    /// Every page marked since logging started, one bit per page.
    ever: Vec<u64>,
    /// Device-written ranges (guest-physical start) and their bytes when
    /// logging started.
    watched: Vec<(u64, Vec<u8>)>,
    report: DirtyLogReport,
}

impl FrontendLog {
    /// A log covering `mem_size` bytes of guest memory from address 0.
    pub fn new(mem_size: u64) -> std::io::Result<FrontendLog> {
        let pages = mem_size.div_ceil(LOG_PAGE);
        let size = pages.div_ceil(64) * 8; // whole u64 words, as QEMU sizes it
                                           // SAFETY: a NUL-terminated name; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"vadapt-guest-dirty-log".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size)?;
        // Sealed against shrinking and growing, as QEMU seals its log
        // (`vhost_log_alloc`): a backend maps only a log that cannot
        // shrink under it.
        // SAFETY: F_ADD_SEALS takes an integer argument; `fd` is ours.
        let r = unsafe {
            libc::fcntl(
                fd,
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let log = DirtyLog::map(&file, 0, size).map_err(std::io::Error::other)?;
        Ok(FrontendLog {
            file,
            log,
            size,
            ever: vec![0; pages.div_ceil(64) as usize],
            watched: vec![],
            report: DirtyLogReport::default(),
        })
    }

    /// The area to give the backend with `SET_LOG_BASE`.
    pub fn region(&self) -> VhostUserDirtyLogRegion {
        VhostUserDirtyLogRegion {
            mmap_size: self.size,
            mmap_offset: 0,
            mmap_handle: self.file.as_raw_fd(),
        }
    }

    /// Watches `[gpa, gpa + len)`, bytes only the device writes: copies
    /// them now, for [`FrontendLog::check`].
    pub fn watch(&mut self, mem: &GuestMemory, gpa: u64, len: u64) {
        let mut before = vec![0u8; len as usize];
        if mem.read(gpa, &mut before).is_ok() {
            self.watched.push((gpa, before));
        }
    }

    /// Takes the backend's marks, as a migration's dirty-sync round does.
    pub fn sync(&mut self) {
        let ever = &mut self.ever;
        self.report.marks_synced += self.log.drain(|gpa| {
            let page = gpa / LOG_PAGE;
            if let Some(w) = ever.get_mut((page / 64) as usize) {
                *w |= 1 << (page % 64);
            }
        });
        self.report.syncs += 1;
    }

    /// Takes the last marks and checks every watched page (see the module
    /// documentation). Call once the backend stopped the rings.
    pub fn check(&mut self, mem: &GuestMemory) -> DirtyLogReport {
        self.sync();
        let (mut changed, mut missed) = (0, 0);
        for (gpa, before) in &self.watched {
            let mut now = vec![0u8; before.len()];
            if mem.read(*gpa, &mut now).is_err() {
                continue;
            }
            let end = gpa + before.len() as u64;
            let mut page = gpa / LOG_PAGE;
            while page * LOG_PAGE < end {
                let lo = (page * LOG_PAGE).max(*gpa);
                let hi = ((page + 1) * LOG_PAGE).min(end);
                let (a, b) = ((lo - gpa) as usize, (hi - gpa) as usize);
                if before[a..b] != now[a..b] {
                    changed += 1;
                    let marked = self
                        .ever
                        .get((page / 64) as usize)
                        .is_some_and(|w| w & (1 << (page % 64)) != 0);
                    if !marked {
                        missed += 1;
                    }
                }
                page += 1;
            }
        }
        self.report.device_pages_changed = changed;
        self.report.device_pages_missed = missed;
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_page_counts_as_missed_until_it_is_marked() {
        let (mem, _fd) = GuestMemory::new_memfd(4 * LOG_PAGE).unwrap();
        let mut log = FrontendLog::new(4 * LOG_PAGE).unwrap();
        // Two pages watched, from the middle of page 1 to the middle of page 3.
        log.watch(&mem, LOG_PAGE + 100, 2 * LOG_PAGE);
        mem.write(LOG_PAGE + 200, &[1]).unwrap(); // page 1, marked below
        mem.write(3 * LOG_PAGE + 10, &[1]).unwrap(); // page 3, not marked
        mem.write(10, &[1]).unwrap(); // page 0: not watched
        log.log.mark(LOG_PAGE + 200, 1);
        log.sync();
        let r = log.check(&mem);
        assert_eq!((r.device_pages_changed, r.device_pages_missed), (2, 1));
        assert_eq!((r.marks_synced, r.syncs), (1, 2));
    }
}
