//! The NIC's RSS indirection table, as `ethtool -x` reads and `ethtool -X`
//! sets it: where the RX channel count could not be lowered to an uplink's
//! `queues=N` (`channels.rs`), flows the NIC hashes to queues N and above
//! would reach no socket (libxdp's program passes their frames to the
//! host's stack). So at start ([`steer`]), if the table sends any flow to
//! such a queue, vadapt spreads it evenly over the served queues 0..N
//! (entry `i` to queue `i mod N`, what `ethtool -X IFACE equal N` writes),
//! with one log line saying so, and writes the original table back when
//! the uplink stops ([`RssGuard`], on drop, before the channel count is
//! restored).
//!
//! A driver with no table (veth, tun; `EOPNOTSUPP`) or one that refuses
//! the new table: the uplink runs as before, with one WARN line naming the
//! queues whose frames reach the host's stack (the channel count read
//! after `channels.rs` says how many there are). A table that sends no
//! flow past the served queues is left alone.
//!
//! A SIGKILL runs no code: the original table is written, before the
//! change, to `uplink-IFACE.rss` beside the uplink's other records, and
//! the next uplink on the interface takes its original from there (if it
//! still has the table's size) and writes it back when it stops, as the
//! channel count's record does.
//!
//! Through the `SIOCETHTOOL` ioctl (`ETHTOOL_GRXFHINDIR` /
//! `ETHTOOL_SRXFHINDIR`, the table alone, which every driver with a table
//! serves; `ETHTOOL_GRSSH` would bring the hash key and function along,
//! which vadapt leaves as they are), behind [`RxfhIndir`] so that the
//! decisions are tested against a fake (the tests below).

use super::channels::{ethtool_ioctl, valid_name};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const ETHTOOL_GRXFHINDIR: u32 = 0x38;
const ETHTOOL_SRXFHINDIR: u32 = 0x39;

/// Largest table read (entries; drivers have 64 to 512, a few 2048).
const MAX_TABLE: u32 = 1 << 16;

/// An interface's RSS indirection table, read and written (the kernel's
/// ethtool ioctl, or a fake in tests).
pub trait RxfhIndir: Send + Sync + std::fmt::Debug {
    /// The table of `iface`: entry `i` is the RX queue of flows whose hash
    /// falls in bucket `i`. `Ok(None)`: the driver has no table.
    fn read(&self, iface: &str) -> std::io::Result<Option<Vec<u32>>>;
    /// Set the table of `iface` (as many entries as it has).
    fn write(&self, iface: &str, table: &[u32]) -> std::io::Result<()>;
}

/// The kernel's `SIOCETHTOOL` ioctl.
#[derive(Clone, Copy, Debug, Default)]
pub struct EthtoolRxfh;

impl RxfhIndir for EthtoolRxfh {
    fn read(&self, iface: &str) -> std::io::Result<Option<Vec<u32>>> {
        if !valid_name(iface) {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        // struct ethtool_rxfh_indir { u32 cmd; u32 size; u32 ring_index[]; }:
        // size 0 asks for the size.
        let mut head = [ETHTOOL_GRXFHINDIR, 0];
        match ethtool_ioctl(iface, head.as_mut_ptr().cast()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(None),
            Err(e) => return Err(e),
        }
        let size = head[1];
        if size == 0 {
            return Ok(None);
        }
        if size > MAX_TABLE {
            return Err(std::io::Error::other(format!(
                "the driver reports an indirection table of {size} entries"
            )));
        }
        let mut buf = vec![0u32; 2 + size as usize];
        buf[0] = ETHTOOL_GRXFHINDIR;
        buf[1] = size;
        ethtool_ioctl(iface, buf.as_mut_ptr().cast())?;
        Ok(Some(buf.split_off(2)))
    }

    fn write(&self, iface: &str, table: &[u32]) -> std::io::Result<()> {
        if !valid_name(iface) || table.is_empty() {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        let size = u32::try_from(table.len()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let mut buf = Vec::with_capacity(2 + table.len());
        buf.extend([ETHTOOL_SRXFHINDIR, size]);
        buf.extend_from_slice(table);
        ethtool_ioctl(iface, buf.as_mut_ptr().cast())
    }
}

/// The table `ethtool -X IFACE equal N` writes: entry `i` to queue `i mod N`.
pub fn spread(size: usize, queues: u32) -> Vec<u32> {
    let n = queues.max(1);
    (0..size)
        .map(|i| (i as u64 % u64::from(n)) as u32)
        .collect()
}

/// Where the original table of `iface` is kept while an uplink changed it.
fn record_path(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("uplink-{iface}.rss"))
}

/// The table a record holds (entries separated by white space).
fn read_record(path: &Path) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(path).ok()?;
    text.split_whitespace().map(|s| s.parse().ok()).collect()
}

/// An indirection table an uplink changed, written back when dropped (and
/// its record removed).
#[derive(Debug)]
pub struct RssGuard {
    io: Arc<dyn RxfhIndir>,
    iface: String,
    original: Vec<u32>,
    record: PathBuf,
}

impl Drop for RssGuard {
    fn drop(&mut self) {
        match self.io.write(&self.iface, &self.original) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.record);
                tracing::info!(
                    iface = self.iface.as_str(),
                    "NIC's RSS indirection table restored"
                );
            }
            Err(e) => tracing::error!(
                iface = self.iface.as_str(),
                error = %e,
                record = %self.record.display(),
                "cannot restore the NIC's RSS indirection table (the original is in the record; \
                 `ethtool -X {} default` resets it)",
                self.iface
            ),
        }
    }
}

