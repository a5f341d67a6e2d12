//! A listening Unix socket at a path vadapt owns: bound only where there is
//! nothing or a stale socket, and removed only while it is still the socket
//! that was bound. Both the VM ports' sockets and the control socket are
//! made here.
//!
//! vadapt runs as root. A socket path comes from the operator's file, or
//! from whoever may call `vadapt add-port` (the libvirt hook passes a
//! domain XML's `<source path>`), so a path is no promise that the file
//! there is vadapt's to replace or delete:
//!
//! * A path that is not absolute or does not fit `sun_path`
//!   ([`MAX_PATH_BYTES`]) is refused before anything is looked at or made.
//! * Anything there that is not a socket (a regular file, a symbolic link,
//!   dangling or not, a FIFO, a folder, a device) is refused with its kind
//!   named, and left as it is. Nothing is created, not even the socket's
//!   folder: every check runs before [`crate::socket_dir::ensure`].
//! * A socket someone listens on is in use: a non-blocking connect that
//!   succeeds, or that finds the listener's backlog full (`EAGAIN`), refuses
//!   it at once; a listener that never accepts cannot hold the caller (the
//!   control thread, for `vadapt add-port`) for seconds.
//! * A socket nobody listens on (`ECONNREFUSED`) is stale: left by a daemon
//!   that died, and the restart and upgrade path needs it replaced. It is
//!   removed, after checking that the path still holds that very socket.
//! * Once bound, the socket's device and inode number are recorded in an
//!   [`OwnedSocket`], which holds the inode open (`O_PATH`) so that its
//!   number cannot go to another file meanwhile (ext4 reuses a freed one at
//!   once). Its mode and group are set through that descriptor, never
//!   through the path (a link put there meanwhile is not followed).
//!   [`OwnedSocket::remove`] removes the path only while it is a socket
//!   with that device and inode: whatever was moved onto the path since is
//!   someone else's, and stays.
//!
//! What no check here can close: a process that may write into the
//! socket's folder can swap the path between a check and the unlink that
//! follows it (a few µs; `unlink` takes no inode). Only a folder no such
//! process can write into closes that: `/run/vadapt`, 0755 and root's, as
//! packaged.
//!
//! A daemon keeps what it owns in a [`SocketLedger`], which anyone holding
//! a clone can empty ([`SocketLedger::remove_all`]) without waiting on the
//! daemon's other locks.

use crate::socket_dir;
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use vadapt_qemu::peer_text::PeerText;

/// The longest socket path, bytes: `sun_path` holds 108, and the last one is
/// the terminating NUL.
pub const MAX_PATH_BYTES: usize = 107;

/// What is at a path, in words for an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A symbolic link (never followed).
    Symlink,
    /// A named pipe.
    Fifo,
    /// A folder.
    Folder,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A Unix socket.
    Socket,
}

impl FileKind {
    /// The kind of `t`, as `symlink_metadata` gives it.
    pub fn of(t: std::fs::FileType) -> FileKind {
        if t.is_symlink() {
            FileKind::Symlink
        } else if t.is_dir() {
            FileKind::Folder
        } else if t.is_fifo() {
            FileKind::Fifo
        } else if t.is_socket() {
            FileKind::Socket
        } else if t.is_char_device() {
            FileKind::CharDevice
        } else if t.is_block_device() {
            FileKind::BlockDevice
        } else {
            FileKind::File
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::File => "a regular file",
            FileKind::Symlink => "a symbolic link",
            FileKind::Fifo => "a FIFO",
            FileKind::Folder => "a folder",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Socket => "a socket",
        })
    }
}

/// `path` escaped for a message (see [`PeerText`]).
fn shown(path: &Path) -> PeerText {
    PeerText::from_path(path)
}

