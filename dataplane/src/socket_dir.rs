//! The folder a listening socket lives in: created when missing, and said so.

use std::path::{Path, PathBuf};

/// Create the folder of `socket` if it does not exist, with one INFO line
/// naming it. On failure, the folder that could not be created is returned
/// with the cause, so the error names the folder rather than the socket.
pub fn ensure(socket: &Path) -> Result<(), (PathBuf, std::io::Error)> {
    let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| (dir.to_owned(), e))?;
    tracing::info!(folder = %dir.display(), "created the missing socket folder {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_missing_folders_and_names_the_one_that_fails() {
        let t = tempfile::tempdir().unwrap();
        let sock = t.path().join("a/b/vm.sock");
        ensure(&sock).unwrap();
        assert!(t.path().join("a/b").is_dir());
        ensure(&sock).unwrap();
        // A file where a folder should be.
        std::fs::write(t.path().join("f"), b"").unwrap();
        let (dir, _) = ensure(&t.path().join("f/sub/vm.sock")).unwrap_err();
        assert_eq!(dir, t.path().join("f/sub"));
        assert!(ensure(Path::new("vm.sock")).is_ok());
    }
}
