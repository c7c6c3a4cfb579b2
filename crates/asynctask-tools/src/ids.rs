//! Task ids with a random head, so listings that show 8 characters tell them apart.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use asynctask_manager::{AsyncTaskManager, PrefixMatch};

use crate::format::id_prefix;

/// 64 random bits from the standard library's per-process random hash keys, mixed
/// with a counter so two calls never see the same input.
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// A fresh task id, shaped like a UUID (`8-4-4-4-12` hex digits), whose first
/// 8 characters no task held by `manager` shares.
///
/// Listings show only the first 8 characters of an id, so a random head is what
/// lets the model and the user tell two tasks of the same subagent apart.
///
/// # Examples
///
/// ```
/// use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
/// use asynctask_tools::new_task_id;
///
/// let manager = AsyncTaskManager::default();
/// let a = new_task_id(&manager);
/// manager.register_task(RegisterTaskInput::new(a.clone(), "r", "g"))?;
/// let b = new_task_id(&manager);
/// assert_eq!(a.len(), 36);
/// assert_ne!(a[..8], b[..8]);
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use]
pub fn new_task_id(manager: &AsyncTaskManager) -> String {
    new_task_id_from(manager, random_u64)
}

/// [`new_task_id`] with its random source given (tests drive the re-draw path).
fn new_task_id_from(manager: &AsyncTaskManager, mut random: impl FnMut() -> u64) -> String {
    loop {
        let (high, low) = (random(), random());
        let id = format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            high >> 32,
            (high >> 16) & 0xffff,
            high & 0xffff,
            low >> 48,
            low & 0xffff_ffff_ffff
        );
        // With 32 random bits a clash is rare; when it happens, draw again.
        if matches!(manager.find_by_prefix(id_prefix(&id)), PrefixMatch::None) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asynctask_manager::RegisterTaskInput;
    use asynctask_model::MaxAsyncTasks;
    use std::collections::BTreeSet;

    #[test]
    fn heads_are_distinct_among_held_tasks() {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let mut heads = BTreeSet::new();
        for _ in 0..2_000 {
            let id = new_task_id(&manager);
            assert!(heads.insert(id[..8].to_owned()), "head repeated: {id}");
            manager
                .register_task(RegisterTaskInput::new(id, "same-agent", "g"))
                .unwrap();
        }
    }

    #[test]
    fn a_head_held_by_another_task_is_drawn_again() {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        // The first draw repeats the head of a held task; the second does not.
        let draws = [
            0xdead_beef_0000_0001u64,
            1,
            0xdead_beef_0000_0002,
            2,
            0x0123_4567_0000_0003,
            3,
        ];
        let mut source = draws.iter().copied();
        let mut next = || source.next().expect("enough draws");
        let held = new_task_id_from(&manager, &mut next);
        assert_eq!(&held[..8], "deadbeef");
        manager
            .register_task(RegisterTaskInput::new(held, "agent", "g"))
            .unwrap();
        let fresh = new_task_id_from(&manager, &mut next);
        assert_eq!(&fresh[..8], "01234567", "the clashing draw was skipped");
    }

    #[test]
    fn ids_are_lowercase_hex_in_uuid_shape() {
        let id = new_task_id(&AsyncTaskManager::default());
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert!(
            id.chars()
                .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
}
