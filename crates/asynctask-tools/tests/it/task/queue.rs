//! The queue behind the running limit: first queued first started, cancelled or
//! timed out while queued, messages waiting for the start, a restored queue, and
//! concurrent launches on real threads.

use pretty_assertions::assert_eq;

use super::*;

/// A manager with room for `max` running tasks and `queued` waiting ones.
fn setup_queue(runner: &Arc<FakeRunner>, max: i64, queued: i64) -> (AsyncTaskManager, TaskTool) {
    let (manager, tool) = setup(runner, max);
    manager.set_max_queued_tasks(MaxQueuedTasks::new(queued).expect("a valid bound"));
    (manager, tool)
}

#[tokio::test(start_paused = true)]
async fn launches_past_the_limit_wait_in_the_queue_and_start_first_queued_first() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup_queue(&runner, 1, 2);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let second = call(
        &tool,
        async_params("tester", json!({"timeout_seconds": 60})),
    )
    .await;
    insta::assert_snapshot!("queued", redacted(&second, &[(&agent_id(&second), "<id>")]));
    let second = agent_id(&second);
    let third = call(
        &tool,
        async_params(
            "writer",
            json!({"context": [{"name": "branch", "value": "main"}]}),
        ),
    )
    .await;
    assert_eq!(third.metadata["queuePosition"], 2);
    let third = agent_id(&third);
    let refused = call(&tool, async_params("writer", json!({}))).await;
    insta::assert_snapshot!("queue_full_refusal", redacted(&refused, &[]));
    assert_eq!(
        refused.error.as_ref().map(|e| e.kind),
        Some(ToolErrorType::ExecutionFailed)
    );
    assert_eq!(
        manager.tasks().len(),
        3,
        "the refused launch registered nothing"
    );
    until(|| runner.started() == 1).await;

    assert!(manager.cancel_task(&first));
    until(|| runner.started() == 2).await;
    let started = &runner.requests()[1];
    assert_eq!(
        (
            started.task_id.as_str(),
            started.subagent_name.as_str(),
            started.goal_prompt.as_str()
        ),
        (second.as_str(), "tester", "Find the callers")
    );
    assert_eq!(
        started.timeout,
        Duration::from_secs(60),
        "launched with what it was given"
    );
    assert!(started.run_async);
    assert_eq!(
        manager.task(&second).map(|t| t.status()),
        Some(AsyncTaskStatus::Running)
    );
    assert_eq!(manager.queue_position(&third), Some(1), "moved up");

    assert!(manager.cancel_task(&second));
    until(|| runner.started() == 3).await;
    let started = &runner.requests()[2];
    assert_eq!(started.task_id, third);
    assert_eq!(
        started.context,
        [ContextVar {
            name: "branch".to_owned(),
            value: "main".to_owned()
        }]
    );
    assert!(manager.queued_tasks().is_empty());
    assert!(manager.cancel_task(&third));
    settle(&tool).await;
    assert_eq!(runner.started(), 3, "each ran once");
}

#[tokio::test(start_paused = true)]
async fn a_queued_task_cancelled_never_runs() {
    let runner = FakeRunner::new(Behaviour::WaitForCancel);
    let (manager, tool) = setup_queue(&runner, 1, 5);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let waiting = agent_id(&call(&tool, async_params("tester", json!({}))).await);
    assert!(manager.cancel_task(&waiting));
    let cancelled = manager.task(&waiting).expect("kept in the history");
    assert_eq!(cancelled.status(), AsyncTaskStatus::Cancelled);
    assert_eq!(cancelled.started_at(), None, "it never started");
    assert!(manager.cancel_task(&first));
    settle(&tool).await;
    assert_eq!(runner.started(), 1, "only the first subagent ran");
}

#[tokio::test(start_paused = true)]
async fn a_queued_tasks_timeout_counts_from_its_start() {
    let runner = FakeRunner::new(Behaviour::Sleep(100));
    let (manager, tool) = setup_queue(&runner, 1, 1);
    let begin = Instant::now();
    let _first = call(&tool, async_params("researcher", json!({}))).await;
    let waiting = agent_id(
        &call(
            &tool,
            async_params("tester", json!({"timeout_seconds": 30})),
        )
        .await,
    );
    settle(&tool).await;
    let task = manager.task(&waiting).expect("kept");
    assert_eq!(
        task.status(),
        AsyncTaskStatus::Failed,
        "the sleep outlasts its timeout"
    );
    assert_eq!(task.error(), Some(timeout_text("tester", 30).as_str()));
    // 100 s waiting behind the first, then its own 30 s (and the runner's
    // prompt answer to the cancel).
    assert_eq!(begin.elapsed().as_secs(), 130);
}

#[tokio::test(start_paused = true)]
async fn messages_to_a_queued_task_wait_for_its_start() {
    let runner = FakeRunner::with_catalog(Behaviour::WaitForCancel, &["researcher"]);
    let runner = {
        let mut runner = Arc::into_inner(runner).expect("just made");
        runner.catalog = Some(vec![
            SubagentInfo::new("researcher", "reads").with_messages(true),
        ]);
        Arc::new(runner)
    };
    let (manager, tool) = setup_queue(&runner, 1, 1);
    let first = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    let waiting = agent_id(&call(&tool, async_params("researcher", json!({}))).await);
    manager
        .send_message(&waiting, "also check the tests".to_owned())
        .expect("a queued task takes messages");
    assert!(manager.cancel_task(&first));
    until(|| runner.started() == 2).await;
    let inbox = runner.requests()[1].inbox.clone();
    assert_eq!(inbox.try_recv().as_deref(), Some("also check the tests"));
    assert!(manager.cancel_task(&waiting));
    settle(&tool).await;
}

