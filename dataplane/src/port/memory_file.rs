//! Checks on a frontend's guest-memory file before the daemon maps it: a
//! memory region's, and the dirty-page log's (see [`super::log_base`]),
//! which is guest memory too.
//!
//! Mapping a file and touching a page past its end raises SIGBUS, which
//! kills the whole daemon (every VM loses its network). Two ways a frontend
//! can cause that:
//!
//! - a region announced larger than its file (`mmap_offset + memory_size`
//!   past the end): refused here, from `fstat`;
//! - a file that shrinks after it was mapped (`ftruncate`): refused here
//!   unless the file is sealed against shrinking (`F_SEAL_SHRINK`, which
//!   QEMU's `memory-backend-memfd` sets by default and vadapt's synthetic
//!   guest sets too). A port configured with `unsealed_memory = "accept"`
//!   (DPDK's virtio-user, QEMU's `memory-backend-file`) takes unsealed files
//!   anyway; there [`crate::sigbus_guard`] survives a shrink and the port is
//!   reset.
//!
//! Why both: the size check costs nothing and stops the common mistake; the
//! seal makes a later shrink impossible, which no check at mapping time can;
//! the guard is the fallback where sealing cannot be required.

use crate::config::UnsealedMemory;
use std::fs::File;
use std::os::fd::AsRawFd;

/// Why a region's file was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemoryFileError {
    /// The region (or log area) reaches past the end of its file.
    #[error("needs {needed} bytes of its file but the file has {size}")]
    TooSmall {
        /// `mmap_offset + memory_size`.
        needed: u64,
        /// The file's size.
        size: u64,
    },
    /// `mmap_offset + memory_size` overflows.
    #[error("region offset + size overflows")]
    Overflow,
    /// The file is not sealed against shrinking and the port refuses that.
    #[error(
        "the file is not sealed against shrinking (F_SEAL_SHRINK, which only a memfd can have); \
         use a sealed memfd (QEMU's memory-backend-memfd and its dirty log are; for \
         hugepages, memory-backend-memfd with hugetlb=on, libvirt's <hugepages/> with \
         <source type='memfd'/>) or set unsealed_memory = \"accept\" on the port"
    )]
    Unsealed,
    /// `fstat` failed.
    #[error("cannot stat the guest memory file: {0}")]
    Stat(String),
}

/// Check that `file` can back a region of `memory_size` bytes at
/// `mmap_offset`, under `policy` for unsealed files. Returns whether the
/// file is sealed against shrinking.
pub fn check(
    file: &File,
    mmap_offset: u64,
    memory_size: u64,
    policy: UnsealedMemory,
) -> Result<bool, MemoryFileError> {
    let needed = mmap_offset
        .checked_add(memory_size)
        .ok_or(MemoryFileError::Overflow)?;
    let size = file
        .metadata()
        .map_err(|e| MemoryFileError::Stat(e.to_string()))?
        .len();
    if needed > size {
        return Err(MemoryFileError::TooSmall { needed, size });
    }
    let sealed = seals(file) & libc::F_SEAL_SHRINK != 0;
    if !sealed && policy == UnsealedMemory::Refuse {
        return Err(MemoryFileError::Unsealed);
    }
    Ok(sealed)
}

/// `statfs(2)`'s `f_type` of hugetlbfs (`HUGETLBFS_MAGIC`, linux/magic.h).
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;

/// The size of the pages backing `file` when it lives on hugetlbfs (a
/// file in a hugetlbfs mount, or a memfd made with `MFD_HUGETLB`, as QEMU's
/// `hugetlb=on` makes): 2 MiB or 1 GiB. `None` for any other file, whose
/// pages are the system's. A hugetlb mapping can be split only at its
/// page size, which the SIGBUS guard must respect.
pub fn hugepage_size(file: &File) -> Option<u64> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs writes one statfs into `st`, which has room for it,
    // for the descriptor `file` keeps open for the call.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
    let hugetlb = st.f_type as i64 == HUGETLBFS_MAGIC;
    (hugetlb && st.f_bsize > 0).then_some(st.f_bsize as u64)
}

/// The file's seals (0 for a file that cannot be sealed, such as one on
/// hugetlbfs or tmpfs opened by path).
fn seals(file: &File) -> libc::c_int {
    // SAFETY: F_GET_SEALS takes no argument beyond the descriptor, which
    // `file` keeps open for the call; it returns the seals or -1 (EINVAL
    // for files that are not memfds).
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    r.max(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A memfd of `size` bytes, sealed against shrinking if `seal` (guest
    /// memory and dirty-log tests).
    pub(crate) fn memfd(size: u64, seal: bool) -> File {
        let flags = if seal { libc::MFD_ALLOW_SEALING } else { 0 };
        // SAFETY: the name is a NUL-terminated literal; the result is checked.
        let fd = unsafe { libc::memfd_create(c"vadapt-test".as_ptr(), flags) };
        assert!(fd >= 0);
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let f = unsafe { File::from_raw_fd(fd) };
        f.set_len(size).unwrap();
        if seal {
            // SAFETY: F_ADD_SEALS with an integer argument on our own memfd.
            let r = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
            assert_eq!(r, 0);
        }
        f
    }

    #[test]
    fn a_region_past_the_end_of_its_file_is_refused() {
        let f = memfd(4 << 20, true);
        let e = check(&f, 0, 8 << 20, UnsealedMemory::Refuse).unwrap_err();
        assert_eq!(
            e,
            MemoryFileError::TooSmall {
                needed: 8 << 20,
                size: 4 << 20
            }
        );
        assert_eq!(
            check(&f, 1 << 20, 3 << 20, UnsealedMemory::Refuse),
            Ok(true)
        );
        assert!(check(&f, 1 << 20, 3 << 20 | 1, UnsealedMemory::Refuse).is_err());
        assert_eq!(
            check(&f, u64::MAX, 2, UnsealedMemory::Refuse),
            Err(MemoryFileError::Overflow)
        );
    }

    #[test]
    fn an_ordinary_memfd_is_not_on_hugetlbfs() {
        assert_eq!(hugepage_size(&memfd(1 << 20, true)), None);
    }

    #[test]
    fn unsealed_files_follow_the_port_setting() {
        let f = memfd(1 << 20, false);
        assert_eq!(
            check(&f, 0, 1 << 20, UnsealedMemory::Refuse),
            Err(MemoryFileError::Unsealed)
        );
        assert_eq!(check(&f, 0, 1 << 20, UnsealedMemory::Accept), Ok(false));
        // A sealed file cannot shrink any more.
        let s = memfd(1 << 20, true);
        assert!(s.set_len(4096).is_err());
        assert_eq!("accept".parse(), Ok(UnsealedMemory::Accept));
        assert!("maybe".parse::<UnsealedMemory>().is_err());
    }
}
