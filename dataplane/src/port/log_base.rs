//! `SET_LOG_BASE`: the frontend's dirty-page log, which a port maps as it
//! maps guest memory, because it is guest memory: a shared file the
//! frontend holds too, and can shrink under the daemon. Found with an
//! unsealed 512-byte memfd truncated under a running ring: SIGBUS, and
//! every VM's network gone with the daemon (issue 36).
//!
//! So the log gets what every guest-memory region gets:
//!
//! - [`memory_file::check`], the same check (not a second one): the area
//!   the frontend claims (`mmap_offset + mmap_size`) must lie inside the
//!   file, and the file must be sealed against shrinking (QEMU seals its
//!   log memfd with `F_SEAL_SHRINK`, as vadapt's synthetic guest does),
//!   unless the port says `unsealed_memory = "accept"`. A regular file, a
//!   pipe or anything else that is not a sealed memfd is refused the way an
//!   unsealed memory region is;
//! - on a port that accepts unsealed files, the mapping under
//!   [`crate::sigbus_guard`]: a shrink then ends logging for the port with
//!   one ERROR line and a count ([`crate::migration::MappedLog`]), and the
//!   daemon and every other port go on.
//!
//! A refused log ends the connection: the frontend waits for an answer to
//! `SET_LOG_BASE` that cannot say "no" (QEMU reads the reply and ignores
//! its contents), so closing is the one refusal it sees.

use super::handler::Connection;
use super::memory_file::{self, MemoryFileError};
use crate::migration::MappedLog;
use crate::sigbus_guard::{self, GuardError};
use std::fs::File;
use std::sync::Arc;
use vadapt_virtq::{DirtyLog, DirtyLogError};
use vhost::vhost_user::{Error as VhostError, Result as VhostResult};

/// Why a log was refused.
#[derive(Debug, thiserror::Error)]
pub enum LogBaseError {
    /// The file failed the check every guest-memory file gets.
    #[error("the log's file is refused")]
    Check(#[source] MemoryFileError),
    /// The area could not be mapped.
    #[error("the log cannot be mapped")]
    Map(#[source] DirtyLogError),
    /// The mapping of an unsealed file could not be guarded.
    #[error("the log's mapping cannot be guarded against SIGBUS")]
    Guard(#[source] GuardError),
}

/// Map `size` bytes of `file` from `offset` as the dirty-page log of a port
/// whose policy for unsealed files is `unsealed` (see the module
/// documentation).
pub fn map_log(
    file: &File,
    offset: u64,
    size: u64,
    unsealed: crate::config::UnsealedMemory,
) -> Result<MappedLog, LogBaseError> {
    let sealed = memory_file::check(file, offset, size, unsealed).map_err(LogBaseError::Check)?;
    let log = DirtyLog::map(file, offset, size).map_err(LogBaseError::Map)?;
    let guard = if sealed {
        None
    } else {
        // No access to the mapping before this: a shrink meanwhile faults
        // only later, under the guard.
        let (start, len) = log.mapping();
        let page = memory_file::hugepage_size(file);
        Some(sigbus_guard::guard(start, len, page).map_err(LogBaseError::Guard)?)
    };
    Ok(MappedLog::new(log, guard))
}

impl Connection {
    /// `SET_LOG_BASE`: the log at `offset`, `size` bytes, of `file`; the
    /// rings log into it from their next start (every worker restarts
    /// here). A refusal ends the connection.
    pub(super) fn set_log(&mut self, offset: u64, size: u64, file: &File) -> VhostResult<()> {
        let mapped = match map_log(file, offset, size, self.port.cfg.unsealed_memory) {
            Ok(m) => m,
            Err(e) => {
                let why = vadapt_host::error_chain::error_chain(&e);
                if let Some(held_back) = self.port.may_log("SET_LOG_BASE refused") {
                    tracing::error!(
                        port = self.port.name(),
                        error = %why,
                        held_back,
                        "SET_LOG_BASE refused; closing the connection"
                    );
                }
                self.fatal = Some(format!("SET_LOG_BASE refused: {why}"));
                return Err(VhostError::InvalidParam);
            }
        };
        if let Some(held_back) = self.port.may_log("dirty-page log set") {
            tracing::info!(
                port = self.port.name(),
                bytes = size,
                covers_mib = mapped.log().covers() >> 20,
                sealed = mapped.is_sealed(),
                held_back,
                "dirty-page log set (live migration)"
            );
        }
        // Workers pick the new log up as they restart; none writes to the
        // old one after this.
        self.reconfigure(|c| {
            c.log = Some(Arc::new(mapped));
            c.log_outside_reported = 0;
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory_file::tests::memfd;
    use super::*;
    use crate::config::UnsealedMemory;

    #[test]
    fn only_a_sealed_memfd_by_default_and_never_past_its_file() {
        let refuse = UnsealedMemory::Refuse;
        let sealed = map_log(&memfd(4096, true), 0, 512, refuse).unwrap();
        assert!(sealed.is_sealed() && sealed.is_live());
        // The repro: an unsealed 512-byte memfd.
        assert!(matches!(
            map_log(&memfd(512, false), 0, 512, refuse),
            Err(LogBaseError::Check(MemoryFileError::Unsealed))
        ));
        let regular = tempfile::tempfile().unwrap();
        regular.set_len(4096).unwrap();
        assert!(matches!(
            map_log(&regular, 0, 512, refuse),
            Err(LogBaseError::Check(MemoryFileError::Unsealed))
        ));
        // A size the file does not have, and one that overflows.
        assert!(matches!(
            map_log(&memfd(512, true), 0, 4096, refuse),
            Err(LogBaseError::Check(MemoryFileError::TooSmall { .. }))
        ));
        assert!(matches!(
            map_log(&memfd(512, true), 1, u64::MAX, refuse),
            Err(LogBaseError::Check(MemoryFileError::Overflow))
        ));
        assert!(matches!(
            map_log(&memfd(512, true), 0, 0, refuse),
            Err(LogBaseError::Map(_))
        ));
        // Where the port accepts unsealed files, under a guard.
        let accept = UnsealedMemory::Accept;
        let guarded = map_log(&regular, 0, 512, accept).unwrap();
        assert!(!guarded.is_sealed() && guarded.is_live());
    }

    #[test]
    fn a_shrunk_unsealed_log_ends_logging_once_and_the_process_lives() {
        let f = memfd(8192, false);
        let log = map_log(&f, 4096, 512, UnsealedMemory::Accept).unwrap();
        log.log().mark(0, 1);
        assert!(log.log().is_marked(0));
        f.set_len(0).unwrap();
        // The page faults (SIGBUS); the guard replaces it and the mark
        // completes on a page nobody reads.
        log.log().mark(8 * vadapt_virtq::LOG_PAGE, 1);
        assert!(!log.is_live(), "logging ended");
        assert!(log.end(), "said once");
        assert!(!log.end(), "and only once");
    }
}
