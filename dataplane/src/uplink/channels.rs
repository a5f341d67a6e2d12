//! The NIC's channel count, as `ethtool -l` reads and `ethtool -L` sets
//! it: an uplink with `queues=N` needs N RX queues on its interface.
//!
//! At start ([`ensure`]): an interface with fewer RX queues than N whose
//! driver allows N gets N (one log line, before and after), and the
//! original count comes back when the uplink stops ([`ChannelGuard`], on
//! drop: a clean stop of the daemon, `del-port`, a reload, or a start that
//! failed later). N above the driver's maximum is refused with an error
//! naming the driver and its limit, before anything is changed: an uplink
//! that served fewer queues than asked would leave the rest of the NIC's
//! traffic to queues nobody reads. A driver that reports no channels
//! (`EOPNOTSUPP`: tun, loopback, some virtual NICs) is used as it is, with
//! one log line saying so.
//!
//! An interface with more RX queues than N gets N as well (ethtool -L
//! lowers it, restored the same way): the NIC hashes flows over all its
//! RX queues, and libxdp's program passes the frames of a queue with no
//! socket to the host's stack, so the VMs would never see those flows.
//! Where the driver refuses to lower the count, the uplink runs on the
//! queues it has, and `rss_table.rs` steers the flows of the others to the
//! served queues through the RSS indirection table (`ethtool -X IFACE
//! equal N`), or says, in one WARN line, which queues' frames reach the
//! host's stack where it cannot.
//!
//! Drivers differ in what a channel is: most NICs have combined channels
//! (an RX and a TX queue with one interrupt), so there the combined count
//! is raised; veth and a few others have separate RX and TX channels, so
//! there both are raised (an AF_XDP socket transmits on the TX queue of
//! its RX queue's number). On a veth the far end's TX count decides which
//! of our RX queues its frames reach.
//!
//! Through the `SIOCETHTOOL` ioctl (`ETHTOOL_GCHANNELS` /
//! `ETHTOOL_SCHANNELS`), not ethtool's netlink family: two calls over a
//! nine-field struct of the kernel's stable uAPI, where the maintained
//! netlink crate (rust-netlink's `ethtool`) would bring an async runtime
//! and generic-netlink family resolution into the daemon for them. The
//! kernel serves both interfaces from the same driver callbacks.
//!
//! A SIGKILL runs no code: the count stays as the uplink set it (raised,
//! its traffic still flows; lowered, the NIC's flows all land on the
//! queues left). The original
//! count is written to a record beside the uplink's owner record
//! (`uplink-IFACE.channels`) before the change, so the next uplink on the
//! interface (which takes it over only from a process that is gone) sets
//! that count back when it stops. Changing the count resets the queues on
//! most NICs (a moment without traffic, as `ethtool -L` by hand does).

use std::ffi::c_void;
use std::path::{Path, PathBuf};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;

/// Errors reading or changing an interface's channels.
#[derive(Debug, thiserror::Error)]
pub enum ChannelsError {
    /// `ETHTOOL_GCHANNELS` failed (other than "not supported").
    #[error("cannot read the channel count of `{iface}`")]
    Read {
        /// Interface.
        iface: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `ETHTOOL_SCHANNELS` failed.
    #[error("cannot set the channels of `{iface}` (driver {driver}) from {from} to {to}")]
    Write {
        /// Interface.
        iface: String,
        /// Its driver.
        driver: String,
        /// The count before (boxed, as `to`: keeps the error small).
        from: Box<Channels>,
        /// The count asked for.
        to: Box<Channels>,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The driver cannot give the interface as many RX queues as asked.
    #[error(
        "`{iface}` has {have} RX queue(s) and its driver ({driver}) allows at most {max}: \
         the uplink asks for {want} (see `ethtool -l {iface}`; lower the uplink's queues=)"
    )]
    TooFew {
        /// Interface.
        iface: String,
        /// Its driver.
        driver: String,
        /// RX queues now.
        have: u32,
        /// The driver's maximum.
        max: u32,
        /// RX queues asked for.
        want: u32,
    },
    /// The interface name does not fit an `ifreq` (15 bytes) or has a NUL.
    #[error("interface name `{0}` is not a valid name")]
    BadName(String),
}

