//! One WARN line when a frontend starts rings over guest memory that
//! vadapt cannot share with it, the commonest way to get a VM whose NIC is
//! silently dead (issue 30, obstacle 4).
//!
//! Two cases are told apart:
//!
//! * **No memory table.** QEMU without a shared memory backend (plain `-m`,
//!   `memory-backend-ram`) has no file to send: QEMU 7.2 negotiates the
//!   features and sends ring addresses (refused: they translate through no
//!   memory), and never a memory table nor an enable.
//! * **A memory table of files nobody wrote.** QEMU with
//!   `memory-backend-memfd,share=off` (or `-file,share=off`) sends the
//!   files, but maps them privately itself: every write of the guest lands
//!   in QEMU's private copies, and the files stay zero (reads fault zero
//!   pages into them, so they are not even empty). By the time a frontend
//!   starts a ring, a guest whose memory is shared has written to it (its
//!   kernel, its rings). So when every page of every region's file that is
//!   in the page cache holds only zeros, the memory is not shared.
//!   `mincore(2)` on vadapt's own shared mappings says which pages are
//!   there; pages that are not are never touched (a read would allocate
//!   them). The scan stops at the first non-zero word, so shared memory
//!   costs a page or two; unshared memory is read once per memory table.
//!   Hugetlbfs memory is not judged (no line): `mincore` on a hugetlb
//!   mapping says only what this mapping touched, so it cannot tell.
//!
//! The first case is told when ring 0's addresses are refused, the second
//! when a ring starts (QEMU 7.2 sends its enables before the features and
//! the memory table, so an enable is no moment to look): one line per
//! device start, not one per ring. Both were seen with QEMU 7.2 and a
//! Linux guest here.

use super::vm_port::VmPort;
use std::collections::BTreeMap;
use std::sync::Mutex;
use vadapt_virtq::mem::MappedRegion;

/// What is wrong with the memory a frontend enables rings over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unshared {
    /// No `SET_MEM_TABLE` / `ADD_MEM_REG` before the rings were enabled.
    NoMemoryTable,
    /// Regions were sent, but none of their pages was ever written through
    /// a shared mapping.
    NeverWritten,
}

/// The WARN line for a refused `SET_VRING_ADDR` on `port`: without a memory
/// table, that is the one sign QEMU without shared memory gives (it sends
/// ring addresses, and no enable); once, for ring 0.
pub fn check_ring_addr_refused(port: &VmPort, index: u32, regions: &[MappedRegion]) {
    if index == 0 && regions.is_empty() {
        warn(port, Unshared::NoMemoryTable);
    }
}

/// The WARN line when rings of `port` start over `regions` that the
/// frontend never wrote through a shared mapping; looked at once per memory
/// table (the worker restarts with every ring change).
pub fn check_rings_started(port: &VmPort, regions: &[MappedRegion]) {
    let Some(first) = regions.first() else {
        return;
    };
    // The memory table each port was last looked at for, by the address of
    // its first mapping: a new connection or table is looked at again.
    static SEEN: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());
    let table = first.mapping.as_ptr() as usize;
    {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if seen.get(port.name()) == Some(&table) {
            return;
        }
        // Bounded however many port names come and go: forgetting only
        // means a table is looked at once more.
        if seen.len() >= MAX_REMEMBERED_PORTS {
            seen.clear();
        }
        seen.insert(port.name().to_owned(), table);
    }
    if find(regions) == Some(Unshared::NeverWritten) {
        warn(port, Unshared::NeverWritten);
    }
}

/// Whether `regions` are memory a frontend shares with vadapt.
pub fn find(regions: &[MappedRegion]) -> Option<Unshared> {
    if regions.is_empty() {
        return Some(Unshared::NoMemoryTable);
    }
    // Unknown (mincore failed) counts as written: never warn on a guess.
    let written = regions.iter().any(|r| any_data(r).unwrap_or(true));
    (!written).then_some(Unshared::NeverWritten)
}

/// The line, through the port's limits: a frontend can send refused ring
/// addresses, or new memory tables, in a loop.
fn warn(port: &VmPort, why: Unshared) {
    let what = match why {
        Unshared::NoMemoryTable => "set up its rings without sending a memory table",
        Unshared::NeverWritten => {
            "started its rings over guest memory it never wrote through a shared mapping"
        }
    };
    let Some(held_back) = port.may_log("guest memory not shared") else {
        return;
    };
    tracing::warn!(
        port = port.name(),
        held_back,
        "the frontend {what}: its guest memory is not shared with vadapt, and this port will \
         move no packets. Give the VM shared memory: QEMU `-object \
         memory-backend-memfd,id=mem,size=...,share=on -numa node,memdev=mem`; libvirt \
         `<memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>`"
    );
}