/// Steer every flow of `iface` to the `want` queues an uplink serves, if
/// its table sends any elsewhere (see the module docs); `have` is its RX
/// queue count after the channel count was set (`None`: the driver reports
/// none). Returns the guard that writes the original back, if the table
/// was changed (by this uplink, or by one killed before it could restore
/// it). Never fails the uplink: what it cannot do, it logs.
pub fn steer(
    io: Arc<dyn RxfhIndir>,
    iface: &str,
    want: u32,
    have: Option<u32>,
    port: &str,
    record_dir: &Path,
) -> Option<RssGuard> {
    let record = record_path(record_dir, iface);
    let now = match io.read(iface) {
        Ok(Some(t)) => t,
        Ok(None) => {
            warn_unserved(iface, want, have, "the driver has no RSS indirection table");
            return None;
        }
        Err(e) => {
            warn_unserved(
                iface,
                want,
                have,
                &format!("its RSS indirection table cannot be read ({e})"),
            );
            return None;
        }
    };
    // A table a killed uplink changed: the original is the record's (if it
    // still fits the table).
    let original = read_record(&record)
        .filter(|t| t.len() == now.len())
        .unwrap_or_else(|| now.clone());
    let guard = |original: Vec<u32>| RssGuard {
        io: Arc::clone(&io),
        iface: iface.into(),
        original,
        record: record.clone(),
    };
    if now.iter().all(|&q| q < want) {
        if original != now {
            tracing::info!(
                port,
                iface,
                "a stopped vadapt left the NIC's RSS indirection table changed; restored when \
                 this uplink stops"
            );
            return Some(guard(original));
        }
        let _ = std::fs::remove_file(&record);
        return None;
    }
    let to = spread(now.len(), want);
    // Recorded first: a SIGKILL between the two leaves the record.
    let text = original
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    if let Err(e) = std::fs::create_dir_all(record_dir).and_then(|()| std::fs::write(&record, text))
    {
        tracing::warn!(
            iface,
            record = %record.display(),
            error = %e,
            "cannot record the NIC's RSS indirection table: a killed daemon would leave it changed"
        );
    }
    match io.write(iface, &to) {
        Ok(()) => {
            tracing::info!(
                port,
                iface,
                entries = to.len(),
                served = want,
                "NIC's RSS indirection table spread evenly over the uplink's queues \
                 (ethtool -X {iface} equal {want}); restored when it stops"
            );
            Some(guard(original))
        }
        Err(e) => {
            warn_unserved(
                iface,
                want,
                have,
                &format!("the driver refuses a new RSS indirection table ({e})"),
            );
            if original == now {
                let _ = std::fs::remove_file(&record);
                None
            } else {
                Some(guard(original))
            }
        }
    }
}