/// `struct ethtool_channels` of `<linux/ethtool.h>`: maxima and current
/// counts of each kind of channel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    cmd: u32,
    /// Most RX-only channels.
    pub max_rx: u32,
    /// Most TX-only channels.
    pub max_tx: u32,
    /// Most other channels (link interrupts, SR-IOV).
    pub max_other: u32,
    /// Most combined (RX and TX) channels.
    pub max_combined: u32,
    /// RX-only channels now.
    pub rx: u32,
    /// TX-only channels now.
    pub tx: u32,
    /// Other channels now.
    pub other: u32,
    /// Combined channels now.
    pub combined: u32,
}

impl std::fmt::Display for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rx {} tx {} combined {}",
            self.rx, self.tx, self.combined
        )
    }
}

impl Channels {
    /// RX queues now: each combined and each RX-only channel has one.
    pub fn rx_queues(&self) -> u32 {
        self.combined + self.rx
    }

    /// The most RX queues the driver allows by changing one kind of
    /// channel: combined ones where it has them, else RX-only ones.
    pub fn max_rx_queues(&self) -> u32 {
        if self.max_combined > 0 {
            self.max_combined + self.rx
        } else {
            self.combined + self.max_rx
        }
    }
}

/// What an uplink asking for `want` RX queues does about `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The interface has exactly `want`: nothing changes.
    Enough,
    /// Set these channels (more RX queues).
    Raise(Channels),
    /// Set these channels (fewer RX queues: as close to `want` as the
    /// kinds of channel allow, see [`plan`]).
    Lower(Channels),
    /// The driver allows at most `max` RX queues.
    TooFew {
        /// The driver's maximum.
        max: u32,
    },
}

/// See [`Plan`]. Lowering takes combined channels first (down to one),
/// then RX-only ones, and leaves at least one RX queue; TX-only channels stay (the
/// host's stack sends on them; only RX queues receive what no socket
/// serves).
pub fn plan(now: &Channels, want: u32) -> Plan {
    if now.rx_queues() > want {
        let mut excess = now.rx_queues() - want;
        let mut to = *now;
        let cut = excess.min(to.combined.saturating_sub(1));
        to.combined -= cut;
        excess -= cut;
        let cut = excess.min(to.rx.saturating_sub(u32::from(to.combined == 0)));
        to.rx -= cut;
        return if to == *now {
            Plan::Enough
        } else {
            Plan::Lower(to)
        };
    }
    if now.rx_queues() == want {
        return Plan::Enough;
    }
    if now.max_rx_queues() < want {
        return Plan::TooFew {
            max: now.max_rx_queues(),
        };
    }
    let mut to = *now;
    if now.max_combined > 0 {
        to.combined = want - now.rx;
    } else {
        to.rx = want - now.combined;
        // Separate TX channels: the sockets' TX queues are their RX
        // queues' numbers.
        if now.max_tx > 0 {
            to.tx = now.tx.max(to.rx.min(now.max_tx));
        }
    }
    Plan::Raise(to)
}

/// `struct ifreq` with `ifr_data`: the name, the request's address, and
/// the rest of the union's 24 bytes.
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut c_void,
    _pad: [u8; 16],
}

/// One `SIOCETHTOOL` request on `iface` with `data` (whose first field is
/// the command).
pub(super) fn ethtool_ioctl(iface: &str, data: *mut c_void) -> std::io::Result<()> {
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    for (d, s) in req.name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: a datagram socket of our own, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `req` is a valid ifreq naming the interface (NUL-terminated:
    // names are checked shorter than IFNAMSIZ), whose data points at a
    // struct of the size the command's kernel handler reads and writes.
    let r = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut req as *mut IfreqData) };
    let err = std::io::Error::last_os_error();
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(fd) };
    if r < 0 {
        Err(err)
    } else {
        Ok(())
    }
}

/// Whether `iface` fits an `ifreq` (under 16 bytes, no NUL): what
/// [`ethtool_ioctl`]'s callers check first.
pub(super) fn valid_name(iface: &str) -> bool {
    !iface.is_empty() && iface.len() < libc::IFNAMSIZ && !iface.contains('\0')
}

fn check_name(iface: &str) -> Result<(), ChannelsError> {
    if !valid_name(iface) {
        return Err(ChannelsError::BadName(iface.into()));
    }
    Ok(())
}

