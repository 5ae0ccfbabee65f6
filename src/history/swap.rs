//! Swapping two folders in one step, so that a reader listing a history partition during
//! compaction sees either the old files or the compacted one, never both and never neither.

use std::io;
use std::path::Path;

/// Exchanges the two paths atomically (`renameat2` with `RENAME_EXCHANGE`, Linux 3.15+ on
/// most file systems). `ErrorKind::Unsupported` where the system has no such call.
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    imp::exchange(a, b)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::CString;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn c_path(path: &Path) -> io::Result<CString> {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
    }

    pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
        let (a, b) = (c_path(a)?, c_path(b)?);
        // SAFETY: both pointers are NUL-terminated strings that outlive the call.
        let result =
            unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            // The kernel or the file system cannot exchange: the caller falls back.
            Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                Err(io::Error::new(io::ErrorKind::Unsupported, error.to_string()))
            }
            _ => Err(error),
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::io;
    use std::path::Path;

    pub fn exchange(_a: &Path, _b: &Path) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no atomic exchange of paths on this system"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_folders_trade_places() {
        let root = std::env::temp_dir().join(format!("defilens-swap-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("old.parquet"), b"old").unwrap();
        std::fs::write(b.join("new.parquet"), b"new").unwrap();
        match exchange(&a, &b) {
            Ok(()) => {
                assert!(a.join("new.parquet").exists() && b.join("old.parquet").exists());
                assert!(!a.join("old.parquet").exists());
            }
            Err(error) => assert_eq!(error.kind(), io::ErrorKind::Unsupported),
        }
        assert!(exchange(&root.join("missing"), &a).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
