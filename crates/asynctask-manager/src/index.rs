//! The id indexes: exact lookups through a hash table, prefix lookups in id
//! order, both keyed by the task's shared head (no second copy of any id).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::collections::btree_set::Range;
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::snapshot::{SlotId, TaskHead};

/// A task's id in the prefix index: its head, and the id's first eight bytes
/// as a big-endian number, compared first. Ordering `(head8, id)` is the same as
/// ordering the ids themselves (a zero byte pads a short id, and the full ids
/// break ties), so most comparisons on the way down the tree read no string at
/// all: ids that differ in their first eight bytes — every pair the `task`
/// tool makes — never do.
///
/// A key without a head is a search bound, never stored: it sorts before every
/// id with its first eight bytes, so a search starts there without reading any
/// id on the way down.
#[derive(Debug, Clone)]
struct IdKey {
    head8: u64,
    head: Option<Arc<TaskHead>>,
}

impl IdKey {
    fn of(head: Arc<TaskHead>) -> Self {
        IdKey {
            head8: head8(head.id()),
            head: Some(head),
        }
    }

    /// The bound before every id whose first eight bytes are `head8`.
    fn before(head8: u64) -> Self {
        IdKey { head8, head: None }
    }

    fn id(&self) -> &str {
        self.head.as_deref().map_or("", TaskHead::id)
    }

    fn slot(&self) -> SlotId {
        self.head.as_deref().map_or(SlotId::MAX, TaskHead::slot)
    }
}

/// The first eight bytes of `id` as a big-endian number, zero-padded.
fn head8(id: &str) -> u64 {
    let mut bytes = [0u8; 8];
    let len = id.len().min(8);
    bytes[..len].copy_from_slice(&id.as_bytes()[..len]);
    u64::from_be_bytes(bytes)
}

/// The largest first eight bytes an id that starts with `prefix` can have.
fn last_head8(prefix: &str) -> u64 {
    let mut bytes = [0xff_u8; 8];
    let len = prefix.len().min(8);
    bytes[..len].copy_from_slice(&prefix.as_bytes()[..len]);
    u64::from_be_bytes(bytes)
}

impl PartialEq for IdKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for IdKey {}

impl PartialOrd for IdKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.head8
            .cmp(&other.head8)
            .then_with(|| match (&self.head, &other.head) {
                (Some(a), Some(b)) if Arc::ptr_eq(a, b) => Ordering::Equal,
                (Some(a), Some(b)) => a.id().cmp(b.id()),
                (a, b) => a.is_some().cmp(&b.is_some()),
            })
    }
}

/// Consistent with `Ord` for every stored key (see the type's docs), so the
/// map can be searched by a plain `&str`.
impl Borrow<str> for IdKey {
    fn borrow(&self) -> &str {
        self.id()
    }
}

/// Every task's id, twice: a hash table for exact lookups (O(1) expected) and
/// an ordered set for prefix lookups (O(log n) to the first match). The hash
/// table holds slots alone, reading ids back from the records (which is why
/// its methods take `id_of`, the id of a slot); the ordered set holds the
/// tasks' shared heads, which know their slots.
#[derive(Debug, Default)]
pub(crate) struct IdIndex {
    exact: HashTable<SlotId>,
    /// Seeded per process (foldhash): fast on short ids, and ids come from the
    /// host (the `task` tool draws random ones), never from the model.
    hasher: hashbrown::DefaultHashBuilder,
    ordered: BTreeSet<IdKey>,
}

impl IdIndex {
    pub(crate) fn len(&self) -> usize {
        self.exact.len()
    }

