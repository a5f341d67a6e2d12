//! The state file: the ports added at run time (`vadapt add-port`, the
//! libvirt hook), kept across restarts, crashes and upgrades.
//!
//! The file is `ports.toml` in the state folder (`state_dir`,
//! `--state-dir`; `vadapt serve` defaults to `$STATE_DIRECTORY` under
//! systemd, else `/var/lib/vadapt`), written in the config file's own port
//! sections under a format version:
//!
//! ```toml
//! version = 1
//!
//! [[vm]]
//! name = "vm7"
//! socket = "/run/vadapt/vm7.sock"
//! ```
//!
//! - **Atomic.** Each change writes the whole file to a temporary file in
//!   the same folder, fsyncs it, renames it over `ports.toml` and fsyncs
//!   the folder, before the control request is answered: a port
//!   acknowledged is on disk, and a reader sees the old file or the new
//!   one, never a part.
//! - **Versioned.** [`FORMAT_VERSION`] is written; a file of a newer version
//!   is refused ([`PortStateError::NewerVersion`]), never read as this one.
//! - **Never silently dropped.** A file that cannot be used (unreadable,
//!   not TOML, not this schema, a newer version, invalid ports) is moved
//!   aside to `ports.toml.corrupt-<unix seconds>` and the daemon starts
//!   with the config file's ports, logging which file and why; with
//!   `state_strict` (`--strict`) it refuses to start instead and leaves
//!   the file where it is.
//! - **One daemon per folder.** `ports.lock` in the folder is locked
//!   (`flock`) for the daemon's life from its start if the state file
//!   exists, else from its first write: a second daemon on the same folder
//!   is refused then; the kernel drops the lock of a killed one.

use crate::config::{
    DaemonConfig, LocalPortConfig, PortSpec, TapPortConfig, UplinkPortConfig, VmPortConfig,
};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The format version this build writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// The state file's name in the state folder.
pub const FILE_NAME: &str = "ports.toml";
/// The lock file's name in the state folder.
const LOCK_NAME: &str = "ports.lock";

/// Why the state file could not be used, read or written.
#[derive(Debug, thiserror::Error)]
pub enum PortStateError {
    /// The state folder could not be created.
    #[error("cannot create the state folder {path}")]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot lock {path}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Another daemon holds the state folder.
    #[error(
        "the state folder {path} is in use by another `vadapt serve` (its {LOCK_NAME} is \
         locked): give this one another --state-dir"
    )]
    InUse {
        /// The folder.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("cannot read the state file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML of the state file's schema.
    #[error("the state file {path} is corrupt: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message (it names the line).
        message: String,
    },
    /// The file has no format version.
    #[error("the state file {path} has no `version`: not a state file vadapt wrote")]
    NoVersion {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by a newer vadapt.
    #[error(
        "the state file {path} has format version {found}; this vadapt reads version \
         {FORMAT_VERSION} and older: run the newer vadapt, or move the file away"
    )]
    NewerVersion {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The file's ports are invalid together (two of one name, ...).
    #[error("the state file {path} holds invalid ports")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::config::ConfigError,
    },
    /// The file could not be written (the change was not made).
    #[error("cannot write the state file {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// An unusable file could not be moved aside.
    #[error("cannot move the unusable state file {path} aside to {to}")]
    SetAside {
        /// The file.
        path: PathBuf,
        /// Where it was to go.
        to: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl PortStateError {
    /// Whether the file itself is unusable (so it is moved aside, or start
    /// refused under `--strict`), rather than the folder or a write failing.
    pub fn is_unusable_file(&self) -> bool {
        matches!(
            self,
            PortStateError::Read { .. }
                | PortStateError::Parse { .. }
                | PortStateError::NoVersion { .. }
                | PortStateError::NewerVersion { .. }
                | PortStateError::Invalid { .. }
        )
    }
}

/// The file's layout: its version, then the ports by kind, as the config
/// file spells them.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLayout {
    version: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    vm: Vec<VmPortConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    sink: Vec<LocalPortConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    echo: Vec<LocalPortConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tap: Vec<TapPortConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    uplink: Vec<UplinkPortConfig>,
}

