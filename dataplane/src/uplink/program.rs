//! The XDP program on an uplink's interface: who owns it, and replacing
//! one that a daemon killed before it could detach left behind.
//!
//! libxdp attaches its default AF_XDP program (`xsk_def_prog`, which
//! redirects each queue's frames to the socket in its map, and passes them
//! to the kernel's stack when there is none) with the first socket, and
//! detaches it with the last. A daemon killed with SIGKILL detaches
//! nothing: the program stays, with no socket in its map, so the NIC's
//! traffic goes to the kernel's stack, not nowhere. The next start must
//! take it over, but must never take another application's AF_XDP program
//! (DPDK's `net_af_xdp`, another daemon). So each uplink records its owner
//! in a file ([`OwnerRecord`]); a program found at start is detached only
//! when the record names a process that is gone.

use super::libxdp;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// The name libxdp gives its default AF_XDP program.
const XSK_PROGRAM: &str = "xsk_def_prog";

/// Errors taking an interface for an uplink.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// No such interface.
    #[error("no network interface `{0}`")]
    NoInterface(String),
    /// A live process other than us owns the interface's AF_XDP program.
    #[error("`{iface}` is served by a running process (pid {pid}, recorded in {record}): one uplink per interface")]
    OwnedByLive {
        /// Interface.
        iface: String,
        /// The owner.
        pid: u32,
        /// Its record.
        record: PathBuf,
    },
    /// An AF_XDP program of someone we have no record of.
    #[error("`{iface}` already has an AF_XDP program (`{program}`) that no vadapt attached: another AF_XDP application serves it; stop it, or detach it with `ip link set dev {iface} xdp off`")]
    Foreign {
        /// Interface.
        iface: String,
        /// The program's name.
        program: String,
    },
    /// The stale program could not be detached.
    #[error("cannot detach the stale AF_XDP program left on `{iface}`")]
    Detach {
        /// Interface.
        iface: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The owner record could not be written.
    #[error("cannot write the uplink's owner record {path}")]
    Record {
        /// Its path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// What an interface has attached now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attached {
    /// No XDP program.
    Nothing,
    /// Programs, by name (a legacy single program, or a dispatcher's).
    Programs(Vec<String>),
}

/// The XDP programs attached to `ifindex`, by name.
pub fn attached(ifindex: u32) -> Attached {
    let Ok(lib) = libxdp::libxdp() else {
        return Attached::Nothing;
    };
    // SAFETY: libxdp returns an owned multiprog, an error pointer or null;
    // it is closed below and its programs are only borrowed until then.
    unsafe {
        let mp = (lib.xdp_multiprog__get_from_ifindex)(ifindex as i32);
        if mp.is_null() || (lib.libxdp_get_error)(mp.cast()) != 0 {
            return Attached::Nothing;
        }
        let mut names = Vec::new();
        let name = |p: *const libxdp::XdpProgram| {
            let n = (lib.xdp_program__name)(p);
            (!n.is_null()).then(|| CStr::from_ptr(n).to_string_lossy().into_owned())
        };
        if (lib.xdp_multiprog__is_legacy)(mp) {
            let main = (lib.xdp_multiprog__main_prog)(mp);
            if !main.is_null() {
                names.extend(name(main));
            }
        } else {
            let mut p = (lib.xdp_multiprog__next_prog)(std::ptr::null(), mp);
            while !p.is_null() {
                names.extend(name(p));
                p = (lib.xdp_multiprog__next_prog)(p, mp);
            }
        }
        (lib.xdp_multiprog__close)(mp);
        if names.is_empty() {
            Attached::Nothing
        } else {
            Attached::Programs(names)
        }
    }
}

fn detach_all(ifindex: u32) -> std::io::Result<()> {
    let lib = libxdp::libxdp().map_err(std::io::Error::other)?;
    // SAFETY: as in `attached`; the multiprog is closed after the detach.
    unsafe {
        let mp = (lib.xdp_multiprog__get_from_ifindex)(ifindex as i32);
        if mp.is_null() || (lib.libxdp_get_error)(mp.cast()) != 0 {
            return Ok(());
        }
        let r = (lib.xdp_multiprog__detach)(mp);
        (lib.xdp_multiprog__close)(mp);
        if r < 0 {
            return Err(std::io::Error::from_raw_os_error(-r));
        }
    }
    Ok(())
}

/// The interface index of `iface`.
pub fn ifindex(iface: &str) -> Result<u32, ProgramError> {
    let c = CString::new(iface).map_err(|_| ProgramError::NoInterface(iface.into()))?;
    // SAFETY: a NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(ProgramError::NoInterface(iface.into()));
    }
    Ok(i)
}

/// Which process serves an interface's uplink: a file holding its pid,
/// removed when the uplink goes.
#[derive(Debug)]
pub struct OwnerRecord {
    path: PathBuf,
}

impl OwnerRecord {
    /// Where the record of `iface` lives under `dir`.
    fn path(dir: &Path, iface: &str) -> PathBuf {
        dir.join(format!("uplink-{iface}.pid"))
    }

    /// Take `iface` for this process: refuse if a live process holds it or
    /// a program we have no record of is attached; detach a program left
    /// by a dead owner (one WARN line); then write our record.
    pub fn take(dir: &Path, iface: &str) -> Result<OwnerRecord, ProgramError> {
        let index = ifindex(iface)?;
        let path = Self::path(dir, iface);
        let recorded = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        let me = std::process::id();
        if let Some(pid) = recorded.filter(|&p| p != me && alive(p)) {
            return Err(ProgramError::OwnedByLive {
                iface: iface.into(),
                pid,
                record: path,
            });
        }
        if let Attached::Programs(names) = attached(index) {
            if let Some(p) = names.iter().find(|n| n.as_str() == XSK_PROGRAM) {
                match recorded {
                    Some(pid) => {
                        tracing::warn!(
                            iface,
                            program = p.as_str(),
                            dead_owner = pid,
                            "replacing the AF_XDP program a stopped vadapt left on the interface (killed before it could detach)"
                        );
                        detach_all(index).map_err(|source| ProgramError::Detach {
                            iface: iface.into(),
                            source,
                        })?;
                    }
                    None => {
                        return Err(ProgramError::Foreign {
                            iface: iface.into(),
                            program: p.clone(),
                        })
                    }
                }
            }
        }
        let write = || {
            std::fs::create_dir_all(dir)?;
            std::fs::write(&path, format!("{me}\n"))
        };
        write().map_err(|source| ProgramError::Record {
            path: path.clone(),
            source,
        })?;
        Ok(OwnerRecord { path })
    }
}

impl Drop for OwnerRecord {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// True if process `pid` exists (signal 0).
fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for the process.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Where owner records go: `$RUNTIME_DIRECTORY` (systemd's
/// `RuntimeDirectory=`) or `/run/vadapt`.
pub fn default_record_dir() -> PathBuf {
    std::env::var_os("RUNTIME_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/vadapt"))
}