    /// The hash of `id` in the exact index (computed once for a lookup
    /// followed by an insertion).
    pub(crate) fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    /// The slot of the task with exactly this id.
    pub(crate) fn get<'a>(&self, id: &str, id_of: impl Fn(SlotId) -> &'a str) -> Option<SlotId> {
        self.get_hashed(self.hash(id), id, id_of)
    }

    /// [`get`](Self::get), given `id`'s [`hash`](Self::hash).
    pub(crate) fn get_hashed<'a>(
        &self,
        hash: u64,
        id: &str,
        id_of: impl Fn(SlotId) -> &'a str,
    ) -> Option<SlotId> {
        self.exact.find(hash, |&slot| id_of(slot) == id).copied()
    }

    /// Adds the task whose head is `head` (at the head's slot), given its id's
    /// [`hash`](Self::hash); the id must be new.
    pub(crate) fn insert<'a>(
        &mut self,
        hash: u64,
        head: Arc<TaskHead>,
        id_of: impl Fn(SlotId) -> &'a str,
    ) {
        let hasher = &self.hasher;
        self.exact
            .insert_unique(hash, head.slot(), |&slot| hasher.hash_one(id_of(slot)));
        self.ordered.insert(IdKey::of(head));
    }

    /// Removes the task whose head is `head`, and gives the head back (the
    /// search holds it instead of a second reference).
    pub(crate) fn remove(&mut self, head: Arc<TaskHead>) -> Option<Arc<TaskHead>> {
        let slot = head.slot();
        if let Ok(entry) = self
            .exact
            .find_entry(self.hash(head.id()), |&found| found == slot)
        {
            entry.remove();
        }
        let mut key = IdKey::of(head);
        self.ordered.remove(&key);
        key.head.take()
    }

    /// The slots of the tasks whose id starts with `prefix`, in id order.
    pub(crate) fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = SlotId> + 'a {
        // No id past `last` can match: the end is found without reading the
        // id after the last match (a task the caller did not ask about, whose
        // head is likely out of the cache).
        let last = last_head8(prefix);
        self.from(prefix)
            .take_while(move |key| key.head8 <= last && key.id().starts_with(prefix))
            .map(IdKey::slot)
    }

    /// The ordered map from the first id not less than `prefix` on: the ids
    /// that start with it come first, one after the other. The range is
    /// open-ended (the caller stops at the first id past the prefix): an open
    /// end costs no second search down the tree.
    ///
    /// The search goes down the tree by the first eight bytes alone; the only
    /// ids before the prefix it can land on share those bytes with it (a
    /// longer prefix's neighbours, or an id the prefix extends with zero
    /// bytes). It steps over a few; when more share them (ids with a long
    /// common head), it searches by the whole prefix instead, which reads ids
    /// on the way down but stays O(log n).
    fn from<'a>(&'a self, prefix: &str) -> Range<'a, IdKey> {
        const STEPS: usize = 8;
        let start = IdKey::before(head8(prefix));
        let mut range = self
            .ordered
            .range((Bound::Included(start), Bound::Unbounded));
        for _ in 0..STEPS {
            let mut ahead = range.clone();
            match ahead.next() {
                Some(key) if key.id() < prefix => range = ahead,
                _ => return range,
            }
        }
        self.ordered
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
    }

    /// Every `(id, slot)` in id order, for the invariant check.
    pub(crate) fn ordered(&self) -> impl Iterator<Item = (&str, SlotId)> {
        self.ordered.iter().map(|key| (key.id(), key.slot()))
    }

    /// How many ids the ordered map holds, for the invariant check.
    pub(crate) fn ordered_len(&self) -> usize {
        self.ordered.len()
    }

    /// Whether the hash table holds `slot` under `id`'s hash, for the
    /// invariant check.
    pub(crate) fn hashed(&self, id: &str, slot: SlotId) -> bool {
        let hash = self.hasher.hash_one(id);
        self.exact.find(hash, |&found| found == slot).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// An index over `ids`, slot `i` holding `ids[i]`.
    fn index(ids: &[&str]) -> (IdIndex, Vec<Arc<TaskHead>>) {
        let heads: Vec<Arc<TaskHead>> = (0..)
            .zip(ids)
            .map(|(slot, id)| Arc::new(TaskHead::new(id, "r", "g", None, 0, slot)))
            .collect();
        let mut index = IdIndex::default();
        for head in &heads {
            let hash = index.hash(head.id());
            index.insert(hash, Arc::clone(head), |slot| heads[slot as usize].id());
        }
        (index, heads)
    }

    fn matches(index: &IdIndex, ids: &[&str], prefix: &str) -> Vec<String> {
        index
            .with_prefix(prefix)
            .map(|slot| ids[slot as usize].to_owned())
            .collect()
    }

    #[test]
    fn the_key_order_is_the_id_order() {
        let mut ids = vec![
            "",
            "a",
            "a\0",
            "a\0\0",
            "ab",
            "abcdefgh",
            "abcdefgh\0",
            "abcdefghi",
            "abcdefgi",
            "b",
            "é",
            "日本",
            "日本語",
            "🦀",
            "\u{7f}",
            "\0",
        ];
        let mut keys: Vec<IdKey> = ids
            .iter()
            .map(|id| IdKey::of(Arc::new(TaskHead::new(id, "", "", None, 0, 0))))
            .collect();
        keys.sort();
        ids.sort_unstable();
        let sorted: Vec<&str> = keys.iter().map(IdKey::id).collect();
        assert_eq!(sorted, ids);
        // A bound sorts before every id with its first eight bytes, after every
        // id with smaller ones.
        let bound = IdKey::before(head8("a"));
        let after: Vec<&str> = keys
            .iter()
            .filter(|key| **key > bound)
            .map(IdKey::id)
            .collect();
        assert_eq!(after, &ids[ids.iter().position(|id| *id == "a").unwrap()..]);
    }

    #[test]
    fn prefixes_find_every_match_in_id_order_and_nothing_else() {
        let ids = [
            "research-0002",
            "research-0001",
            "a",
            "a\0",
            "ab",
            "abcdefghij",
            "abcdefgh",
            "b",
        ];
        let (index, _) = index(&ids);
        assert_eq!(
            matches(&index, &ids, "research-000"),
            ["research-0001", "research-0002"]
        );
        assert_eq!(matches(&index, &ids, "research-0002"), ["research-0002"]);
        assert_eq!(
            matches(&index, &ids, "a"),
            ["a", "a\0", "ab", "abcdefgh", "abcdefghij"]
        );
        assert_eq!(matches(&index, &ids, "a\0"), ["a\0"]);
        assert_eq!(
            matches(&index, &ids, "abcdefgh"),
            ["abcdefgh", "abcdefghij"]
        );
        assert_eq!(matches(&index, &ids, "c"), Vec::<String>::new());
        assert_eq!(matches(&index, &ids, "").len(), ids.len());
    }

    #[test]
    fn every_prefix_of_every_id_finds_what_a_scan_finds() {
        // Long shared heads (more than the search steps over), zero bytes,
        // short ids and multi-byte characters.
        let mut owned: Vec<String> = (0..40).map(|n| format!("research-{n:04}")).collect();
        owned.extend(
            [
                "",
                "r",
                "re\0",
                "research",
                "research-",
                "a\0\0",
                "a",
                "日本語",
                "日本",
                "🦀x",
            ]
            .map(str::to_owned),
        );
        let ids: Vec<&str> = owned
            .iter()
            .map(String::as_str)
            .filter(|id| !id.is_empty())
            .collect();
        let (index, _) = index(&ids);
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let prefixes = ids.iter().flat_map(|id| {
            id.char_indices()
                .map(|(at, _)| &id[..at])
                .chain(std::iter::once(*id))
        });
        for prefix in prefixes.chain(["research-0039x", "zzz", "a\0\0\0", "\0"]) {
            let expected: Vec<String> = sorted
                .iter()
                .filter(|id| id.starts_with(prefix))
                .map(|id| (*id).to_owned())
                .collect();
            assert_eq!(matches(&index, &ids, prefix), expected, "prefix {prefix:?}");
        }
    }

    #[test]
    fn exact_lookups_and_removals_find_the_right_slot() {
        let ids = ["x1", "x2", "x3"];
        let (mut index, heads) = index(&ids);
        let id_of = |slot: SlotId| heads[slot as usize].id();
        assert_eq!(index.get("x2", id_of), Some(1));
        assert_eq!(index.get("x", id_of), None);
        assert_eq!(
            index.remove(Arc::clone(&heads[1])).map(|head| head.slot()),
            Some(1)
        );
        assert_eq!(
            (index.get("x2", id_of), index.len(), index.ordered_len()),
            (None, 2, 2)
        );
        index.insert(index.hash("x2"), Arc::clone(&heads[1]), id_of);
        assert!(index.hashed("x2", 1));
        assert_eq!(index.get("x2", id_of), Some(1));
    }
}
