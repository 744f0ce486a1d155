//! A directory of a test's own under the temporary directory, removed with
//! everything in it when the test is done, also when it fails.

use std::path::{Path, PathBuf};

use crate::netns::unique;

/// A fresh directory, removed on drop.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new empty directory named from `prefix` and a counter.
    ///
    /// # Panics
    /// When it cannot be made.
    pub fn new(prefix: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
        ScratchDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_dir_goes_with_what_is_in_it() {
        let scratch = ScratchDir::new("mpbscratch");
        let path = scratch.path().to_owned();
        std::fs::write(scratch.join("f"), b"x").unwrap();
        assert!(path.is_dir());
        drop(scratch);
        assert!(!path.exists());
    }
}
