//! The folder a listening socket lives in: created when missing, with an
//! explicit mode, and said so.
//!
//! A folder vadapt creates gets mode [`FOLDER_MODE`] whatever the umask
//! (under `umask 077` a plain `create_dir_all` gives 0700, and then a
//! `--socket-group` member such as libvirt's `libvirt-qemu` cannot reach
//! the 0660 socket inside), and with `--socket-group` it is owned by that
//! group. A folder that already exists is left as it is: it is the
//! operator's (`/run`, `/tmp`, a systemd `RuntimeDirectory=`).
//!
//! What was made is returned as [`Made`], so that a socket that cannot be
//! bound after all leaves no folder behind ([`Made::undo`]), and so that the
//! line saying a folder was made is only said once the socket is there.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use vadapt_qemu::peer_text::PeerText;

/// Mode of every folder vadapt creates for a socket: the owner (root)
/// writes, the socket group enters and reads, others nothing.
pub const FOLDER_MODE: u32 = 0o750;

/// The folders [`ensure`] created for one socket, outermost first (none
/// when the socket's folder was there already).
#[derive(Debug, Default)]
#[must_use = "undo the folders when the socket cannot be bound, or say they were made"]
pub struct Made {
    /// The folders created, outermost first.
    folders: Vec<PathBuf>,
    /// The group they were given, if any.
    gid: Option<u32>,
}

impl Made {
    /// The folders created, outermost first.
    pub fn folders(&self) -> &[PathBuf] {
        &self.folders
    }

    /// Remove the folders again, innermost first. One that is no longer
    /// empty (another port put its socket there meanwhile) stops it: that
    /// folder and its parents are in use.
    pub fn undo(self) {
        for d in self.folders.iter().rev() {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }

    /// One INFO line naming the socket's folder, if any folder was created.
    pub fn log(&self) {
        if !self.folders.is_empty() {
            tracing::info!("{self}");
        }
    }
}

impl std::fmt::Display for Made {
    /// The line [`Made::log`] says: the innermost folder (the socket's own)
    /// with its mode and group, escaped (a socket path is the operator's
    /// or an `add-port` caller's text, and a newline in it must not start a
    /// log line of its own).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(dir) = self.folders.last() else {
            return f.write_str("no socket folder created");
        };
        write!(
            f,
            "created the missing socket folder {} (mode {FOLDER_MODE:o}",
            PeerText::from_path(dir)
        )?;
        if let Some(gid) = self.gid {
            write!(f, ", group {gid}")?;
        }
        if self.folders.len() > 1 {
            write!(f, "; {} folders in all", self.folders.len())?;
        }
        f.write_str(")")
    }
}

/// Create the folder of `socket` and any missing parent, each with
/// [`FOLDER_MODE`] and, when `gid` is given, owned by that group; what was
/// created is returned (nothing is logged here: see [`Made::log`]). On
/// failure nothing created stays, and the folder that could not be created
/// (or given its mode or group), or the socket's folder when it exists but
/// is no folder, is returned with the cause, so the error names the folder
/// rather than the socket.
pub fn ensure(socket: &Path, gid: Option<u32>) -> Result<Made, (PathBuf, std::io::Error)> {
    let mut made = Made {
        folders: Vec::new(),
        gid,
    };
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(made);
    };
    if dir.is_dir() {
        return Ok(made);
    }
    // The missing folders, outermost first.
    let mut missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    if missing.is_empty() {
        // The socket's folder exists and is something else: a regular file,
        // or a link to one. Nothing to create, and nothing to bind in.
        return Err((dir.to_owned(), ErrorKind::NotADirectory.into()));
    }
    missing.reverse();
    for d in missing {
        if let Err(e) = make_one(d, gid, &mut made) {
            made.undo();
            return Err((d.to_owned(), e));
        }
    }
    Ok(made)
}

