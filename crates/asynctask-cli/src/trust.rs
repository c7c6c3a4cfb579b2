//! Which project configs the user trusts: the trust store in the user's
//! state directory (never in a project), keyed by a config's canonical path
//! and holding the SHA-256 of the content the user trusted.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::CliError;

/// The trust store's file name, in `$XDG_STATE_HOME/asynctask/` (else
/// `~/.local/state/asynctask/`).
pub const TRUST_FILE: &str = "trusted.json";

/// The SHA-256 of `content`, in lowercase hex.
///
/// ```
/// assert_eq!(
///     asynctask_cli::trust::digest(b"abc"),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
#[must_use]
pub fn digest(content: &[u8]) -> String {
    Sha256::digest(content)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether the user trusts a config's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trust {
    /// The user trusted exactly this content.
    Trusted,
    /// The user never trusted this file.
    Untrusted,
    /// The user trusted this file with other content: it changed since.
    Changed,
}

impl std::fmt::Display for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Trust::Trusted => "trusted",
            Trust::Untrusted => "untrusted",
            Trust::Changed => "changed since trusted",
        })
    }
}

/// The stored records: one per trusted file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Records {
    trusted: Vec<Record>,
}

/// One trusted file: its canonical path and the SHA-256 of the content trusted.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    path: PathBuf,
    sha256: String,
}

/// The user's trust store: a JSON file private to the user, in a directory
/// private to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    /// The store in the file `path`.
    #[must_use]
    pub fn at(path: impl Into<PathBuf>) -> Self {
        TrustStore { path: path.into() }
    }

    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the user trusts the file `config` (canonical) with content
    /// whose SHA-256 is `sha256`.
    ///
    /// # Errors
    ///
    /// [`CliError::TrustStore`] when the store cannot be read, or is not the
    /// user's own.
    pub fn trust_of(&self, config: &Path, sha256: &str) -> Result<Trust, CliError> {
        let records = self.read()?;
        Ok(
            match records.trusted.iter().find(|record| record.path == config) {
                Some(record) if record.sha256 == sha256 => Trust::Trusted,
                Some(_) => Trust::Changed,
                None => Trust::Untrusted,
            },
        )
    }

    /// Records that the user trusts `config` (canonical) with the content
    /// whose SHA-256 is `sha256`, replacing what was trusted of it before.
    ///
    /// # Errors
    ///
    /// [`CliError::TrustStore`] when the store cannot be read or written.
    pub fn trust(&self, config: &Path, sha256: &str) -> Result<(), CliError> {
        let mut records = self.read()?;
        records.trusted.retain(|record| record.path != config);
        records.trusted.push(Record {
            path: config.to_owned(),
            sha256: sha256.to_owned(),
        });
        self.write(&records)
    }

    /// Forgets `config` (canonical): whether it was trusted.
    ///
    /// # Errors
    ///
    /// [`CliError::TrustStore`] when the store cannot be read or written.
    pub fn untrust(&self, config: &Path) -> Result<bool, CliError> {
        let mut records = self.read()?;
        let before = records.trusted.len();
        records.trusted.retain(|record| record.path != config);
        if records.trusted.len() == before {
            return Ok(false);
        }
        self.write(&records)?;
        Ok(true)
    }

    fn error(&self, source: std::io::Error) -> CliError {
        CliError::TrustStore {
            path: self.path.clone(),
            source,
        }
    }

    /// The records; none when the store does not exist. A store another
    /// user owns or others may write, in a directory another user owns or
    /// others may write, or that is a symlink, is refused: it could trust
    /// anything. The file is checked as opened (never looked up twice by its
    /// path), and read to at most [`MAX_STORE_BYTES`].
    fn read(&self) -> Result<Records, CliError> {
        use std::io::Read;
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&self.path)
        {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Records::default());
            }
            Err(err) if err.raw_os_error() == Some(nix::libc::ELOOP) => {
                return Err(self.error(not_private("it is a symlink")));
            }
            Err(err) => return Err(self.error(err)),
        };
        let meta = file.metadata().map_err(|err| self.error(err))?;
        if !private(&meta) {
            return Err(self.error(not_private(
                "it is not private to you (owned by you, written by no one else)",
            )));
        }
        self.check_directory()?;
        let mut text = Vec::new();
        file.take(MAX_STORE_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|err| self.error(err))?;
        if text.len() as u64 > MAX_STORE_BYTES {
            return Err(self.error(std::io::Error::other(format!(
                "it is over {MAX_STORE_BYTES} bytes"
            ))));
        }
        serde_json::from_slice(&text).map_err(|err| self.error(std::io::Error::other(err)))
    }

    /// The store's directory is the user's alone: another user who may write
    /// it could put a store of theirs in its place.
    fn check_directory(&self) -> Result<(), CliError> {
        let Some(dir) = self.path.parent() else {
            return Ok(());
        };
        let meta = std::fs::symlink_metadata(dir).map_err(|err| self.error(err))?;
        if !meta.is_dir() || !private(&meta) {
            return Err(self.error(not_private(
                "its directory is not private to you (a directory you own, written by no one \
                 else)",
            )));
        }
        Ok(())
    }

    /// Writes the records whole: to a new file beside the store, private to
    /// the user, then renamed over it (a reader sees the old store or the
    /// new). The temporary file is created anew, never opened through a
    /// symlink or over a file already there.
    fn write(&self, records: &Records) -> Result<(), CliError> {
        if let Some(dir) = self.path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|err| self.error(err))?;
        }
        self.check_directory()?;
        let mut text = serde_json::to_vec_pretty(records).map_err(|err| self.error(err.into()))?;
        text.push(b'\n');
        let mut temporary = self.path.clone().into_os_string();
        temporary.push(format!(".{}", std::process::id()));
        let temporary = PathBuf::from(temporary);
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&temporary);
        let mut file = created.map_err(|err| self.error(err))?;
        let written = file
            .write_all(&text)
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temporary, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written.map_err(|err| self.error(err))
    }
}

