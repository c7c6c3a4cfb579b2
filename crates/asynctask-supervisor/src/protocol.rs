//! What a front and its supervisor say to each other on the socket.

/// The version of what a front and its supervisor say to each other on a
/// session's connection (its acknowledgement, and the relay's
/// [`DELIVERED_NOTIFICATION`]s). A front refuses a supervisor that speaks
/// another: the two come from different versions of asynctask.
pub(crate) const RELAY_PROTOCOL: u64 = 2;

/// Which build of asynctask this process runs: its version and its
/// executable's size and modification time, read once, at the first call. A
/// supervisor reads it at its start, so after an upgrade (a new executable in
/// its place) its build and a new front's differ.
pub(crate) fn build() -> &'static str {
    static BUILD: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILD.get_or_init(|| {
        let stamp = std::env::current_exe()
            .and_then(std::fs::metadata)
            .ok()
            .and_then(|meta| {
                let modified = meta.modified().ok()?;
                let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
                Some(format!(
                    "{} bytes, {}.{:09}",
                    meta.len(),
                    since.as_secs(),
                    since.subsec_nanos()
                ))
            })
            .unwrap_or_else(|| "executable unknown".to_owned());
        format!("{} ({stamp})", env!("CARGO_PKG_VERSION"))
    })
}

/// What a front says when its supervisor runs another build: `None` when the
/// builds agree, or the supervisor does not say (an older one).
pub(crate) fn stale_build_warning(
    ours: &str,
    theirs: Option<&str>,
    pid: Option<u64>,
) -> Option<String> {
    let theirs = theirs.filter(|theirs| *theirs != ours)?;
    let pid = pid.map_or_else(|| "?".to_owned(), |pid| pid.to_string());
    Some(format!(
        "the project's supervisor (pid {pid}) runs another build of asynctask ({theirs}) than this \
         one ({ours}): it serves on as it is; run `asynctask supervisor restart` in the project to \
         serve with this one (it cancels running tasks)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_front_warns_of_a_supervisor_of_another_build_only() {
        assert_eq!(build(), build(), "read once");
        assert!(build().starts_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(
            stale_build_warning(
                "0.1.0 (1 bytes, 2.0)",
                Some("0.1.0 (1 bytes, 2.0)"),
                Some(7)
            ),
            None
        );
        assert_eq!(
            stale_build_warning("0.1.0 (1 bytes, 2.0)", None, Some(7)),
            None
        );
        assert_eq!(
            stale_build_warning(
                "0.1.0 (1 bytes, 3.0)",
                Some("0.1.0 (1 bytes, 2.0)"),
                Some(7)
            )
            .as_deref(),
            Some(
                "the project's supervisor (pid 7) runs another build of asynctask (0.1.0 (1 bytes, \
                 2.0)) than this one (0.1.0 (1 bytes, 3.0)): it serves on as it is; run `asynctask \
                 supervisor restart` in the project to serve with this one (it cancels running tasks)"
            )
        );
    }
}
