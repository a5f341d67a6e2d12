//! The folder a listening socket lives in: created when missing, with an
//! explicit mode, and said so.
//!
//! A folder vadapt creates gets mode [`FOLDER_MODE`] whatever the umask
//! (under `umask 077` a plain `create_dir_all` gives 0700, and then a
//! `--socket-group` member such as libvirt's `libvirt-qemu` cannot reach
//! the 0660 socket inside), and with `--socket-group` it is owned by that
//! group. A folder that already exists is left as it is: it is the
//! operator's (`/run`, `/tmp`, a systemd `RuntimeDirectory=`).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of every folder vadapt creates for a socket: the owner (root)
/// writes, the socket group enters and reads, others nothing.
pub const FOLDER_MODE: u32 = 0o750;

/// Create the folder of `socket` and any missing parent, each with
/// [`FOLDER_MODE`] and, when `gid` is given, owned by that group; one INFO
/// line names the folder. On failure, the folder that could not be created
/// (or given its mode or group) is returned with the cause, so the error
/// names the folder rather than the socket.
pub fn ensure(socket: &Path, gid: Option<u32>) -> Result<(), (PathBuf, std::io::Error)> {
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    // The missing folders, outermost first.
    let mut missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    missing.reverse();
    for d in missing {
        let fail = |e| (d.to_owned(), e);
        match std::fs::DirBuilder::new().mode(FOLDER_MODE).create(d) {
            Ok(()) => {}
            // Another process (or a second port on the same folder) made it
            // in between: it is theirs, leave its mode.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => continue,
            Err(e) => return Err(fail(e)),
        }
        // The umask narrowed the mode given to mkdir; set it as meant.
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(FOLDER_MODE)).map_err(fail)?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(d, None, Some(gid)).map_err(fail)?;
        }
    }
    match gid {
        Some(gid) => tracing::info!(
            folder = %dir.display(),
            "created the missing socket folder {} (mode {FOLDER_MODE:o}, group {gid})",
            dir.display()
        ),
        None => tracing::info!(
            folder = %dir.display(),
            "created the missing socket folder {} (mode {FOLDER_MODE:o})",
            dir.display()
        ),
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
        ensure(&sock, None).unwrap();
        assert!(t.path().join("a/b").is_dir());
        ensure(&sock, None).unwrap();
        // A file where a folder should be.
        std::fs::write(t.path().join("f"), b"").unwrap();
        let (dir, _) = ensure(&t.path().join("f/sub/vm.sock"), None).unwrap_err();
        assert_eq!(dir, t.path().join("f/sub"));
        assert!(ensure(Path::new("vm.sock"), None).is_ok());
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
        made.unwrap();
        for d in ["x", "x/y"] {
            let m = std::fs::metadata(t.path().join(d)).unwrap();
            assert_eq!(m.mode() & 0o777, FOLDER_MODE, "{d}");
            assert_eq!(m.gid(), gid, "{d}");
        }
        // An existing folder keeps its mode.
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        ensure(&t.path().join("vm.sock"), Some(gid)).unwrap();
        let m = std::fs::metadata(t.path()).unwrap();
        assert_eq!(m.mode() & 0o777, 0o711);
    }
}
