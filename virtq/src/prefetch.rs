//! A hint to the CPU to load a cache line before it is read: the one
//! place the crate asks for it (descriptors ahead of `pop`, frames ahead
//! of their copy).

/// A prefetch of the cache line holding `p` into all cache levels; nothing
/// on targets without one.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint. It never faults, whatever the address
    // (valid, unmapped or null), and neither reads into a register nor
    // writes; so no pointer here can make it unsound. The callers pass
    // pointers inside checked guest segments anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    /// The `unsafe` above rests on PREFETCHT0 never faulting: a null
    /// pointer, an address no mapping covers and one past a live buffer
    /// are all taken without a signal (a fault would end the test run).
    #[test]
    fn a_prefetch_of_any_address_never_faults() {
        let buf = [0u8; 64];
        prefetch(std::ptr::null());
        prefetch(usize::MAX as *const u8);
        prefetch(0xdead_0000_0000usize as *const u8);
        prefetch(buf.as_ptr().wrapping_add(1 << 30));
        prefetch(buf.as_ptr());
    }
}