#[tokio::test(start_paused = true)]
async fn a_task_started_from_a_restored_queue_runs_what_it_was_launched_with() {
    use asynctask_manager::{Journal, JournalEntry, JournalError, StoredTask};
    struct Nowhere;
    impl Journal for Nowhere {
        fn record(&self, _: &[JournalEntry<'_>]) -> Result<(), JournalError> {
            Ok(())
        }
    }
    let runner = FakeRunner::new(Behaviour::Return(output()));
    let launch = serde_json::to_string(
        &SubagentRequest::new("ignored", "tester", "run the suite")
            .with_timeout(Duration::from_secs(90))
            .with_behaviour_prompts(vec!["be brief".to_owned()]),
    )
    .expect("a request serializes");
    let queued = |id: &str, launch: Option<&str>| {
        let info = AsyncTaskInfo::queued(id, "tester", "run the suite", T0);
        match launch {
            Some(launch) => StoredTask::new(info).with_launch(launch),
            None => StoredTask::new(info),
        }
    };
    let manager = AsyncTaskManager::restore(
        MaxAsyncTasks::new(1).expect("a valid limit"),
        Arc::new(ManualClock::new(T0)),
        Arc::new(Nowhere),
        vec![
            queued("q-1", Some(&launch)),
            queued("q-2", None),
            queued("q-3", Some("{not json")),
        ],
    )
    .expect("a registry");
    let tool = TaskTool::new(
        manager.clone(),
        Arc::clone(&runner) as Arc<dyn SubagentRunner>,
    );
    assert_eq!(
        manager.queued_tasks().len(),
        3,
        "held until the tool runs what starts"
    );
    tool.run_queued_tasks();
    manager.start_queued();
    settle(&tool).await;
    let requests = runner.requests();
    assert_eq!(
        requests.len(),
        1,
        "only the task with readable launch parameters ran"
    );
    assert_eq!(
        (
            requests[0].task_id.as_str(),
            requests[0].timeout,
            requests[0].behaviour_prompts.clone()
        ),
        ("q-1", Duration::from_secs(90), vec!["be brief".to_owned()])
    );
    assert_eq!(
        manager.task("q-1").map(|t| t.status()),
        Some(AsyncTaskStatus::Completed)
    );
    assert_eq!(
        manager
            .task("q-2")
            .and_then(|t| t.error().map(str::to_owned))
            .as_deref(),
        Some(
            "Subagent 'tester' could not be started from the queue: it was queued without its launch parameters."
        )
    );
    let error = manager
        .task("q-3")
        .and_then(|t| t.error().map(str::to_owned))
        .expect("failed");
    assert!(
        error.starts_with("Subagent 'tester' could not be started from the queue: its launch parameters cannot be read: "),
        "{error}"
    );
}

/// Counts the runs in flight and the most ever in flight at once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
    ran: Mutex<Vec<String>>,
}

#[async_trait]
impl SubagentRunner for Gauge {
    async fn run(
        &self,
        request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.ran.lock().expect("no panic").push(request.task_id);
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
        Ok(output())
    }
}

#[test]
fn concurrent_launches_fill_the_limit_and_the_queue_and_each_accepted_task_runs_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("a runtime");
    for round in 0..50 {
        runtime.block_on(async {
            let gauge = Arc::new(Gauge::default());
            let manager = AsyncTaskManager::new(MaxAsyncTasks::new(2).expect("a limit"));
            manager.set_max_queued_tasks(MaxQueuedTasks::new(3).expect("a bound"));
            let tool = Arc::new(TaskTool::new(
                manager.clone(),
                Arc::clone(&gauge) as Arc<dyn SubagentRunner>,
            ));
            let launches: Vec<_> = (0..8)
                .map(|_| {
                    let tool = Arc::clone(&tool);
                    tokio::spawn(
                        async move { call(&tool, async_params("worker", json!({}))).await },
                    )
                })
                .collect();
            let mut accepted = Vec::new();
            for launch in launches {
                let result = launch.await.expect("no panic");
                if result.error.is_none() {
                    accepted.push(agent_id(&result));
                }
            }
            // The runs take 2 ms each: all 8 launches may land before any
            // ends (5 accepted), or some after a slot freed.
            assert!(accepted.len() >= 5, "round {round}: {}", accepted.len());
            for _ in 0..2_000 {
                if manager.counts().completed == accepted.len() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            settle(&tool).await;
            assert_eq!(manager.counts().completed, accepted.len(), "round {round}");
            let mut ran = gauge.ran.lock().expect("no panic").clone();
            ran.sort();
            accepted.sort();
            assert_eq!(ran, accepted, "round {round}: each accepted task ran once");
            assert!(
                gauge.most.load(Ordering::SeqCst) <= 2,
                "round {round}: never past the limit"
            );
        });
    }
}