/// The version alone, read before the rest so that a newer file's new keys
/// are reported as a newer version, not as corruption.
#[derive(Deserialize)]
struct VersionOnly {
    version: Option<u32>,
}

/// The state file's text for `ports`.
fn encode(ports: &[PortSpec]) -> String {
    let mut cfg = DaemonConfig::default();
    for p in ports {
        cfg.add_port(p.clone());
    }
    let layout = FileLayout {
        version: FORMAT_VERSION,
        vm: cfg.vm,
        sink: cfg.sink,
        echo: cfg.echo,
        tap: cfg.tap,
        uplink: cfg.uplink,
    };
    let body = toml::to_string(&layout).expect("port configurations serialize to TOML");
    format!(
        "# Ports added at run time (vadapt add-port, the libvirt hook), written by\n\
         # vadapt serve: restored at start beside the config file's ports, which win\n\
         # on a name clash. Change it with add-port/del-port, not by hand.\n{body}"
    )
}

/// The ports in `text`, the contents of `path`.
fn decode(text: &str, path: &Path) -> Result<Vec<PortSpec>, PortStateError> {
    let parse = |message: String| PortStateError::Parse {
        path: path.to_owned(),
        message,
    };
    let version = toml::from_str::<VersionOnly>(text)
        .map_err(|e| parse(one_line(&e)))?
        .version;
    match version {
        None => {
            return Err(PortStateError::NoVersion {
                path: path.to_owned(),
            })
        }
        Some(found) if found > FORMAT_VERSION => {
            return Err(PortStateError::NewerVersion {
                path: path.to_owned(),
                found,
            })
        }
        Some(0) => return Err(parse("format version 0 was never written".into())),
        Some(_) => {}
    }
    let layout: FileLayout = toml::from_str(text).map_err(|e| parse(one_line(&e)))?;
    let cfg = DaemonConfig {
        vm: layout.vm,
        sink: layout.sink,
        echo: layout.echo,
        tap: layout.tap,
        uplink: layout.uplink,
        ..DaemonConfig::default()
    };
    cfg.validate_ports_and_settings()
        .map_err(|source| PortStateError::Invalid {
            path: path.to_owned(),
            source,
        })?;
    Ok(cfg.ports())
}

/// toml's error in one line (its `Display` quotes the line with a caret
/// under it, which a log line must not carry): where, then what.
fn one_line(e: &toml::de::Error) -> String {
    let text = e.to_string();
    let at = text.lines().next().unwrap_or_default();
    let what = e.message().trim().replace('\n', "; ");
    format!("{at}: {what}")
}

/// Write `bytes` to `path` so that a reader, or a restart after a crash at
/// any point, finds the old contents or the new ones: a temporary file in
/// the same folder, fsynced, renamed over `path`, the folder fsynced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

/// What [`PortStore::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The store, holding the folder's lock.
    pub store: PortStore,
    /// The ports the file holds (empty when it was absent or set aside).
    pub ports: Vec<PortSpec>,
    /// The file was unusable: why, and where it was moved.
    pub set_aside: Option<(PortStateError, PathBuf)>,
}

/// The state file of one daemon: its path, the ports written in it, and the
/// folder's lock.
#[derive(Debug)]
pub struct PortStore {
    path: PathBuf,
    /// The ports as the file holds them now.
    ports: Vec<PortSpec>,
    /// The folder's lock, held for the daemon's life once taken (`None`:
    /// not yet; the next write takes it).
    lock: Option<File>,
}