/// The most a trust store is read: far more than the records of every
/// project a person has.
const MAX_STORE_BYTES: u64 = 16 << 20;

/// Whether `meta` is the current user's, written by no one else.
fn private(meta: &std::fs::Metadata) -> bool {
    meta.uid() == nix::unistd::getuid().as_raw() && meta.mode() & 0o022 == 0
}

fn not_private(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_file_is_trusted_with_its_content_and_untrusted_again() {
        let dir = asynctask_test_support::temp_dir("trust");
        let store = TrustStore::at(dir.path().join("state/asynctask").join(TRUST_FILE));
        let config = Path::new("/work/p/asynctask.toml");
        let (old, new) = (digest(b"old"), digest(b"new"));
        assert_eq!(
            store.trust_of(config, &old).expect("read"),
            Trust::Untrusted
        );
        store.trust(config, &old).expect("trusted");
        assert_eq!(store.trust_of(config, &old).expect("read"), Trust::Trusted);
        assert_eq!(store.trust_of(config, &new).expect("read"), Trust::Changed);
        store.trust(config, &new).expect("trusted anew");
        assert_eq!(store.trust_of(config, &new).expect("read"), Trust::Trusted);
        assert!(store.untrust(config).expect("untrusted"));
        assert!(!store.untrust(config).expect("read"));
        assert_eq!(
            store.trust_of(config, &new).expect("read"),
            Trust::Untrusted
        );
        let mode = |path: &Path| std::fs::metadata(path).expect("there").mode() & 0o777;
        assert_eq!(
            (
                mode(store.path()),
                mode(store.path().parent().expect("dir"))
            ),
            (0o600, 0o700)
        );
    }

    #[test]
    fn a_store_that_is_a_symlink_or_in_a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = asynctask_test_support::temp_dir("trust");
        let theirs = TrustStore::at(dir.path().join("theirs.json"));
        theirs
            .trust(Path::new("/p/asynctask.toml"), "00")
            .expect("trusted");
        // A store swapped for a link to one of someone else's choosing.
        let linked = TrustStore::at(dir.path().join("state").join(TRUST_FILE));
        std::fs::create_dir(dir.path().join("state")).expect("made");
        std::os::unix::fs::symlink(theirs.path(), linked.path()).expect("linked");
        let err = linked
            .trust_of(Path::new("/p/asynctask.toml"), "00")
            .expect_err("refused");
        assert!(
            crate::error_chain(&err).ends_with(": it is a symlink"),
            "{}",
            crate::error_chain(&err)
        );
        // A store in a directory others may write, which they could swap.
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("made");
        let store = TrustStore::at(shared.join(TRUST_FILE));
        store
            .trust(Path::new("/p/asynctask.toml"), "00")
            .expect("trusted");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = store
            .trust_of(Path::new("/p/asynctask.toml"), "00")
            .expect_err("refused");
        assert!(
            crate::error_chain(&err).ends_with(": its directory is not private to you (a directory you own, written by no one else)"),
            "{}",
            crate::error_chain(&err)
        );
        assert!(
            store.trust(Path::new("/q/asynctask.toml"), "01").is_err(),
            "nor written there"
        );
        // A temporary file planted where the store writes is never written through.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let planted = shared.join(format!("{TRUST_FILE}.{}", std::process::id()));
        std::os::unix::fs::symlink(dir.path().join("victim"), &planted).expect("planted");
        assert!(store.trust(Path::new("/q/asynctask.toml"), "01").is_err());
        assert!(
            !dir.path().join("victim").exists(),
            "nothing written through the link"
        );
    }

    #[test]
    fn a_store_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = asynctask_test_support::temp_dir("trust");
        let store = TrustStore::at(dir.path().join(TRUST_FILE));
        store
            .trust(Path::new("/p/asynctask.toml"), "00")
            .expect("trusted");
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o666))
            .expect("chmod");
        let err = store
            .trust_of(Path::new("/p/asynctask.toml"), "00")
            .expect_err("refused");
        assert_eq!(
            crate::error_chain(&err),
            format!(
                "cannot use the trust store {}: it is not private to you (owned by you, \
                 written by no one else)",
                store.path().display()
            )
        );
    }
}
