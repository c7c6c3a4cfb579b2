//! Task ids: random (UUID v4), re-drawn until their first 8 characters are
//! unique among the tasks held, so listings that show 8 characters tell them
//! apart.

use asynctask_manager::{AsyncTaskManager, PrefixMatch};
use uuid::Uuid;

use crate::format::id_prefix;

/// A fresh task id, a random UUID v4 (`8-4-4-4-12` lowercase hex digits), whose
/// first 8 characters no task held by `manager` shares.
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
/// assert_eq!(&a[14..15], "4", "version 4");
/// assert_ne!(a[..8], b[..8]);
/// # Ok::<(), asynctask_manager::RegisterError>(())
/// ```
#[must_use]
pub fn new_task_id(manager: &AsyncTaskManager) -> String {
    new_task_id_from(manager, || Uuid::new_v4().into_bytes())
}

/// [`new_task_id`] with its random bytes given (tests drive the re-draw path).
fn new_task_id_from(manager: &AsyncTaskManager, mut random: impl FnMut() -> [u8; 16]) -> String {
    loop {
        let id = uuid::Builder::from_random_bytes(random())
            .into_uuid()
            .hyphenated()
            .to_string();
        // With 32 random bits in the head a clash is rare; when it happens, draw
        // again.
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
        // The second draw repeats the head of the first; the third does not.
        let draws = [[0xde; 16], [0xde; 16], [0x01; 16]];
        let mut source = draws.iter().copied();
        let mut next = || source.next().expect("enough draws");
        let held = new_task_id_from(&manager, &mut next);
        assert_eq!(held, "dededede-dede-4ede-9ede-dededededede");
        manager
            .register_task(RegisterTaskInput::new(held, "agent", "g"))
            .unwrap();
        let fresh = new_task_id_from(&manager, &mut next);
        assert_eq!(
            fresh, "01010101-0101-4101-8101-010101010101",
            "the clashing draw was skipped"
        );
    }

    #[test]
    fn ids_are_lowercase_uuid_v4() {
        let id = new_task_id(&AsyncTaskManager::default());
        let parsed = Uuid::parse_str(&id).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(parsed.hyphenated().to_string(), id, "lowercase, hyphenated");
    }
}