/// `ethtool -l IFACE`. `Ok(None)`: the driver reports no channels.
pub fn read(iface: &str) -> Result<Option<Channels>, ChannelsError> {
    check_name(iface)?;
    let mut c = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Channels::default()
    };
    match ethtool_ioctl(iface, (&mut c as *mut Channels).cast()) {
        Ok(()) => Ok(Some(c)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(None),
        Err(source) => Err(ChannelsError::Read {
            iface: iface.into(),
            source,
        }),
    }
}

/// `ethtool -L IFACE` with `to`'s counts (its maxima are ignored).
pub fn write(iface: &str, to: &Channels) -> Result<(), ChannelsError> {
    check_name(iface)?;
    let from = read(iface)?.unwrap_or_default();
    let mut c = Channels {
        cmd: ETHTOOL_SCHANNELS,
        ..*to
    };
    // A zero-copy socket's buffer pool on a queue being removed is let go
    // of a moment after the socket closed: the kernel refuses until then.
    let mut result = Ok(());
    for _ in 0..50 {
        result = ethtool_ioctl(iface, (&mut c as *mut Channels).cast());
        match &result {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EBUSY)) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            _ => break,
        }
    }
    result.map_err(|source| ChannelsError::Write {
        iface: iface.into(),
        driver: driver(iface),
        from: Box::new(from),
        to: Box::new(*to),
        source,
    })
}

/// The interface's driver (`ethtool -i`), or `unknown`.
pub fn driver(iface: &str) -> String {
    // struct ethtool_drvinfo: cmd, then driver[32], then 160 more bytes.
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    if check_name(iface).is_err() || ethtool_ioctl(iface, info.as_mut_ptr().cast()).is_err() {
        return "unknown".into();
    }
    let name = &info[4..36];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// Channels an uplink changed, set back to `original` when dropped (and
/// its record removed).
#[derive(Debug)]
pub struct ChannelGuard {
    iface: String,
    original: Channels,
    record: PathBuf,
}

/// Where the original count of `iface` is kept while an uplink changed it.
fn record_path(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("uplink-{iface}.channels"))
}

/// The counts a record holds: `rx tx other combined`.
fn read_record(path: &Path) -> Option<[u32; 4]> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: Vec<u32> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    v.try_into().ok()
}

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        match write(&self.iface, &self.original) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.record);
                tracing::info!(
                    iface = self.iface.as_str(),
                    channels = %self.original,
                    "NIC channel count restored"
                )
            }
            Err(e) => tracing::error!(
                iface = self.iface.as_str(),
                error = %vadapt_host::error_chain::error_chain(&e),
                "cannot restore the NIC's channel count (set it with ethtool -L)"
            ),
        }
    }
}

