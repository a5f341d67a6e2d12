//! A port's guest memory as the frontend describes it: the memory table
//! (`SET_MEM_TABLE`), and regions added and removed while the guest runs
//! (`ADD_MEM_REG`, `REM_MEM_REG`: memory hotplug). Every region gets the
//! same checks (see [`super::memory_file`]); the worker stops and restarts
//! around each change.

use super::handler::{Connection, MAX_REGIONS};
use super::memory_file;
use std::fs::File;
use std::sync::Arc;
use vadapt_virtq::mem::{GuestMemory, MappedRegion, MmapRegion};
use vhost::vhost_user::message::{VhostUserMemoryRegion, VhostUserSingleMemoryRegion};
use vhost::vhost_user::{Error as VhostError, Result as VhostResult};

impl Connection {
    /// `SET_MEM_TABLE`: the whole table, replacing the one before.
    pub(super) fn set_memory_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
    ) -> VhostResult<()> {
        if ctx.len() != files.len() || ctx.is_empty() || ctx.len() > MAX_REGIONS {
            return Err(VhostError::InvalidParam);
        }
        let mut regions = Vec::with_capacity(ctx.len());
        let mut guards = Vec::new();
        for (i, (r, f)) in ctx.iter().zip(&files).enumerate() {
            let (region, guard) =
                self.map_region(&format!("memory table refused: region {i}"), r, f)?;
            guards.extend(guard.map(|g| (r.guest_phys_addr, g)));
            regions.push(region);
        }
        let mem = GuestMemory::from_mapped(regions.clone()).map_err(|e| {
            if let Some(held_back) = self.port.may_log("memory table rejected") {
                tracing::warn!(port = self.port.name(), error = %e, held_back, "memory table rejected");
            }
            VhostError::InvalidParam
        })?;
        self.stop_worker();
        self.regions = regions;
        // Old guards go before the old mappings they cover.
        *self
            .port
            .mem_guards
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = guards;
        let total: u64 = mem.regions().iter().map(|r| r.size).sum();
        if let Some(held_back) = self.port.may_log("guest memory mapped") {
            tracing::info!(
                port = self.port.name(),
                regions = mem.regions().len(),
                bytes = total,
                held_back,
                "guest memory mapped"
            );
        }
        self.mem = Some(mem);
        self.publish_memory();
        self.start_worker();
        Ok(())
    }

    /// `ADD_MEM_REG`: one more region, at most [`MAX_REGIONS`].
    pub(super) fn add_region(
        &mut self,
        region: &VhostUserSingleMemoryRegion,
        fd: File,
    ) -> VhostResult<()> {
        if self.regions.len() >= MAX_REGIONS {
            if let Some(held_back) = self.port.may_log("ADD_MEM_REG refused") {
                tracing::warn!(
                    port = self.port.name(),
                    held_back,
                    "ADD_MEM_REG refused: all {MAX_REGIONS} slots used"
                );
            }
            return Err(VhostError::InvalidParam);
        }
        let r: &VhostUserMemoryRegion = region;
        // Copied out: the message is packed.
        let (gpa, bytes) = (r.guest_phys_addr, r.memory_size);
        let (mapped, guard) = self.map_region("memory region refused", r, &fd)?;
        let mut regions = self.regions.clone();
        regions.push(mapped);
        // Overlaps are refused here, before anything changes.
        self.remap(regions)?;
        if let Some(g) = guard {
            self.port
                .mem_guards
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((gpa, g));
        }
        if let Some(held_back) = self.port.may_log("guest memory region added") {
            tracing::info!(
                port = self.port.name(),
                gpa = format_args!("{gpa:#x}"),
                bytes,
                regions = self.regions.len(),
                held_back,
                "guest memory region added"
            );
        }
        Ok(())
    }

    /// `REM_MEM_REG`: a region goes, unless a ring lies in it.
    pub(super) fn remove_region(
        &mut self,
        region: &VhostUserSingleMemoryRegion,
    ) -> VhostResult<()> {
        // Copied out: the message is packed.
        let (gpa, size, uva) = (region.guest_phys_addr, region.memory_size, region.user_addr);
        let Some(i) = self.regions.iter().position(|m| {
            m.gpa == region.guest_phys_addr
                && m.size == region.memory_size
                && m.uva == region.user_addr
        }) else {
            if let Some(held_back) = self.port.may_log("REM_MEM_REG refused") {
                tracing::warn!(
                    port = self.port.name(),
                    gpa = format_args!("{gpa:#x}"),
                    held_back,
                    "REM_MEM_REG refused: no such region"
                );
            }
            return Err(VhostError::InvalidParam);
        };
        if let Some(ring) = self.ring_in(uva, size) {
            if let Some(held_back) = self.port.may_log("REM_MEM_REG refused") {
                tracing::warn!(
                    port = self.port.name(),
                    ring,
                    gpa = format_args!("{gpa:#x}"),
                    held_back,
                    "REM_MEM_REG refused: a ring lies in the region"
                );
            }
            return Err(VhostError::InvalidParam);
        }
        let mut regions = self.regions.clone();
        regions.remove(i);
        self.remap(regions)?;
        // The guard goes after the worker stopped using the mapping.
        self.port
            .mem_guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(g, _)| *g != gpa);
        if let Some(held_back) = self.port.may_log("guest memory region removed") {
            tracing::info!(
                port = self.port.name(),
                gpa = format_args!("{gpa:#x}"),
                regions = self.regions.len(),
                held_back,
                "guest memory region removed"
            );
        }
        Ok(())
    }

    /// Map one region of guest memory from `f`, after the checks every
    /// region gets (see [`memory_file`]): never what could SIGBUS the
    /// daemon, or, for an unsealed file the port accepts, under a SIGBUS
    /// guard (returned). A refusal ends the connection, `what` saying why.
    fn map_region(
        &mut self,
        what: &str,
        r: &VhostUserMemoryRegion,
        f: &File,
    ) -> VhostResult<(MappedRegion, Option<crate::sigbus_guard::Guard>)> {
        let mut refuse = |e: &dyn std::fmt::Display| {
            let msg = format!("{what}: {e}");
            if let Some(held_back) = self.port.may_log("guest memory refused") {
                tracing::error!(
                    port = self.port.name(),
                    held_back,
                    "{msg}; closing the connection"
                );
            }
            self.fatal = Some(msg);
            VhostError::InvalidParam
        };
        let sealed = memory_file::check(
            f,
            r.mmap_offset,
            r.memory_size,
            self.port.cfg.unsealed_memory,
        )
        .map_err(|e| refuse(&e))?;
        let len = r.mmap_offset + r.memory_size; // checked above
        let mapping = MmapRegion::map_file(f, 0, len).map_err(|e| {
            if let Some(held_back) = self.port.may_log("cannot map guest memory") {
                tracing::warn!(port = self.port.name(), error = %e, held_back, "cannot map guest memory region");
            }
            VhostError::InvalidParam
        })?;
        let guard = if sealed {
            None
        } else {
            Some(
                crate::sigbus_guard::guard(
                    mapping.as_ptr(),
                    mapping.len() as usize,
                    memory_file::hugepage_size(f),
                )
                .map_err(|e| refuse(&e))?,
            )
        };
        let region = MappedRegion {
            gpa: r.guest_phys_addr,
            uva: r.user_addr,
            size: r.memory_size,
            mapping: Arc::new(mapping),
            offset: r.mmap_offset,
        };
        Ok((region, guard))
    }

    /// Make guest memory of `regions`, and serve the rings over it from now
    /// on (the worker stops and restarts around the change).
    fn remap(&mut self, regions: Vec<MappedRegion>) -> VhostResult<()> {
        let mem = if regions.is_empty() {
            None
        } else {
            Some(GuestMemory::from_mapped(regions.clone()).map_err(|e| {
                if let Some(held_back) = self.port.may_log("memory region rejected") {
                    tracing::warn!(port = self.port.name(), error = %e, held_back, "memory region rejected");
                }
                VhostError::InvalidParam
            })?)
        };
        self.reconfigure(|c| {
            c.mem = mem;
            c.regions = regions;
        });
        self.publish_memory();
        Ok(())
    }

    /// Shows the guest memory mapped now in the port's counters (`vadapt
    /// stats`: `memory_regions`, `memory_bytes`).
    pub(super) fn publish_memory(&self) {
        let (n, bytes) = self.mem.as_ref().map_or((0, 0), |m| {
            (
                m.regions().len() as u64,
                m.regions().iter().map(|r| r.size).sum(),
            )
        });
        let s = &self.port.stats;
        s.memory_regions
            .store(n, std::sync::atomic::Ordering::Relaxed);
        s.memory_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The first running ring whose descriptor table, available or used
    /// ring lies in frontend addresses `[uva, uva + size)`.
    fn ring_in(&self, uva: u64, size: u64) -> Option<usize> {
        let inside = |a: u64| a >= uva && a - uva < size;
        self.vrings.iter().position(|v| {
            v.addrs
                .is_some_and(|(desc, used, avail)| inside(desc) || inside(used) || inside(avail))
        })
    }
}
