//! The kernel's preferred busy polling on an uplink's NIC queues: EE-KBP's
//! idea as today's kernel has it (Documentation/networking/napi.rst, "busy
//! polling" and "IRQ mitigation"; the AF_XDP document's "preferred busy
//! polling"; xdp-tools' xdpsock `--busy-poll`).
//!
//! While EE-KBP's worker polls, each service pass's `recvfrom` on the
//! AF_XDP socket runs the queue's NAPI poll in the worker's own context
//! (`sk_busy_loop`), so the kernel's receive work moves from the softIRQ
//! to the polling thread, as the paper's kernel thread takes it. When the
//! queue is empty the worker sleeps in epoll on the socket, and the
//! interrupt comes back: the NAPI instance's deferral timer
//! (`gro_flush_timeout`) runs the softIRQ once more, and after
//! `napi_defer_hard_irqs` empty rounds the driver unmasks the NIC's IRQ.
//! Interrupt mode keeps none of this: plain epoll on the socket.
//!
//! Three pieces, each here:
//! * the socket's options ([`set_socket`]): `SO_PREFER_BUSY_POLL` (the
//!   application owns the NAPI instance while it polls, and the softIRQ
//!   leaves it alone), `SO_BUSY_POLL` (µs; non-zero turns busy polling on
//!   for the socket; a non-blocking `recvfrom` polls once) and
//!   `SO_BUSY_POLL_BUDGET` (packets a NAPI poll, EE-KBP's quota); set by
//!   the queue's worker when it takes an EE-KBP policy, cleared when it
//!   takes another;
//! * the interface's deferral ([`NapiGuard`]): `napi_defer_hard_irqs` and
//!   `gro_flush_timeout` in `/sys/class/net/IFACE/`, which keep the IRQ
//!   masked while the application polls. Set at the uplink's start for an
//!   EE-KBP port (or when `set-policy` makes it one), the old values
//!   recorded first (`uplink-IFACE.napi` beside the owner record) and
//!   written back at stop; after a SIGKILL, the next uplink on the
//!   interface writes them back from the record ([`restore_left`]), as
//!   [`super::channels`] does with the channel count;
//! * `irq_suspend_timeout` (6.13 and later), a per-NAPI setting of the
//!   `netdev` generic-netlink family: not set ([`irq_suspend_note`] says
//!   so in one line). The kernel suspends the IRQ with it only from
//!   `epoll_wait` on an epoll instance with `prefer_busy_poll` set
//!   (`EPIOCSPARAMS`), while that epoll keeps finding events, and resumes
//!   it when epoll finds none. The worker busy-polls through `recvfrom`
//!   instead, and its epoll sleeps without busy polling, so the timeout
//!   would never act: the deferral above is what brings the IRQ back.
//!
//! Copy mode, veth included, cannot busy-poll on kernels from 6.13: an
//! AF_XDP socket learns its queue's NAPI id at bind, and only in zero-copy
//! mode (the kernel's "xsk: Bring back busy polling support", which
//! followed the move of NAPI ids to `napi_enable`); a copy-mode socket's
//! `SO_INCOMING_NAPI_ID` stays 0 and `sk_busy_loop` returns at once. The
//! worker says so in one line after its first frames (`check_napi`); the
//! interface's deferral still acts (fewer NET_RX softIRQs a frame:
//! docs/uplink.md, `scripts/veth-busy-poll.sh`).

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// Errors setting busy polling up.
#[derive(Debug, thiserror::Error)]
pub enum BusyPollError {
    /// `setsockopt` refused an option.
    #[error("cannot set {option} to {value} on the AF_XDP socket")]
    SetOption {
        /// The option's name.
        option: &'static str,
        /// The value asked for.
        value: u32,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// An interface setting could not be read.
    #[error("cannot read `{}`", path.display())]
    ReadSetting {
        /// The sysfs file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// An interface setting could not be written.
    #[error("cannot write {value} to `{}`", path.display())]
    WriteSetting {
        /// The sysfs file.
        path: PathBuf,
        /// The value.
        value: u64,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The old settings could not be recorded: nothing was changed.
    #[error("cannot record the interface's NAPI settings in `{}`", path.display())]
    Record {
        /// The record.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
}

/// A socket's busy-poll options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketBusyPoll {
    /// `SO_PREFER_BUSY_POLL`.
    pub prefer: bool,
    /// `SO_BUSY_POLL`, µs (0: off).
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET`, packets a NAPI poll (0: the kernel's 8).
    pub budget: u32,
}

impl SocketBusyPoll {
    /// Off: what a fresh socket has.
    pub const OFF: SocketBusyPoll = SocketBusyPoll {
        prefer: false,
        usecs: 0,
        budget: 0,
    };

    /// Preferred busy polling with `budget` packets a poll (EE-KBP's
    /// quota) and xdpsock's 20 µs (only a flag for the non-blocking
    /// `recvfrom` the worker makes: it polls once).
    pub fn preferred(budget: u32) -> SocketBusyPoll {
        SocketBusyPoll {
            prefer: true,
            usecs: 20,
            budget,
        }
    }

    /// True if the socket busy-polls.
    pub fn is_on(&self) -> bool {
        self.usecs > 0
    }
}

fn setsockopt(
    fd: RawFd,
    option: &'static str,
    name: libc::c_int,
    value: u32,
) -> Result<(), BusyPollError> {
    let v = value as libc::c_int;
    // SAFETY: an int option on the caller's socket, `v` lives across the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(BusyPollError::SetOption {
            option,
            value,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn getsockopt(fd: RawFd, name: libc::c_int) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int option of the caller's socket into `v`, `len` its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v as u32)
}

/// Set `fd`'s busy-poll options to `to` (a budget above 64, NAPI's
/// weight, needs `CAP_NET_ADMIN`).
pub fn set_socket(fd: RawFd, to: SocketBusyPoll) -> Result<(), BusyPollError> {
    setsockopt(
        fd,
        "SO_PREFER_BUSY_POLL",
        libc::SO_PREFER_BUSY_POLL,
        u32::from(to.prefer),
    )?;
    setsockopt(
        fd,
        "SO_BUSY_POLL_BUDGET",
        libc::SO_BUSY_POLL_BUDGET,
        to.budget,
    )?;
    setsockopt(fd, "SO_BUSY_POLL", libc::SO_BUSY_POLL, to.usecs)
}

/// `fd`'s `SO_PREFER_BUSY_POLL` and `SO_BUSY_POLL` (µs), as the kernel
/// holds them. `SO_BUSY_POLL_BUDGET` cannot be read back: `getsockopt`
/// refuses it (`ENOPROTOOPT`, kernel 6.18).
pub fn socket(fd: RawFd) -> io::Result<(bool, u32)> {
    Ok((
        getsockopt(fd, libc::SO_PREFER_BUSY_POLL)? != 0,
        getsockopt(fd, libc::SO_BUSY_POLL)?,
    ))
}

/// The id of the NAPI instance that last delivered to `fd`
/// (`SO_INCOMING_NAPI_ID`): 0 while it knows none, and then a busy poll
/// has nothing to run.
pub fn napi_id(fd: RawFd) -> io::Result<u32> {
    getsockopt(fd, libc::SO_INCOMING_NAPI_ID)
}

/// An interface's IRQ deferral (`/sys/class/net/IFACE/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NapiDefer {
    /// `napi_defer_hard_irqs`: empty NAPI polls before the IRQ is unmasked.
    pub defer_hard_irqs: u32,
    /// `gro_flush_timeout`, ns: how long the deferral timer waits before
    /// the softIRQ polls again.
    pub gro_flush_timeout_ns: u64,
}

impl NapiDefer {
    /// What EE-KBP sets: napi.rst's example for preferred busy polling
    /// (2 deferrals) with a 20 µs timer, a tenth of the example's 200 µs:
    /// a frame that arrives just after the worker fell asleep waits for
    /// the timer, and 200 µs would be most of a request's round trip here.
    pub const EEKBP: NapiDefer = NapiDefer {
        defer_hard_irqs: 2,
        gro_flush_timeout_ns: 20_000,
    };

    /// The interface's settings now, under the sysfs root `sys`.
    pub fn read(sys: &Path, iface: &str) -> Result<NapiDefer, BusyPollError> {
        let read = |name: &str| {
            let path = setting_path(sys, iface, name);
            std::fs::read_to_string(&path)
                .and_then(|s| {
                    s.trim()
                        .parse::<u64>()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
                })
                .map_err(|source| BusyPollError::ReadSetting { path, source })
        };
        Ok(NapiDefer {
            defer_hard_irqs: read("napi_defer_hard_irqs")? as u32,
            gro_flush_timeout_ns: read("gro_flush_timeout")?,
        })
    }

    /// Write these settings to the interface, under the sysfs root `sys`.
    pub fn write(&self, sys: &Path, iface: &str) -> Result<(), BusyPollError> {
        for (name, value) in [
            ("napi_defer_hard_irqs", u64::from(self.defer_hard_irqs)),
            ("gro_flush_timeout", self.gro_flush_timeout_ns),
        ] {
            let path = setting_path(sys, iface, name);
            std::fs::write(&path, format!("{value}\n")).map_err(|source| {
                BusyPollError::WriteSetting {
                    path,
                    value,
                    source,
                }
            })?;
        }
        Ok(())
    }
}

impl std::fmt::Display for NapiDefer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "napi_defer_hard_irqs {} gro_flush_timeout {} ns",
            self.defer_hard_irqs, self.gro_flush_timeout_ns
        )
    }
}

fn setting_path(sys: &Path, iface: &str, name: &str) -> PathBuf {
    sys.join("class/net").join(iface).join(name)
}

/// Where the old settings of `iface` are kept while an uplink changed them.
fn record_path(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("uplink-{iface}.napi"))
}