/// One WARN line where `iface` keeps RX queues past the `want` an uplink
/// serves and `why` nothing steers their flows to the served ones.
fn warn_unserved(iface: &str, want: u32, have: Option<u32>, why: &str) {
    match have {
        Some(have) if have > want => tracing::warn!(
            iface,
            rx_queues = have,
            served = want,
            "{why}: frames hashed to queues {want}..{} reach the host's stack, not the uplink",
            have - 1
        ),
        Some(_) => tracing::debug!(iface, "{why}: every RX queue is served"),
        None => tracing::info!(
            iface,
            served = want,
            "{why}, and no channel count: its queues are used as they are"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A driver's table in memory, refusing writes when told to.
    #[derive(Debug, Default)]
    struct FakeNic {
        table: Mutex<Option<Vec<u32>>>,
        refuse: bool,
        writes: Mutex<u32>,
    }

    impl FakeNic {
        fn with(table: Option<Vec<u32>>, refuse: bool) -> Arc<FakeNic> {
            Arc::new(FakeNic {
                table: Mutex::new(table),
                refuse,
                writes: Mutex::new(0),
            })
        }
        fn table(&self) -> Option<Vec<u32>> {
            self.table.lock().unwrap().clone()
        }
        fn writes(&self) -> u32 {
            *self.writes.lock().unwrap()
        }
    }

    impl RxfhIndir for FakeNic {
        fn read(&self, _: &str) -> std::io::Result<Option<Vec<u32>>> {
            Ok(self.table())
        }
        fn write(&self, _: &str, t: &[u32]) -> std::io::Result<()> {
            *self.writes.lock().unwrap() += 1;
            let mut table = self.table.lock().unwrap();
            match (&mut *table, self.refuse) {
                (_, true) => Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
                (None, _) => Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
                (Some(old), false) if old.len() == t.len() => {
                    old.copy_from_slice(t);
                    Ok(())
                }
                (Some(_), false) => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
    }

    /// The default table of a NIC with `queues` RX queues.
    fn default_table(queues: u32) -> Vec<u32> {
        spread(128, queues)
    }

    #[test]
    fn equal_spreads_entries_round_robin() {
        assert_eq!(spread(6, 4), [0, 1, 2, 3, 0, 1]);
        assert_eq!(spread(3, 0), [0, 0, 0]);
    }

    #[test]
    fn a_table_reaching_unserved_queues_is_spread_and_restored_at_stop() {
        let nic = FakeNic::with(Some(default_table(8)), false);
        let dir = tempfile::tempdir().unwrap();
        let g = steer(nic.clone(), "eth0", 2, Some(8), "up0", dir.path()).expect("changed");
        assert_eq!(nic.table().unwrap(), spread(128, 2));
        let record = dir.path().join("uplink-eth0.rss");
        assert_eq!(read_record(&record), Some(default_table(8)));
        drop(g);
        assert_eq!(nic.table().unwrap(), default_table(8), "original back");
        assert!(!record.exists(), "record gone with the uplink");
    }

    #[test]
    fn a_table_within_the_served_queues_is_left_alone() {
        let nic = FakeNic::with(Some(default_table(2)), false);
        let dir = tempfile::tempdir().unwrap();
        assert!(steer(nic.clone(), "eth0", 2, Some(2), "up0", dir.path()).is_none());
        assert_eq!(nic.writes(), 0);
    }

    #[test]
    fn no_table_or_a_refused_one_leaves_the_uplink_running_and_nothing_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let veth = FakeNic::with(None, false);
        assert!(steer(veth.clone(), "veth0", 2, Some(4), "up0", dir.path()).is_none());
        assert_eq!(veth.writes(), 0);
        let stubborn = FakeNic::with(Some(default_table(8)), true);
        assert!(steer(stubborn.clone(), "eth0", 2, Some(8), "up0", dir.path()).is_none());
        assert_eq!(stubborn.writes(), 1);
        assert_eq!(stubborn.table().unwrap(), default_table(8));
        assert!(!std::fs::read_dir(dir.path()).unwrap().any(|_| true));
    }

    #[test]
    fn after_a_sigkill_the_records_original_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("uplink-eth0.rss");
        // A killed uplink spread the table over 2 queues and left its record.
        let nic = FakeNic::with(Some(spread(128, 2)), false);
        let original = default_table(8);
        std::fs::write(
            &record,
            original
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        )
        .unwrap();
        // The next uplink serves 2 as well: nothing to change while it
        // runs, the killed one's original when it stops.
        let g = steer(nic.clone(), "eth0", 2, Some(8), "up0", dir.path()).expect("guard");
        assert_eq!(nic.writes(), 0);
        drop(g);
        assert_eq!(nic.table().unwrap(), original);
        assert!(!record.exists());

        // A record of another size (the driver's table changed) is stale.
        std::fs::write(&record, "0 1 2").unwrap();
        let g = steer(nic.clone(), "eth0", 4, Some(8), "up0", dir.path()).expect("changed");
        assert_eq!(nic.table().unwrap(), spread(128, 4));
        drop(g);
        assert_eq!(
            nic.table().unwrap(),
            original,
            "the table as this uplink found it"
        );
    }

    #[test]
    fn a_bad_name_is_refused_before_any_call() {
        assert!(EthtoolRxfh.read("a-name-far-too-long").is_err());
        assert!(EthtoolRxfh.write("", &[0]).is_err());
    }
}