/// Give `iface` exactly `want` RX queues where its driver allows (see the
/// module docs), its original count recorded in `record_dir`; the guard
/// that sets the count back, if it was changed (by this uplink, or by one
/// killed before it could restore it).
pub fn ensure(
    iface: &str,
    want: u32,
    port: &str,
    record_dir: &Path,
) -> Result<Option<ChannelGuard>, ChannelsError> {
    let record = record_path(record_dir, iface);
    let Some(now) = read(iface)? else {
        tracing::info!(
            port,
            iface,
            driver = driver(iface).as_str(),
            "the driver reports no channel count (no ethtool -l): its queues are used as they are"
        );
        return Ok(None);
    };
    // A count a killed uplink changed: the original is the record's.
    let mut original = now;
    if let Some([rx, tx, other, combined]) = read_record(&record) {
        (original.rx, original.tx, original.other, original.combined) = (rx, tx, other, combined);
    }
    let guard = |original| ChannelGuard {
        iface: iface.into(),
        original,
        record: record.clone(),
    };
    let to = match plan(&now, want) {
        Plan::Enough if original != now => {
            tracing::info!(
                port,
                iface,
                now = %now,
                original = %original,
                "a stopped vadapt left the NIC's channel count {}; restored when this uplink stops",
                if now.rx_queues() > original.rx_queues() { "raised" } else { "lowered" }
            );
            return Ok(Some(guard(original)));
        }
        Plan::Enough => {
            let _ = std::fs::remove_file(&record);
            return Ok(None);
        }
        Plan::TooFew { max } => {
            return Err(ChannelsError::TooFew {
                iface: iface.into(),
                driver: driver(iface),
                have: now.rx_queues(),
                max,
                want,
            })
        }
        Plan::Raise(to) | Plan::Lower(to) => to,
    };
    let raise = to.rx_queues() > now.rx_queues();
    // Recorded first: a SIGKILL between the two leaves the record.
    let counts = format!(
        "{} {} {} {}\n",
        original.rx, original.tx, original.other, original.combined
    );
    if let Err(e) =
        std::fs::create_dir_all(record_dir).and_then(|()| std::fs::write(&record, counts))
    {
        tracing::warn!(
            iface,
            record = %record.display(),
            error = %e,
            "cannot record the NIC's channel count: a killed daemon would leave it changed"
        );
    }
    match write(iface, &to) {
        Ok(()) => {}
        // Fewer queues than asked: the uplink cannot run.
        Err(e) if raise => {
            let _ = std::fs::remove_file(&record);
            return Err(e);
        }
        // More than asked: the uplink runs, and says where the rest go.
        Err(e) => {
            tracing::warn!(
                port,
                iface,
                error = %vadapt_host::error_chain::error_chain(&e),
                "the driver refuses to lower the NIC's channel count (ethtool -L): the RSS \
                 indirection table is tried next"
            );
            if original == now {
                let _ = std::fs::remove_file(&record);
                return Ok(None);
            }
            return Ok(Some(guard(original)));
        }
    }
    tracing::info!(
        port,
        iface,
        driver = driver(iface).as_str(),
        before = %now,
        after = %to,
        "NIC channel count {} to the uplink's queues (ethtool -L); restored when it stops",
        if raise { "raised" } else { "lowered" }
    );
    Ok(Some(guard(original)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn separate(max: u32, rx: u32, tx: u32) -> Channels {
        Channels {
            max_rx: max,
            max_tx: max,
            rx,
            tx,
            ..Channels::default()
        }
    }

    #[test]
    fn the_struct_is_the_kernels() {
        assert_eq!(std::mem::size_of::<Channels>(), 36);
        assert_eq!(std::mem::size_of::<IfreqData>(), 40);
    }

    #[test]
    fn separate_rx_and_tx_channels_are_raised_together() {
        let now = separate(4, 1, 1);
        assert_eq!(plan(&now, 1), Plan::Enough);
        match plan(&now, 3) {
            Plan::Raise(to) => assert_eq!((to.rx, to.tx, to.combined), (3, 3, 0)),
            p => panic!("{p:?}"),
        }
        // More TX than needed stays.
        match plan(&separate(4, 1, 4), 2) {
            Plan::Raise(to) => assert_eq!((to.rx, to.tx), (2, 4)),
            p => panic!("{p:?}"),
        }
        assert_eq!(plan(&now, 5), Plan::TooFew { max: 4 });
    }

    #[test]
    fn combined_channels_are_raised_where_the_driver_has_them() {
        let now = Channels {
            max_combined: 8,
            max_other: 1,
            combined: 2,
            other: 1,
            ..Channels::default()
        };
        match plan(&now, 6) {
            Plan::Raise(to) => {
                assert_eq!((to.combined, to.rx, to.tx, to.other), (6, 0, 0, 1))
            }
            p => panic!("{p:?}"),
        }
        assert_eq!(plan(&now, 2), Plan::Enough);
        assert_eq!(plan(&now, 9), Plan::TooFew { max: 8 });
    }

    #[test]
    fn more_rx_queues_than_asked_are_lowered_tx_ones_stay() {
        match plan(&separate(4, 4, 4), 2) {
            Plan::Lower(to) => assert_eq!((to.rx, to.tx, to.combined), (2, 4, 0)),
            p => panic!("{p:?}"),
        }
        let combined = Channels {
            max_combined: 8,
            combined: 8,
            other: 1,
            ..Channels::default()
        };
        match plan(&combined, 3) {
            Plan::Lower(to) => assert_eq!((to.combined, to.rx, to.other), (3, 0, 1)),
            p => panic!("{p:?}"),
        }
        // Combined channels first, then RX-only ones, one queue left.
        let both = Channels {
            combined: 2,
            rx: 2,
            ..combined
        };
        match plan(&both, 1) {
            Plan::Lower(to) => assert_eq!((to.combined, to.rx), (1, 0)),
            p => panic!("{p:?}"),
        }
        assert_eq!(plan(&separate(4, 4, 4), 4), Plan::Enough);
    }

    #[test]
    fn a_bad_name_is_refused_before_any_call() {
        assert!(matches!(
            read("a-name-far-too-long"),
            Err(ChannelsError::BadName(_))
        ));
        assert!(matches!(read(""), Err(ChannelsError::BadName(_))));
    }
}