fn read_record(path: &Path) -> Option<NapiDefer> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(d)), Some(Ok(g)), None) = (it.next(), it.next(), it.next()) else {
        return None;
    };
    Some(NapiDefer {
        defer_hard_irqs: u32::try_from(d).ok()?,
        gro_flush_timeout_ns: g,
    })
}

/// The interface's IRQ deferral set for EE-KBP, written back to `original`
/// when dropped (and its record removed).
#[derive(Debug)]
pub struct NapiGuard {
    sys: PathBuf,
    iface: String,
    original: NapiDefer,
    record: PathBuf,
}

impl NapiGuard {
    /// Set `to` on `iface` (sysfs root `sys`), the settings it had
    /// recorded first in `record_dir` (or a killed uplink's record of
    /// them kept), with one log line.
    pub fn take(
        sys: &Path,
        iface: &str,
        record_dir: &Path,
        to: NapiDefer,
        port: &str,
    ) -> Result<NapiGuard, BusyPollError> {
        let now = NapiDefer::read(sys, iface)?;
        let record = record_path(record_dir, iface);
        let original = read_record(&record).unwrap_or(now);
        std::fs::create_dir_all(record_dir)
            .and_then(|()| {
                std::fs::write(
                    &record,
                    format!(
                        "{} {}\n",
                        original.defer_hard_irqs, original.gro_flush_timeout_ns
                    ),
                )
            })
            .map_err(|source| BusyPollError::Record {
                path: record.clone(),
                source,
            })?;
        let guard = NapiGuard {
            sys: sys.into(),
            iface: iface.into(),
            original,
            record,
        };
        // On an error the guard writes back what was written of it.
        to.write(sys, iface)?;
        tracing::info!(
            port,
            iface,
            before = %now,
            after = %to,
            "EE-KBP: the NIC's IRQ deferral set for preferred busy polling; restored when the uplink stops or leaves EE-KBP"
        );
        Ok(guard)
    }
}