/// Why a socket could not be bound at a path. Each names the path, escaped.
#[derive(Debug, thiserror::Error)]
pub enum SocketFileError {
    /// The path is relative: it would resolve against the daemon's working
    /// directory (`/` under systemd).
    #[error("socket path {} is relative: a socket path must be absolute", shown(.0))]
    Relative(PathBuf),
    /// The path does not fit `sun_path`.
    #[error("socket path {} is {len} bytes: a Unix socket path holds at most {MAX_PATH_BYTES}", shown(.path))]
    TooLong {
        /// The path.
        path: PathBuf,
        /// Its length, bytes.
        len: usize,
    },
    /// Something other than a socket is there; it is left as it is.
    #[error("{} is {kind}, not a socket: vadapt neither replaces nor removes it", shown(.path))]
    NotASocket {
        /// The path.
        path: PathBuf,
        /// What is there.
        kind: FileKind,
    },
    /// A process listens on the socket there.
    #[error("socket {} is in use by another process", shown(.0))]
    InUse(PathBuf),
    /// What is at the path could not be looked at.
    #[error("cannot look at socket path {}", shown(.path))]
    Inspect {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Whether a process listens on the socket there could not be told.
    #[error("cannot tell whether socket {} is in use", shown(.path))]
    Probe {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The stale socket there could not be removed.
    #[error("cannot remove stale socket {}", shown(.path))]
    RemoveStale {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The socket's folder did not exist and could not be created, or
    /// exists and is no folder.
    #[error("cannot create socket folder {}", shown(.dir))]
    CreateDir {
        /// The folder.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `bind` or `listen` failed.
    #[error("cannot listen on socket {}", shown(.path))]
    Bind {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The socket was bound but could not be given its mode or group, or
    /// made non-blocking; it was removed again.
    #[error("cannot set up socket {}", shown(.path))]
    Setup {
        /// The path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Who may connect to a socket: its mode, and the group it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Permission bits, e.g. 0o600.
    pub mode: u32,
    /// The group the socket (and any folder made for it) is given; `None`:
    /// the daemon's.
    pub gid: Option<u32>,
}

/// Bind a listening, non-blocking socket at `path` with `access`, as the
/// module documentation says: refused (and nothing made) unless the path
/// is absolute, fits, and holds nothing or a stale socket. A missing folder
/// is created as [`socket_dir::ensure`] says and removed again if the bind
/// fails. The socket's path, device and inode come back as its
/// [`OwnedSocket`], the only way it is removed.
pub fn bind(path: &Path, access: Access) -> Result<(UnixListener, OwnedSocket), SocketFileError> {
    check_path(path)?;
    clear_stale(path)?;
    let made = socket_dir::ensure(path, access.gid)
        .map_err(|(dir, source)| SocketFileError::CreateDir { dir, source })?;
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(source) => {
            made.undo();
            return Err(SocketFileError::Bind {
                path: path.to_owned(),
                source,
            });
        }
    };
    match adopt(path, &listener, access) {
        Ok(owned) => {
            made.log();
            Ok((listener, owned))
        }
        Err((owned, source)) => {
            // Removed only if it is still the socket just bound.
            if let Some(owned) = owned {
                remove_and_say(owned);
            }
            made.undo();
            Err(SocketFileError::Setup {
                path: path.to_owned(),
                source,
            })
        }
    }
}

/// Absolute, and short enough for `sun_path`.
fn check_path(path: &Path) -> Result<(), SocketFileError> {
    if !path.is_absolute() {
        return Err(SocketFileError::Relative(path.to_owned()));
    }
    let len = path.as_os_str().as_bytes().len();
    if len > MAX_PATH_BYTES {
        return Err(SocketFileError::TooLong {
            path: path.to_owned(),
            len,
        });
    }
    Ok(())
}

/// Make `path` free to bind, or say why it is not: nothing there is fine
/// (including a parent that is no folder: `ensure` names that one), a
/// stale socket is removed, anything else refused.
fn clear_stale(path: &Path) -> Result<(), SocketFileError> {
    let found = look(path).map_err(|source| SocketFileError::Inspect {
        path: path.to_owned(),
        source,
    })?;
    // Nothing there, or a parent that is no folder (`ensure` names it).
    let Some((pin, meta)) = found else {
        return Ok(());
    };
    let kind = FileKind::of(meta.file_type());
    if kind != FileKind::Socket {
        return Err(SocketFileError::NotASocket {
            path: path.to_owned(),
            kind,
        });
    }
    match probe(path) {
        Ok(Probe::Listening) => Err(SocketFileError::InUse(path.to_owned())),
        Ok(Probe::Gone) => Ok(()),
        Ok(Probe::Stale) => {
            // The very socket probed, or nothing: never what replaced it.
            let stale = OwnedSocket {
                path: path.to_owned(),
                pin,
                dev: meta.dev(),
                ino: meta.ino(),
            };
            match stale.remove() {
                Removal::Removed | Removal::Gone => {
                    tracing::info!(
                        "removed the stale socket {} (nobody listened on it) to bind it again",
                        shown(path)
                    );
                    Ok(())
                }
                // Another socket took its place meanwhile: whoever put it
                // there uses it, and it is not the one found stale.
                Removal::Replaced(FileKind::Socket) => Err(SocketFileError::InUse(path.to_owned())),
                Removal::Replaced(kind) => Err(SocketFileError::NotASocket {
                    path: path.to_owned(),
                    kind,
                }),
                Removal::Failed(source) => Err(SocketFileError::RemoveStale {
                    path: path.to_owned(),
                    source,
                }),
            }
        }
        Err(source) => Err(SocketFileError::Probe {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Whether a process listens behind a socket file.
enum Probe {
    /// It accepted, or its backlog is full.
    Listening,
    /// Nobody listens (`ECONNREFUSED`).
    Stale,
    /// The file went away in between.
    Gone,
}

/// Connect to `path` without waiting: a listener whose backlog is full
/// answers `EAGAIN` at once, where a blocking connect waits (7.5 s were
/// measured) for room that a listener that never accepts never makes.
fn probe(path: &Path) -> std::io::Result<Probe> {
    match connect_nonblocking(path) {
        Ok(_) => Ok(Probe::Listening),
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(Probe::Listening),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(Probe::Listening),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(Probe::Stale),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Probe::Gone),
        Err(e) => Err(e),
    }
}

/// Connect without ever blocking: a peer whose listen backlog is full (it
/// does not accept) is `WouldBlock`, not a hung thread. Used both to probe a
/// socket before replacing it and by a client-mode port connecting to its
/// frontend's socket.
pub fn connect_nonblocking(path: &Path) -> std::io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let s = Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None)?;
    s.set_nonblocking(true)?;
    s.connect(&SockAddr::unix(path)?)?;
    Ok(s.into())
}

/// Record the socket just bound at `path` (its device and inode, from a
/// descriptor opened without following links, kept to pin the inode),
/// then set its group and mode through that descriptor and make `listener`
/// non-blocking. On failure, the owned socket (if it was recorded) comes
/// back to be removed.
fn adopt(
    path: &Path,
    listener: &UnixListener,
    access: Access,
) -> Result<OwnedSocket, (Option<OwnedSocket>, std::io::Error)> {
    let (pin, meta) = match look(path) {
        Ok(Some(found)) => found,
        Ok(None) => return Err((None, ErrorKind::NotFound.into())),
        Err(e) => return Err((None, e)),
    };
    if !meta.file_type().is_socket() {
        // Something took the socket's place between bind and open: that is
        // not ours to remove (and ours is gone).
        return Err((
            None,
            std::io::Error::new(
                ErrorKind::AlreadyExists,
                "the socket was replaced right after it was bound",
            ),
        ));
    }
    let owned = OwnedSocket {
        path: path.to_owned(),
        pin,
        dev: meta.dev(),
        ino: meta.ino(),
    };
    let setup = || -> std::io::Result<()> {
        if let Some(gid) = access.gid {
            chown_fd(&owned.pin, gid)?;
        }
        chmod_fd(&owned.pin, access.mode)?;
        listener.set_nonblocking(true)
    };
    match setup() {
        Ok(()) => Ok(owned),
        Err(e) => Err((Some(owned), e)),
    }
}

/// What is at `path` itself (a symbolic link there is not followed): an
/// `O_PATH` descriptor of it, which reads and writes nothing but holds the
/// inode, and its metadata; `None` when nothing is there (or a parent is no
/// folder).
fn look(path: &Path) -> std::io::Result<Option<(File, std::fs::Metadata)>> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call; open
    // with O_PATH opens nothing for reading or writing (a FIFO does not
    // block, a device is not touched).
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            ErrorKind::NotFound | ErrorKind::NotADirectory => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // fstat works on an O_PATH descriptor (Linux ≥ 3.6).
    let meta = file.metadata()?;
    Ok(Some((file, meta)))
}

/// Give the inode behind `fd` (an `O_PATH` descriptor) group `gid`.
fn chown_fd(fd: &File, gid: u32) -> std::io::Result<()> {
    // SAFETY: `fd` is open; the empty path with AT_EMPTY_PATH names the
    // descriptor's own inode (Linux ≥ 2.6.39); uid -1 leaves the owner.
    let r = unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            u32::MAX,
            gid,
            libc::AT_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Give the inode behind `fd` (an `O_PATH` descriptor) `mode`. `fchmod`
/// refuses `O_PATH` descriptors, so this goes through `/proc/self/fd`,
/// whose entry leads to that inode without walking the socket's path (as
/// glibc's `fchmodat(AT_SYMLINK_NOFOLLOW)` does).
fn chmod_fd(fd: &File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::set_permissions(proc_path, std::fs::Permissions::from_mode(mode))
}

/// A socket file vadapt bound: its path, and the device and inode it had
/// then. Dropping it leaves the file (a daemon that is killed cannot remove
/// it either: the next start replaces it as stale); [`OwnedSocket::remove`]
/// removes it.
#[derive(Debug)]
pub struct OwnedSocket {
    path: PathBuf,
    /// An `O_PATH` descriptor of the socket's inode, held so that the inode
    /// is not freed while it is owned: a filesystem that reuses inode
    /// numbers (ext4 does, at once) could otherwise give a socket someone
    /// put on the path after removing ours the very `(dev, ino)` recorded.
    pin: File,
    /// `st_dev` at bind time.
    dev: u64,
    /// `st_ino` at bind time.
    ino: u64,
}

/// What [`OwnedSocket::remove`] did.
#[derive(Debug)]
pub enum Removal {
    /// The socket was removed.
    Removed,
    /// Nothing was at the path any more.
    Gone,
    /// Something else is at the path now (of this kind): left there.
    Replaced(FileKind),
    /// The path could not be looked at or removed.
    Failed(std::io::Error),
}

impl OwnedSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Remove the path if it is still this socket (a socket with the same
    /// device and inode); leave whatever else is there. Nothing is logged:
    /// the caller says what happened ([`SocketLedger`] does).
    pub fn remove(self) -> Removal {
        // The socket's inode stays pinned until this returns.
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Removal::Gone,
            Err(e) => return Removal::Failed(e),
        };
        let kind = FileKind::of(meta.file_type());
        if kind != FileKind::Socket || meta.dev() != self.dev || meta.ino() != self.ino {
            return Removal::Replaced(kind);
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Removal::Removed,
            Err(e) if e.kind() == ErrorKind::NotFound => Removal::Gone,
            Err(e) => Removal::Failed(e),
        }
    }
}

/// Remove `socket` if it is still the one bound; one line if that left
/// something behind, nothing if it did what was meant.
fn remove_and_say(socket: OwnedSocket) -> Removal {
    let path = socket.path.clone();
    let r = socket.remove();
    match &r {
        Removal::Removed => {}
        Removal::Gone => tracing::debug!("socket {} was already gone", shown(&path)),
        Removal::Replaced(kind) => tracing::warn!(
            "left {}: it is now {kind}, not the socket vadapt bound there",
            shown(&path)
        ),
        Removal::Failed(e) => {
            tracing::warn!(error = %e, "cannot remove socket {}", shown(&path))
        }
    }
    r
}

/// The sockets a daemon owns now, shared: the ports and the control socket
/// put theirs in as they bind them and take them out as they remove them,
/// and whoever holds a clone can remove all that are left
/// ([`SocketLedger::remove_all`]), as `vadapt serve` does when an orderly
/// shutdown misses its deadline.
///
/// Lock order: its mutex is a leaf. It is taken under the port book's
/// lock (a port added or removed), never the other way round, and nothing
/// else is locked, and no file touched, while it is held: a removal takes
/// its entries out first and removes the files after. So it never waits on
/// a stuck port operation.
#[derive(Clone, Debug, Default)]
pub struct SocketLedger {
    owned: Arc<Mutex<Vec<OwnedSocket>>>,
}

impl SocketLedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OwnedSocket>> {
        self.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `socket`, to be removed by [`SocketLedger::release`] or
    /// [`SocketLedger::remove_all`].
    pub fn keep(&self, socket: OwnedSocket) {
        self.lock().push(socket);
    }

    /// Remove the socket kept for `path`, if it is still the one bound
    /// there (one WARN line otherwise); `None` if none is kept for it
    /// (already removed, or never bound).
    pub fn release(&self, path: &Path) -> Option<Removal> {
        let taken = {
            let mut owned = self.lock();
            let i = owned.iter().position(|s| s.path == path)?;
            owned.swap_remove(i)
        };
        Some(remove_and_say(taken))
    }

    /// Remove every socket still kept, each only if it is still the one
    /// bound (one WARN line for each that is not); returns how many were
    /// removed. Takes no lock but the ledger's own, and that only to take
    /// the entries out: callable from any thread, whatever else is stuck.
    pub fn remove_all(&self) -> usize {
        let taken = std::mem::take(&mut *self.lock());
        let mut removed = 0;
        for s in taken {
            removed += usize::from(matches!(remove_and_say(s), Removal::Removed));
        }
        removed
    }

    /// The paths of the sockets kept now.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.lock().iter().map(|s| s.path.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    const PRIVATE: Access = Access {
        mode: 0o600,
        gid: None,
    };

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// Binding at `path` is refused as `kind`, naming the path.
    fn refused_as(path: &Path, kind: FileKind) {
        match bind(path, PRIVATE) {
            Err(e @ SocketFileError::NotASocket { .. }) => {
                let SocketFileError::NotASocket { kind: k, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*k, kind, "{e}");
                let text = e.to_string();
                assert!(
                    text.contains(&path.display().to_string()) && text.contains(&kind.to_string()),
                    "{text}"
                );
            }
            other => panic!("{}: {other:?}", path.display()),
        }
    }

    #[test]
    fn what_is_not_a_socket_is_refused_named_and_left_as_it_is() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::write(d.join("x.txt"), b"precious").unwrap();
        refused_as(&d.join("x.txt"), FileKind::File);

        std::os::unix::fs::symlink(d.join("x.txt"), d.join("to-file")).unwrap();
        refused_as(&d.join("to-file"), FileKind::Symlink);

        // A dangling link into a folder that does not exist: neither the
        // link goes nor the folder it points into is made.
        std::os::unix::fs::symlink(d.join("nowhere/target.sock"), d.join("dangling")).unwrap();
        refused_as(&d.join("dangling"), FileKind::Symlink);

        mkfifo(&d.join("fifo"));
        refused_as(&d.join("fifo"), FileKind::Fifo);

        std::fs::create_dir(d.join("folder")).unwrap();
        std::fs::write(d.join("folder/inside"), b"").unwrap();
        refused_as(&d.join("folder"), FileKind::Folder);

        assert_eq!(
            names(d),
            ["dangling", "fifo", "folder", "to-file", "x.txt"],
            "nothing made, nothing removed"
        );
        assert_eq!(std::fs::read(d.join("x.txt")).unwrap(), b"precious");
        assert_eq!(std::fs::read(d.join("to-file")).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(d.join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::symlink_metadata(d.join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(names(&d.join("folder")), ["inside"]);
        let null = std::fs::symlink_metadata("/dev/null").unwrap();
        assert_eq!(FileKind::of(null.file_type()), FileKind::CharDevice);
    }

    #[test]
    fn a_refused_path_in_a_missing_folder_makes_no_folder() {
        let t = tempfile::tempdir().unwrap();
        // Too long for sun_path: before, the folders were made, then bind
        // failed and left them.
        let long = t.path().join("new/sub").join("s".repeat(MAX_PATH_BYTES));
        let e = bind(&long, PRIVATE).unwrap_err();
        assert!(matches!(e, SocketFileError::TooLong { .. }), "{e}");
        assert!(e.to_string().contains("at most 107"), "{e}");
        let e = bind(Path::new("new/vm.sock"), PRIVATE).unwrap_err();
        assert!(matches!(e, SocketFileError::Relative(_)), "{e}");
        assert!(e.to_string().contains("must be absolute"), "{e}");
        assert!(!Path::new("new").exists());
        assert_eq!(names(t.path()), Vec::<String>::new());
    }

    #[test]
    fn a_socket_is_bound_with_its_mode_and_its_folder_and_a_stale_one_replaced() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("run/vm.sock");
        let (l, owned) = bind(&path, PRIVATE).unwrap();
        assert_eq!(owned.path(), path);
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_socket());
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!((m.dev(), m.ino()), (owned.dev, owned.ino));
        // Still listening: in use.
        assert!(matches!(
            bind(&path, PRIVATE),
            Err(SocketFileError::InUse(_))
        ));
        // Its listener gone (a daemon that died): stale, replaced.
        drop(l);
        let gid = m.gid();
        let group = Access {
            mode: 0o660,
            gid: Some(gid),
        };
        let (_l2, again) = bind(&path, group).unwrap();
        let m2 = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m2.permissions().mode() & 0o777, 0o660);
        assert_eq!(m2.gid(), gid);
        // The old token names an inode that is gone: it leaves the new one.
        assert!(matches!(
            owned.remove(),
            Removal::Replaced(FileKind::Socket)
        ));
        assert!(path.exists());
        assert!(matches!(again.remove(), Removal::Removed));
        assert!(!path.exists());
    }

    #[test]
    fn a_socket_on_a_reused_inode_number_is_not_taken_for_ours() {
        // ext4 gives a freed inode number to the next file made: had the
        // token not pinned its inode, a socket put where ours was removed
        // could carry our (dev, ino) and be removed as ours.
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("vm.sock");
        for _ in 0..50 {
            let (l, owned) = bind(&path, PRIVATE).unwrap();
            drop(l);
            std::fs::remove_file(&path).unwrap();
            let theirs = UnixListener::bind(&path).unwrap();
            assert!(matches!(
                owned.remove(),
                Removal::Replaced(FileKind::Socket)
            ));
            assert!(path.exists());
            drop(theirs);
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_listener_with_a_full_backlog_is_in_use_and_answered_at_once() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("busy.sock");
        // A listener that never accepts, its backlog filled.
        let _l = UnixListener::bind(&path).unwrap();
        let mut held = vec![];
        while let Ok(s) = connect_nonblocking(&path) {
            held.push(s);
            assert!(held.len() < 100_000, "backlog never filled");
        }
        let t0 = Instant::now();
        let e = bind(&path, PRIVATE).unwrap_err();
        assert!(matches!(e, SocketFileError::InUse(_)), "{e}");
        // Before: a blocking connect, 7.5 s on the control thread.
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket());
    }

    #[test]
    fn what_replaced_an_owned_socket_is_left_by_remove_and_the_ledger() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a.sock"), t.path().join("b.sock"));
        let ledger = SocketLedger::default();
        for p in [&a, &b] {
            let (_l, owned) = bind(p, PRIVATE).unwrap();
            ledger.keep(owned);
        }
        assert_eq!(ledger.paths(), [a.clone(), b.clone()]);
        // Someone else's socket moved onto `a`, a regular file onto `b`.
        std::fs::remove_file(&a).unwrap();
        let _theirs = UnixListener::bind(&a).unwrap();
        std::fs::remove_file(&b).unwrap();
        std::fs::write(&b, b"theirs").unwrap();
        assert!(matches!(
            ledger.release(&a),
            Some(Removal::Replaced(FileKind::Socket))
        ));
        assert!(ledger.release(&a).is_none(), "released once");
        assert_eq!(ledger.remove_all(), 0);
        assert!(std::fs::symlink_metadata(&a)
            .unwrap()
            .file_type()
            .is_socket());
        assert_eq!(std::fs::read(&b).unwrap(), b"theirs");
        assert!(ledger.paths().is_empty());

        // What is still ours goes.
        let c = t.path().join("c.sock");
        let (_l, owned) = bind(&c, PRIVATE).unwrap();
        ledger.keep(owned);
        let other = ledger.clone();
        assert_eq!(other.remove_all(), 1);
        assert!(!c.exists());
        assert!(ledger.paths().is_empty(), "one ledger, however many clones");
    }

    #[test]
    fn a_newline_in_a_path_is_escaped_in_every_message() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("x\n2099-01-01T00:00:00Z ERROR forged");
        std::fs::write(&path, b"").unwrap();
        let e = bind(&path, PRIVATE).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.contains("x\\n2099"), "{e}");
        let e = bind(&t.path().join("new\nline/").join("s".repeat(200)), PRIVATE)
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "{e}");
    }
}