impl PortStore {
    /// Open the state file in `dir` and read it. An unusable file is moved
    /// aside (see the module docs) unless `strict`, in which case it is the
    /// error. The folder's lock is taken now if the file exists (this
    /// daemon takes its ports over), else at the first write, which also
    /// creates the folder (0700): a daemon that never adds a port at run
    /// time creates and locks nothing, so daemons of tests and tools that
    /// share the default folder do not refuse one another.
    pub fn open(dir: &Path, strict: bool) -> Result<Opened, PortStateError> {
        let path = dir.join(FILE_NAME);
        let lock = match path.symlink_metadata() {
            Ok(_) => Some(lock(dir)?),
            Err(_) => None,
        };
        let mut set_aside = None;
        let ports = match read(&path) {
            Ok(ports) => ports,
            Err(e) if strict => return Err(e),
            Err(e) => {
                let to = set_aside_path(&path);
                std::fs::rename(&path, &to).map_err(|source| PortStateError::SetAside {
                    path: path.clone(),
                    to: to.clone(),
                    source,
                })?;
                set_aside = Some((e, to));
                Vec::new()
            }
        };
        Ok(Opened {
            store: PortStore {
                path,
                ports: ports.clone(),
                lock,
            },
            ports,
            set_aside,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The port named `name` in the file.
    pub fn get(&self, name: &str) -> Option<&PortSpec> {
        self.ports.iter().find(|p| p.name() == name)
    }

    /// Write the file with `port` in it (in place of one of its name);
    /// on an error the file and the store are as they were.
    pub fn put(&mut self, port: PortSpec) -> Result<(), PortStateError> {
        let mut next = self.ports.clone();
        match next.iter_mut().find(|p| p.name() == port.name()) {
            Some(p) => *p = port,
            None => next.push(port),
        }
        self.save(next)
    }

    /// Write the file without the port named `name`; `Ok(false)`: it was
    /// not in it (nothing written).
    pub fn remove(&mut self, name: &str) -> Result<bool, PortStateError> {
        if self.get(name).is_none() {
            return Ok(false);
        }
        let next = self.ports.iter().filter(|p| p.name() != name).cloned();
        self.save(next.collect())?;
        Ok(true)
    }

    fn save(&mut self, ports: Vec<PortSpec>) -> Result<(), PortStateError> {
        if self.lock.is_none() {
            let dir = self.path.parent().unwrap_or(Path::new("."));
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| PortStateError::CreateDir {
                    path: dir.to_owned(),
                    source,
                })?;
            self.lock = Some(lock(dir)?);
        }
        write_atomically(&self.path, encode(&ports).as_bytes()).map_err(|source| {
            PortStateError::Write {
                path: self.path.clone(),
                source,
            }
        })?;
        self.ports = ports;
        Ok(())
    }
}

/// Lock `dir`'s lock file for this process's life.
fn lock(dir: &Path) -> Result<File, PortStateError> {
    let path = dir.join(LOCK_NAME);
    let err = |source| PortStateError::Lock {
        path: path.clone(),
        source,
    };
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(err)?;
    // SAFETY: flock takes an advisory lock on the open file `f` owns (its
    // descriptor is valid for the call); no memory is passed. The lock goes
    // with the descriptor: when the daemon drops `f`, exits or is killed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(f);
    }
    match std::io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(PortStateError::InUse {
            path: dir.to_owned(),
        }),
        e => Err(err(e)),
    }
}