impl Drop for NapiGuard {
    fn drop(&mut self) {
        match self.original.write(&self.sys, &self.iface) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.record);
                tracing::info!(
                    iface = self.iface.as_str(),
                    settings = %self.original,
                    "NIC IRQ deferral restored"
                );
            }
            Err(e) => tracing::error!(
                iface = self.iface.as_str(),
                error = %vadapt_host::error_chain::error_chain(&e),
                "cannot restore the NIC's IRQ deferral (write napi_defer_hard_irqs and gro_flush_timeout in /sys/class/net/IFACE/)"
            ),
        }
    }
}

/// Write back the settings a killed uplink recorded for `iface`, if it
/// left a record in `record_dir`, and remove the record: one log line.
/// Called at start before anything else touches the interface.
pub fn restore_left(sys: &Path, iface: &str, record_dir: &Path) -> Result<(), BusyPollError> {
    let record = record_path(record_dir, iface);
    let Some(original) = read_record(&record) else {
        let _ = std::fs::remove_file(&record);
        return Ok(());
    };
    original.write(sys, iface)?;
    let _ = std::fs::remove_file(&record);
    tracing::info!(
        iface,
        settings = %original,
        "a stopped vadapt left the NIC's IRQ deferral changed: restored"
    );
    Ok(())
}

