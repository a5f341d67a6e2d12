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