/// Create folder `d` with its mode and group, and note it in `made`; a
/// folder another process made in between is theirs, not noted.
fn make_one(d: &Path, gid: Option<u32>, made: &mut Made) -> Result<(), std::io::Error> {
    match std::fs::DirBuilder::new().mode(FOLDER_MODE).create(d) {
        Ok(()) => made.folders.push(d.to_owned()),
        // Another process (or a second port on the same folder) made it in
        // between: it is theirs, leave its mode.
        Err(e) if e.kind() == ErrorKind::AlreadyExists && d.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    // The umask narrowed the mode given to mkdir; set it as meant.
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(FOLDER_MODE))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(d, None, Some(gid))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn creates_missing_folders_and_names_the_one_that_fails() {
        let t = tempfile::tempdir().unwrap();
        let sock = t.path().join("a/b/vm.sock");
        let made = ensure(&sock, None).unwrap();
        assert_eq!(made.folders(), [t.path().join("a"), t.path().join("a/b")]);
        assert!(t.path().join("a/b").is_dir());
        let again = ensure(&sock, None).unwrap();
        assert!(again.folders().is_empty(), "{:?}", again.folders());
        // A file where a folder should be.
        std::fs::write(t.path().join("f"), b"").unwrap();
        let (dir, _) = ensure(&t.path().join("f/sub/vm.sock"), None).unwrap_err();
        assert_eq!(dir, t.path().join("f/sub"));
        assert!(ensure(Path::new("vm.sock"), None).is_ok());
    }

    #[test]
    fn a_file_as_the_sockets_folder_is_an_error_not_a_folder_made() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), b"x").unwrap();
        // Before: "created the missing socket folder .../f" was logged, and
        // Ok returned, for a folder that is a regular file.
        let (dir, e) = ensure(&t.path().join("f/vm.sock"), None).unwrap_err();
        assert_eq!(dir, t.path().join("f"));
        assert_eq!(e.kind(), ErrorKind::NotADirectory, "{e}");
        assert_eq!(std::fs::read(t.path().join("f")).unwrap(), b"x");
    }

    #[test]
    fn undo_removes_what_was_made_and_stops_at_a_folder_in_use() {
        let t = tempfile::tempdir().unwrap();
        ensure(&t.path().join("a/b/c/vm.sock"), None)
            .unwrap()
            .undo();
        assert!(!t.path().join("a").exists());

        let made = ensure(&t.path().join("a/b/vm.sock"), None).unwrap();
        std::fs::write(t.path().join("a/other"), b"").unwrap();
        made.undo();
        assert!(!t.path().join("a/b").exists());
        assert!(t.path().join("a/other").exists(), "a folder in use stays");
    }

    #[test]
    fn the_line_names_the_folder_escaped_and_only_when_one_was_made() {
        let made = Made {
            folders: vec!["/run/x".into(), "/run/x/a\nFORGED ERROR y".into()],
            gid: Some(107),
        };
        let line = made.to_string();
        assert_eq!(
            line,
            "created the missing socket folder /run/x/a\\nFORGED ERROR y \
             (mode 750, group 107; 2 folders in all)"
        );
        assert!(!line.contains('\n'));
        let one = Made {
            folders: vec!["/run/v".into()],
            gid: None,
        };
        assert_eq!(
            one.to_string(),
            "created the missing socket folder /run/v (mode 750)"
        );
    }

    #[test]
    fn created_folders_get_their_mode_whatever_the_umask_and_the_group() {
        let t = tempfile::tempdir().unwrap();
        let gid = std::fs::metadata(t.path()).unwrap().gid();
        // SAFETY: umask only changes this process's file-creation mask; it
        // is put back right after, and no other test here creates files
        // whose mode it checks.
        let old = unsafe { libc::umask(0o077) };
        let made = ensure(&t.path().join("x/y/vm.sock"), Some(gid));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let _ = made.unwrap();
        for d in ["x", "x/y"] {
            let m = std::fs::metadata(t.path().join(d)).unwrap();
            assert_eq!(m.mode() & 0o777, FOLDER_MODE, "{d}");
            assert_eq!(m.gid(), gid, "{d}");
        }
        // An existing folder keeps its mode.
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let _ = ensure(&t.path().join("vm.sock"), Some(gid)).unwrap();
        let m = std::fs::metadata(t.path()).unwrap();
        assert_eq!(m.mode() & 0o777, 0o711);
    }
}