/// Ports whose last memory table [`check_rings_started`] remembers.
const MAX_REMEMBERED_PORTS: usize = 4096;

/// Pages whose residency one `mincore` call asks for.
const PAGES_PER_CALL: usize = 4096;

/// Whether any page of `r`'s mapping that is in the page cache holds a
/// non-zero byte: `Some(false)` when none does, `None` when the kernel
/// would not say which pages are there. For hugetlbfs memory it never
/// does: `mincore` on a hugetlb mapping reports only the pages this
/// mapping has touched itself, not those the guest wrote through QEMU's.
fn any_data(r: &MappedRegion) -> Option<bool> {
    if r.mapping
        .file()
        .and_then(super::memory_file::hugepage_size)
        .is_some()
    {
        return None;
    }
    // SAFETY: sysconf has no memory effects.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    let base = r.mapping.as_ptr() as usize;
    let len = usize::try_from(r.mapping.len()).ok()?;
    if page == 0 || base % page != 0 || page % 8 != 0 {
        return None;
    }
    let mut resident = vec![0u8; PAGES_PER_CALL];
    let mut at = 0usize;
    while at < len {
        let n = (len - at).min(PAGES_PER_CALL * page);
        // SAFETY: [base + at, base + at + n) lies inside the mapping `r`
        // keeps alive (`at < len`, `n <= len - at`), `base` is page-aligned
        // and so is `at` (a multiple of the chunk size), and `resident` has
        // room for one byte per page of the range. mincore only reads page
        // tables; it does not touch the pages.
        let rc = unsafe {
            libc::mincore(
                (base + at) as *mut libc::c_void,
                n,
                resident.as_mut_ptr().cast::<libc::c_uchar>(),
            )
        };
        if rc != 0 {
            return None;
        }
        for (i, flag) in resident[..n.div_ceil(page)].iter().enumerate() {
            let start = base + at + i * page;
            if flag & 1 != 0 && !page_is_zero(start, page.min(base + len - start)) {
                return Some(true);
            }
        }
        at += n;
    }
    Some(false)
}

/// Whether the `len` bytes at `addr` (a resident page of a mapping) are all zero.
fn page_is_zero(addr: usize, len: usize) -> bool {
    (0..len / 8).all(|w| {
        // SAFETY: `addr + 8 * w + 8 <= addr + len`, inside a page of a live
        // shared mapping that mincore found resident, 8-byte aligned (a
        // page start plus a multiple of 8); a volatile read, since the
        // frontend may write the page meanwhile (any value it reads is
        // fine: the answer is a hint).
        unsafe { std::ptr::read_volatile((addr + 8 * w) as *const u64) == 0 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use vadapt_virtq::mem::MmapRegion;

    fn region_of(file: &std::fs::File, len: u64) -> MappedRegion {
        MappedRegion {
            gpa: 0,
            uva: 0x7000_0000,
            size: len,
            mapping: Arc::new(MmapRegion::map_file(file, 0, len).unwrap()),
            offset: 0,
        }
    }

    #[test]
    fn no_table_and_never_written_files_are_unshared_written_ones_are_not() {
        assert_eq!(find(&[]), Some(Unshared::NoMemoryTable));
        let len = 8 << 20;
        let mut file = tempfile::tempfile().unwrap();
        file.set_len(len).unwrap();
        // A sparse file nobody wrote: what QEMU's share=off leaves behind,
        // then with zero pages in the page cache (a private mapping's reads
        // put them there).
        let empty = region_of(&file, len);
        let never = Some(Unshared::NeverWritten);
        assert_eq!(find(std::slice::from_ref(&empty)), never);
        file.write_all(&[0u8; 8192]).unwrap();
        assert_eq!(find(std::slice::from_ref(&empty)), never);
        // One page written, far from the start.
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(len - 4096)).unwrap();
        file.write_all(&[1u8; 4096]).unwrap();
        let written = region_of(&file, len);
        assert_eq!(find(&[written]), None);
    }
}