/// The kernel release's (major, minor), from `uname -r`'s form `6.18.4-…`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// What the uplink says, once, about `irq_suspend_timeout` on a kernel of
/// `release`: present from 6.13 and not set (it acts only through epoll's
/// own busy polling, which the worker does not use: see the module
/// docs); absent before.
pub fn irq_suspend_note(release: &str) -> &'static str {
    match kernel_version(release) {
        Some(v) if v >= (6, 13) => {
            "irq_suspend_timeout (kernel 6.13+) not set: it acts only through epoll's prefer_busy_poll, \
             and the worker busy-polls through recvfrom; the IRQ comes back through napi_defer_hard_irqs \
             and gro_flush_timeout"
        }
        Some(_) => {
            "no irq_suspend_timeout before kernel 6.13: the IRQ comes back through \
             napi_defer_hard_irqs and gro_flush_timeout"
        }
        None => "kernel release unreadable: irq_suspend_timeout not set",
    }
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sys(iface: &str, defer: u32, gro: u64) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("class/net").join(iface);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("napi_defer_hard_irqs"), format!("{defer}\n")).unwrap();
        std::fs::write(dir.join("gro_flush_timeout"), format!("{gro}\n")).unwrap();
        d
    }

    #[test]
    fn the_guard_records_sets_and_restores_and_a_killed_ones_record_is_restored() {
        let sys = fake_sys("nic0", 0, 0);
        let rec = tempfile::tempdir().unwrap();
        let g = NapiGuard::take(sys.path(), "nic0", rec.path(), NapiDefer::EEKBP, "up0").unwrap();
        assert_eq!(
            NapiDefer::read(sys.path(), "nic0").unwrap(),
            NapiDefer::EEKBP
        );
        let record = rec.path().join("uplink-nic0.napi");
        assert_eq!(std::fs::read_to_string(&record).unwrap(), "0 0\n");
        // A SIGKILL runs no Drop: the record stays, and the next start
        // writes the old values back from it.
        std::mem::forget(g);
        restore_left(sys.path(), "nic0", rec.path()).unwrap();
        assert_eq!(
            NapiDefer::read(sys.path(), "nic0").unwrap(),
            NapiDefer {
                defer_hard_irqs: 0,
                gro_flush_timeout_ns: 0
            }
        );
        assert!(!record.exists());
        // A clean stop restores, the record goes.
        let g = NapiGuard::take(sys.path(), "nic0", rec.path(), NapiDefer::EEKBP, "up0").unwrap();
        drop(g);
        assert_eq!(
            NapiDefer::read(sys.path(), "nic0").unwrap().defer_hard_irqs,
            0
        );
        assert!(!record.exists());
    }

    #[test]
    fn a_killed_uplinks_record_keeps_the_true_original() {
        let sys = fake_sys("nic0", 5, 7000);
        let rec = tempfile::tempdir().unwrap();
        std::fs::write(rec.path().join("uplink-nic0.napi"), "1 1000\n").unwrap();
        let g = NapiGuard::take(sys.path(), "nic0", rec.path(), NapiDefer::EEKBP, "up0").unwrap();
        drop(g);
        assert_eq!(
            NapiDefer::read(sys.path(), "nic0").unwrap(),
            NapiDefer {
                defer_hard_irqs: 1,
                gro_flush_timeout_ns: 1000
            }
        );
    }

    #[test]
    fn a_missing_interface_is_a_typed_error_and_changes_nothing() {
        let sys = tempfile::tempdir().unwrap();
        let rec = tempfile::tempdir().unwrap();
        let e =
            NapiGuard::take(sys.path(), "nic9", rec.path(), NapiDefer::EEKBP, "up0").unwrap_err();
        assert!(matches!(e, BusyPollError::ReadSetting { .. }), "{e}");
        assert!(!rec.path().join("uplink-nic9.napi").exists());
    }

    #[test]
    fn irq_suspend_timeout_is_named_from_6_13() {
        assert_eq!(kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(kernel_version("5.10.0"), Some((5, 10)));
        assert!(irq_suspend_note("6.13.0").contains("not set"));
        assert!(irq_suspend_note("6.12.9-amd64").contains("before kernel 6.13"));
        assert!(irq_suspend_note("x").contains("unreadable"));
    }
}
