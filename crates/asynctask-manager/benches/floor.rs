//! The churn cycle of `benches/manager.rs` on the simplest structures that can
//! serve it, as a floor to read the registry's figures against.
//!
//! Run with `cargo bench -p asynctask-manager --bench floor`. `Floor` keeps no
//! more than the cycle needs: one mutex, a hash map from id to slot (hashbrown
//! and foldhash, as the registry), an ordered set of ids for prefixes, a slab
//! of records, and two queues (pending, then delivered, pruned oldest first
//! past ten). The host's strings move in uncopied, and both indexes hold the
//! record's shared head. It has none of the registry's
//! rules — no limit, queue, journal, events, unrecorded tasks, usage or
//! registration order — so whatever the registry costs above it is the price
//! of those rules and of sharing heads with snapshots; what both cost is the
//! shape of the cycle itself (five locked calls, the host's strings and token
//! freed, a hash table and an ordered index kept, one task pruned a cycle).

use std::borrow::Borrow;
use std::collections::{BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use divan::Bencher;
use tokio_util::sync::CancellationToken;

fn main() {
    divan::main();
}

const HELD: &[usize] = &[10, 1_000, 50_000, 100_000];

/// The history a registry without a limit keeps.
const HISTORY: usize = 10;

/// A well-mixed 64-bit value (splitmix64), the same ids as the manager bench.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a host hands over: the same three strings and token as
/// `RegisterTaskInput::new`.
struct Input {
    id: String,
    subagent_name: String,
    goal_prompt: String,
    token: CancellationToken,
}

fn input(n: u64) -> Input {
    Input {
        id: format!("{:016x}-{n}", mix(n)),
        subagent_name: "researcher".to_owned(),
        goal_prompt: "goal".to_owned(),
        token: CancellationToken::new(),
    }
}

/// What never changes after registration, shared with snapshots.
struct Head {
    id: String,
    _subagent_name: String,
    _goal_prompt: String,
}

/// A head in an index: hashed, compared and looked up by its id.
struct Key(Arc<Head>);

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

/// What a read hands out.
#[derive(Clone)]
struct Snapshot {
    head: Arc<Head>,
    _finished: bool,
    _output: Option<Arc<String>>,
}

struct Record {
    head: Arc<Head>,
    finished: bool,
    token: Option<CancellationToken>,
    output: Option<Arc<String>>,
}

impl Record {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            head: Arc::clone(&self.head),
            _finished: self.finished,
            _output: self.output.clone(),
        }
    }
}

/// What a prefix finds.
#[expect(
    dead_code,
    reason = "the bench returns what it found, unread, as a caller would get it"
)]
enum Found {
    None,
    One(Snapshot),
    Many(Vec<Snapshot>),
}

#[derive(Default)]
struct State {
    ids: hashbrown::HashMap<Key, usize>,
    ordered: BTreeSet<Key>,
    slots: Vec<Option<Record>>,
    free: Vec<usize>,
    pending: VecDeque<usize>,
    delivered: VecDeque<usize>,
}

impl State {
    fn record(&self, id: &str) -> Option<&Record> {
        self.slots.get(*self.ids.get(id)?)?.as_ref()
    }
}

#[derive(Default)]
struct Floor {
    state: Mutex<State>,
}

impl Floor {
    fn holding(held: usize) -> Floor {
        let floor = Floor::default();
        for n in 0..held as u64 {
            floor.register(input(n));
        }
        floor
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(&self, input: Input) -> Option<Snapshot> {
        let mut state = self.lock();
        if state.ids.contains_key(input.id.as_str()) {
            return None;
        }
        let head = Arc::new(Head {
            id: input.id,
            _subagent_name: input.subagent_name,
            _goal_prompt: input.goal_prompt,
        });
        let record = Record {
            head: Arc::clone(&head),
            finished: false,
            token: Some(input.token),
            output: None,
        };
        let snapshot = record.snapshot();
        let slot = match state.free.pop() {
            Some(slot) => {
                state.slots[slot] = Some(record);
                slot
            }
            None => {
                state.slots.push(Some(record));
                state.slots.len() - 1
            }
        };
        state.ids.insert(Key(Arc::clone(&head)), slot);
        state.ordered.insert(Key(head));
        Some(snapshot)
    }

    fn complete(&self, id: &str, output: String) -> bool {
        let token = {
            let mut state = self.lock();
            let Some(&slot) = state.ids.get(id) else {
                return false;
            };
            let Some(record) = state.slots[slot].as_mut().filter(|r| !r.finished) else {
                return false;
            };
            record.finished = true;
            record.output = Some(Arc::new(output));
            let token = record.token.take();
            state.pending.push_back(slot);
            token
        };
        // Freed outside the lock, as the registry does.
        drop(token);
        true
    }

    /// No allocation for a unique match, as the registry's `PrefixMatch`.
    fn find_by_prefix(&self, prefix: &str) -> Found {
        let state = self.lock();
        let mut matches = state
            .ordered
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|key| key.0.id.starts_with(prefix))
            .filter_map(|key| state.record(&key.0.id).map(Record::snapshot));
        match (matches.next(), matches.next()) {
            (None, _) => Found::None,
            (Some(one), None) => Found::One(one),
            (Some(first), Some(second)) => {
                Found::Many([first, second].into_iter().chain(matches).collect())
            }
        }
    }

    fn pending_notifications(&self) -> Vec<Snapshot> {
        let state = self.lock();
        state
            .pending
            .iter()
            .filter_map(|&slot| state.slots[slot].as_ref().map(Record::snapshot))
            .collect()
    }

    fn mark_notified(&self, id: &str) -> bool {
        let mut state = self.lock();
        let Some(&slot) = state.ids.get(id) else {
            return false;
        };
        let Some(at) = state.pending.iter().position(|&pending| pending == slot) else {
            return false;
        };
        state.pending.remove(at);
        state.delivered.push_back(slot);
        while state.pending.len() + state.delivered.len() > HISTORY {
            let Some(oldest) = state.delivered.pop_front() else {
                break;
            };
            if let Some(record) = state.slots[oldest].take() {
                state.ids.remove(record.head.id.as_str());
                state.ordered.remove(record.head.id.as_str());
                state.free.push(oldest);
            }
        }
        true
    }
}

/// The manager bench's `churn`, on `Floor`.
#[divan::bench(args = HELD, sample_size = 50)]
fn churn(bencher: Bencher, held: usize) {
    let floor = Floor::holding(held);
    let mut n = 1u64 << 40;
    bencher
        .with_inputs(|| {
            n += 1;
            input(n)
        })
        .bench_local_values(|input| {
            let task = floor.register(input).expect("a fresh id");
            let id = &task.head.id;
            assert!(floor.complete(id, String::new()));
            let found = floor.find_by_prefix(&id[..16]);
            assert!(matches!(found, Found::One(_)));
            let pending = floor.pending_notifications();
            assert!(floor.mark_notified(id));
            (found, pending)
        });
}
