//! The claim ledger under real threads: owners claiming, acknowledging and
//! releasing while tasks finish, and every result acknowledged exactly once.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use asynctask_manager::{AsyncTaskManager, RegisterTaskInput};
use asynctask_model::{MaxAsyncTasks, OutputObject, TerminateReason};
use asynctask_runtime::{ClaimLedger, ClaimOwner};
use pretty_assertions::assert_eq;

const TASKS: usize = 200;
const OWNERS: usize = 4;

#[test]
fn concurrent_owners_acknowledge_every_result_exactly_once() {
    for round in 0..20 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let ids: Vec<String> = (0..TASKS).map(|i| format!("task-{round}-{i:03}")).collect();
        for id in &ids {
            manager
                .register_task(RegisterTaskInput::new(id.clone(), "sub", "g"))
                .expect("unlimited");
        }
        let ledger = ClaimLedger::new(manager.clone());
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let start = Arc::new(Barrier::new(OWNERS + 1));
        let finisher = {
            let (manager, ids, start) = (manager.clone(), ids.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for (i, id) in ids.iter().enumerate() {
                    if i % 3 == 0 {
                        manager.cancel_task(id);
                    } else {
                        manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
                    }
                }
            })
        };
        let owners: Vec<_> = (0..OWNERS)
            .map(|n| {
                let (ledger, acknowledged, start) = (
                    ledger.clone(),
                    Arc::clone(&acknowledged),
                    Arc::clone(&start),
                );
                thread::spawn(move || {
                    start.wait();
                    for attempt in 0..400 {
                        let claimed = if n == 0 {
                            // Picks the even tasks, looking at the ledger as it
                            // does so (`pick` runs without the ledger's lock).
                            ledger.claim_matching(ClaimOwner::Request, |task| {
                                !ledger.is_claimed(task.id())
                                    && task.id().ends_with(['0', '2', '4', '6', '8'])
                            })
                        } else {
                            ledger.claim(ClaimOwner::Request)
                        };
                        if let Some(claim) = claimed {
                            // Every other delivery "fails" and is released.
                            if (attempt + n) % 2 == 0 {
                                // Released: another owner may take them at once.
                                claim.release();
                            } else if n == 1 {
                                // Acknowledged in two parts, by id.
                                let ids = claim.task_ids().to_vec();
                                let (first, rest) = ids.split_at(ids.len() / 2);
                                let left = claim.acknowledge_some(first);
                                assert_eq!(
                                    left.as_ref()
                                        .map(|claim| claim.task_ids())
                                        .unwrap_or_default(),
                                    rest
                                );
                                let left = left.and_then(|claim| claim.acknowledge_some(rest));
                                assert!(left.is_none());
                                acknowledged.lock().expect("lock").extend(ids);
                            } else {
                                let carried = claim.task_ids().to_vec();
                                let ids = claim.acknowledge();
                                assert_eq!(ids, carried);
                                acknowledged.lock().expect("lock").extend(ids);
                            }
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        finisher.join().expect("finisher");
        for owner in owners {
            owner.join().expect("owner");
        }
        // Whatever is left goes to one last owner.
        if let Some(last) = ledger.claim(ClaimOwner::NextTurn) {
            acknowledged
                .lock()
                .expect("lock")
                .extend(last.acknowledge());
        }
        let mut seen = acknowledged.lock().expect("lock").clone();
        seen.sort();
        assert_eq!(seen, ids, "round {round}: each result acknowledged once");
        assert!(manager.pending_notifications().is_empty());
    }
}

/// How many tasks a reminder says still run (`M async task(s) still running.`).
fn running_in(text: &str) -> usize {
    text.lines()
        .find_map(|line| line.strip_suffix(" async task(s) still running."))
        .map_or(0, |n| n.parse().expect("a count"))
}

#[test]
fn a_claim_counts_every_task_as_pending_or_running_while_tasks_finish() {
    const FEW: usize = 40;
    for round in 0..20 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let ids: Vec<String> = (0..FEW).map(|i| format!("task-{round}-{i:03}")).collect();
        for id in &ids {
            manager
                .register_task(RegisterTaskInput::new(id.clone(), "sub", "g"))
                .expect("unlimited");
        }
        let ledger = ClaimLedger::new(manager.clone());
        let start = Arc::new(Barrier::new(2));
        let finisher = {
            let (manager, ids, start) = (manager.clone(), ids.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for id in &ids {
                    manager.complete_task(id, OutputObject::new(TerminateReason::Goal));
                    thread::yield_now();
                }
            })
        };
        start.wait();
        for _ in 0..200 {
            // Nothing is ever delivered: every task is either pending (and
            // claimed here) or still running, in one and the same reminder.
            if let Some(claim) = ledger.claim(ClaimOwner::Request) {
                let reminder = claim.reminder();
                assert_eq!(
                    reminder.task_ids.len() + running_in(&reminder.text),
                    FEW,
                    "round {round}: {} pending, {} running: {:?}",
                    reminder.task_ids.len(),
                    running_in(&reminder.text),
                    reminder.task_ids
                );
                claim.release();
            }
            thread::yield_now();
        }
        finisher.join().expect("finisher");
    }
}

#[test]
fn a_question_rides_on_one_acknowledged_claim_and_comes_back_when_one_is_released() {
    use asynctask_manager::{Answer, Question, Questions};
    let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
    let (desk, questions) = Questions::channel();
    manager
        .register_task(RegisterTaskInput::new("0f3a9c21-q", "deployer", "g").with_questions(desk))
        .expect("unlimited");
    let ledger = ClaimLedger::new(manager.clone());
    assert!(ledger.claim(ClaimOwner::Request).is_none(), "nothing yet");
    let asking =
        questions.ask(Question::new("Deploy to production too?").with_choices(["yes", "no"]));

    let first = ledger.claim(ClaimOwner::Request).expect("the question");
    assert_eq!(first.questions().len(), 1);
    assert!(first.task_ids().is_empty());
    insta::assert_snapshot!("question_reminder", first.reminder().text);
    assert!(
        ledger.claim(ClaimOwner::Request).is_none(),
        "held by the first"
    );
    drop(first); // its response was never written
    let second = ledger.claim(ClaimOwner::Request).expect("released");
    // The auto-trigger never wakes the agent for a question alone.
    second.acknowledge();
    assert!(ledger.claim(ClaimOwner::Request).is_none(), "shown once");
    assert_eq!(
        manager.pending_questions().len(),
        1,
        "still waiting, still answerable"
    );

    manager
        .answer_question("0f3a9c21-q", Answer::Answered("no".into()))
        .expect("asked");
    let answered = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(asking);
    assert_eq!(answered, Answer::Answered("no".into()));
    assert!(manager.pending_questions().is_empty());
}

#[test]
fn a_question_whose_task_ends_is_withdrawn_and_rides_no_more() {
    use asynctask_manager::{Answer, AnswerError, Question, Questions};
    let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
    let (desk, questions) = Questions::channel();
    manager
        .register_task(RegisterTaskInput::new("a", "deployer", "g").with_questions(desk))
        .expect("unlimited");
    let ledger = ClaimLedger::new(manager.clone());
    let asking = questions.ask(Question::new("?"));
    let claim = ledger.claim(ClaimOwner::Request).expect("the question");
    manager.cancel_task("a");
    drop(claim);
    let next = ledger
        .claim(ClaimOwner::Request)
        .expect("the cancelled result");
    assert!(next.questions().is_empty(), "withdrawn with its task");
    assert_eq!(
        manager.answer_question("a", Answer::Declined),
        Err(AnswerError::NotAsked)
    );
    let answer = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(asking);
    assert_eq!(answer, Answer::Withdrawn);
}

#[test]
fn racing_owners_show_each_question_once_and_each_answer_reaches_its_asker() {
    use asynctask_manager::{Answer, Question, Questions};
    const QUESTIONS: usize = 200;
    for round in 0..5 {
        let manager = AsyncTaskManager::new(MaxAsyncTasks::UNLIMITED);
        let (desk, questions) = Questions::channel();
        let id = format!("asker-{round}");
        manager
            .register_task(RegisterTaskInput::new(id.clone(), "deployer", "g").with_questions(desk))
            .expect("unlimited");
        let ledger = ClaimLedger::new(manager.clone());
        let shown = Arc::new(Mutex::new(Vec::new()));
        let start = Arc::new(Barrier::new(OWNERS + 2));
        let asker = {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let tokio = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("a runtime");
                start.wait();
                (0..QUESTIONS)
                    .map(|n| tokio.block_on(questions.ask(Question::new(format!("Q: {n}")))))
                    .collect::<Vec<_>>()
            })
        };
        let answerer = {
            let (manager, id, start) = (manager.clone(), id.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let mut answered = 0;
                while answered < QUESTIONS {
                    if manager
                        .answer_question(&id, Answer::Answered(format!("a{answered}")))
                        .is_ok()
                    {
                        answered += 1;
                    } else {
                        thread::yield_now();
                    }
                }
            })
        };
        let owners: Vec<_> = (0..OWNERS)
            .map(|owner| {
                let (ledger, shown, start) =
                    (ledger.clone(), Arc::clone(&shown), Arc::clone(&start));
                thread::spawn(move || {
                    start.wait();
                    for turn in 0..2_000 {
                        if let Some(claim) = ledger.claim(ClaimOwner::Request) {
                            let asked: Vec<String> = claim
                                .reminder()
                                .text
                                .lines()
                                .filter(|line| line.starts_with("Q: "))
                                .map(str::to_owned)
                                .collect();
                            // Every other claim's response is lost.
                            if (turn + owner) % 2 == 0 {
                                claim.acknowledge();
                                shown.lock().expect("shown").extend(asked);
                            }
                        }
                    }
                })
            })
            .collect();
        for owner in owners {
            owner.join().expect("an owner");
        }
        answerer.join().expect("the answerer");
        let answers = asker.join().expect("the asker");
        // One question waits at a time: each gets the next answer, in order.
        assert_eq!(
            answers,
            (0..QUESTIONS)
                .map(|n| Answer::Answered(format!("a{n}")))
                .collect::<Vec<_>>()
        );
        let shown = shown.lock().expect("shown").clone();
        let mut once = shown.clone();
        once.sort();
        once.dedup();
        assert_eq!(once.len(), shown.len(), "a question shown twice");
        assert!(manager.pending_questions().is_empty());
    }
}