/// The ports in the file at `path`; none when there is no file (or no
/// folder).
pub fn read(path: &Path) -> Result<Vec<PortSpec>, PortStateError> {
    use std::io::ErrorKind::{NotADirectory, NotFound};
    match std::fs::read_to_string(path) {
        Ok(text) => decode(&text, path),
        Err(e) if matches!(e.kind(), NotFound | NotADirectory) => Ok(Vec::new()),
        Err(source) => Err(PortStateError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Where an unusable file at `path` is moved: `path.corrupt-<unix
/// seconds>`, with `.N` added if that is taken.
fn set_aside_path(path: &Path) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.corrupt-{secs}", path.display());
    let mut to = PathBuf::from(&base);
    let mut n = 1;
    while to.symlink_metadata().is_ok() {
        to = PathBuf::from(format!("{base}.{n}"));
        n += 1;
    }
    to
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_local_spec, parse_tap_spec, parse_vm_spec};

    fn vm(spec: &str) -> PortSpec {
        PortSpec::Vm(Box::new(parse_vm_spec(spec).unwrap()))
    }

    fn rich_ports() -> Vec<PortSpec> {
        vec![
            vm(
                "name=vm1,socket=/run/v/vm1.sock,queues=2,mac=52:54:00:00:00:01,\
                allowed_ips=10.0.0.5+fd00::5/128,policy=eekbp,storm_control_pps=50,vlan=7,\
                mode=client,mtu=9000",
            ),
            vm("name=vm2,socket=/run/v/vm2.sock"),
            PortSpec::Sink(parse_local_spec("--sink", "s0,mac=02:00:00:00:00:05").unwrap()),
            PortSpec::Echo(parse_local_spec("--echo", "e0").unwrap()),
            PortSpec::Tap(parse_tap_spec("t0,trunks=5:7-9,native_vlan=3").unwrap()),
        ]
    }

    #[test]
    fn every_kind_of_port_survives_the_file_unchanged() {
        let ports = rich_ports();
        let text = encode(&ports);
        assert!(text.contains("version = 1"), "{text}");
        assert_eq!(decode(&text, Path::new("p")).unwrap(), ports);
        assert!(decode(&encode(&[]), Path::new("p")).unwrap().is_empty());
    }

    #[test]
    fn a_file_of_a_newer_version_is_refused_not_misread() {
        let p = Path::new("/x/ports.toml");
        let e = decode("version = 2\n[[widget]]\nname = \"w\"\n", p).unwrap_err();
        assert!(
            matches!(e, PortStateError::NewerVersion { found: 2, .. }),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("/x/ports.toml") && msg.contains("version 2"),
            "{msg}"
        );
        let e = decode("[[vm]]\nname = \"a\"\nsocket = \"/a\"\n", p).unwrap_err();
        assert!(matches!(e, PortStateError::NoVersion { .. }), "{e}");
        let e = decode("version = 0\n", p).unwrap_err();
        assert!(matches!(e, PortStateError::Parse { .. }), "{e}");
    }

    #[test]
    fn corrupt_and_invalid_files_name_the_file_and_why() {
        let p = Path::new("/x/ports.toml");
        let cut = encode(&rich_ports());
        // A file cut in the middle of a value, as a non-atomic write leaves.
        let half = &cut[..cut.find("socket = \"/run/v/vm2").unwrap() + 14];
        let e = decode(half, p).unwrap_err();
        assert!(matches!(e, PortStateError::Parse { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("/x/ports.toml") && msg.contains("line "),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one line for the log: {msg}");
        let e = decode("version = 1\n[[vm]]\nname = \"a\"\nsockett = \"/a\"\n", p).unwrap_err();
        assert!(matches!(e, PortStateError::Parse { .. }), "{e}");
        let twice = "version = 1\n[[sink]]\nname = \"a\"\n[[echo]]\nname = \"a\"\n";
        let e = decode(twice, p).unwrap_err();
        assert!(matches!(e, PortStateError::Invalid { .. }), "{e}");
        assert!(e.is_unusable_file());
    }

    #[test]
    fn writes_replace_the_file_whole_and_leave_no_temporary() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        let opened = PortStore::open(&dir, false).unwrap();
        assert!(opened.ports.is_empty() && opened.set_aside.is_none());
        let mut store = opened.store;
        for p in rich_ports() {
            store.put(p).unwrap();
        }
        assert_eq!(read(store.path()).unwrap(), rich_ports());
        assert!(store.remove("vm1").unwrap());
        assert!(!store.remove("vm1").unwrap(), "not there any more");
        store.put(vm("name=vm2,socket=/run/v/other.sock")).unwrap();
        let back = read(store.path()).unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back[0], vm("name=vm2,socket=/run/v/other.sock"));
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [LOCK_NAME, FILE_NAME]);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir), mode(store.path())), (0o700, 0o600));
    }

    #[test]
    fn a_failed_write_changes_neither_the_file_nor_the_store() {
        let t = tempfile::tempdir().unwrap();
        let mut store = PortStore::open(t.path(), false).unwrap().store;
        store.put(vm("name=a,socket=/a")).unwrap();
        // The temporary's name taken by a folder: the write fails.
        std::fs::create_dir(t.path().join(".ports.toml.tmp")).unwrap();
        let e = store.put(vm("name=b,socket=/b")).unwrap_err();
        assert!(matches!(e, PortStateError::Write { .. }), "{e}");
        assert!(store.get("b").is_none());
        assert!(store.remove("a").is_err());
        assert!(store.get("a").is_some());
        assert_eq!(read(store.path()).unwrap(), [vm("name=a,socket=/a")]);
    }

    #[test]
    fn an_unusable_file_is_moved_aside_or_refused_under_strict() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join(FILE_NAME);
        let garbage = b"version = 1\n[[vm]\nname = ";
        std::fs::write(&file, garbage).unwrap();
        // Strict: refused, and the file left where it is.
        let e = PortStore::open(t.path(), true).unwrap_err();
        assert!(
            e.is_unusable_file() && e.to_string().contains("corrupt"),
            "{e}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), garbage);
        // Otherwise: moved aside whole, and the store starts empty.
        let opened = PortStore::open(t.path(), false).unwrap();
        assert!(opened.ports.is_empty());
        let (why, to) = opened.set_aside.unwrap();
        assert!(matches!(why, PortStateError::Parse { .. }), "{why}");
        assert!(
            to.to_string_lossy().contains("ports.toml.corrupt-"),
            "{}",
            to.display()
        );
        assert_eq!(std::fs::read(&to).unwrap(), garbage);
        assert!(!file.exists());
        drop(opened.store);
        // A newer version the same way; a second one the same second gets
        // a name of its own.
        std::fs::write(&file, "version = 9\n").unwrap();
        let opened = PortStore::open(t.path(), false).unwrap();
        let (why, to2) = opened.set_aside.unwrap();
        assert!(matches!(why, PortStateError::NewerVersion { .. }), "{why}");
        assert_ne!(to, to2);
        assert_eq!(std::fs::read(&to2).unwrap(), b"version = 9\n");
    }

    #[test]
    fn a_second_daemon_on_one_folder_is_refused_once_there_is_a_file() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("state");
        // No file: neither takes the folder, until one writes.
        let mut first = PortStore::open(&dir, false).unwrap().store;
        let mut second = PortStore::open(&dir, false).unwrap().store;
        assert!(!dir.exists(), "nothing created before a write");
        first.put(vm("name=a,socket=/a")).unwrap();
        let e = second.put(vm("name=b,socket=/b")).unwrap_err();
        assert!(matches!(e, PortStateError::InUse { .. }), "{e}");
        assert!(e.to_string().contains("--state-dir"), "{e}");
        // With the file there, a third is refused at its start.
        let e = PortStore::open(&dir, false).unwrap_err();
        assert!(matches!(e, PortStateError::InUse { .. }), "{e}");
        drop((first, second));
        let opened = PortStore::open(&dir, false).expect("free once the first is gone");
        assert_eq!(opened.ports, [vm("name=a,socket=/a")]);
    }

    #[test]
    fn a_folder_that_cannot_be_made_fails_the_first_write_not_the_start() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("file"), b"").unwrap();
        let dir = t.path().join("file/state");
        let mut store = PortStore::open(&dir, false).unwrap().store;
        let e = store.put(vm("name=a,socket=/a")).unwrap_err();
        assert!(matches!(e, PortStateError::CreateDir { .. }), "{e}");
        assert!(e.to_string().contains("file/state"), "{e}");
    }
}
