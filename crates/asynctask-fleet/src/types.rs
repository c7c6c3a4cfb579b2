//! The plain data that crosses the fleet's API: tasks submitted and stored,
//! workers and their leases, claims, interrupted tasks.

use std::time::Duration;

use asynctask_model::AsyncTaskInfo;
use asynctask_tools::{ContextVar, OutputVarSpec, SubagentInfo, SubagentRequest};

/// A task a front submits to the fleet: it waits in the queue until a worker
/// that serves its subagent has a free slot and the workspace is under its
/// limit. It carries the whole launch (behaviour prompts, context, output
/// spec, tool whitelist, timeout, depth): the worker's subagent is given
/// exactly what a local run would be ([`from_request`](Self::from_request)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewTask {
    /// The task's id, unique in the database.
    pub id: String,
    /// The workspace (the project) it belongs to.
    pub workspace: String,
    /// The subagent that runs it.
    pub subagent_name: String,
    /// The goal it is given.
    pub goal_prompt: String,
    /// Who launched it (a session), when known.
    pub origin: Option<String>,
    /// The front that submitted it: its result is kept for that front while
    /// the front's lease holds.
    pub front: Option<i64>,
    /// Extra behaviour instructions.
    pub behaviour_prompts: Vec<String>,
    /// The tools its subagent may use (`None`: all of its tools).
    pub tool_whitelist: Option<Vec<String>>,
    /// The variables its subagent must emit.
    pub output_spec: Vec<OutputVarSpec>,
    /// Named context values.
    pub context: Vec<ContextVar>,
    /// How long it may run once a worker starts it (resolved and capped by
    /// the front; [`SubagentRequest::DEFAULT_TIMEOUT`] unless set).
    pub timeout: Duration,
    /// Whether its launch was in the background (`true` unless set).
    pub run_async: bool,
    /// How deep its subagent runs among nested subagents (1 unless set).
    pub depth: u32,
}

impl NewTask {
    /// A task with no origin.
    #[must_use]
    pub fn new(
        id: impl Into<String>,
        workspace: impl Into<String>,
        subagent_name: impl Into<String>,
        goal_prompt: impl Into<String>,
    ) -> Self {
        NewTask {
            id: id.into(),
            workspace: workspace.into(),
            subagent_name: subagent_name.into(),
            goal_prompt: goal_prompt.into(),
            origin: None,
            front: None,
            behaviour_prompts: Vec::new(),
            tool_whitelist: None,
            output_spec: Vec::new(),
            context: Vec::new(),
            timeout: SubagentRequest::DEFAULT_TIMEOUT,
            run_async: true,
            depth: 1,
        }
    }

    /// The task a launch asks for, in `workspace`: the request's id,
    /// subagent, goal and every other field of the launch (its handles stay
    /// behind: the worker's run gets its own).
    ///
    /// ```
    /// use std::time::Duration;
    /// use asynctask_fleet::NewTask;
    /// use asynctask_tools::SubagentRequest;
    ///
    /// let request = SubagentRequest::new("a1", "tester", "run the tests")
    ///     .with_behaviour_prompts(vec!["be brief".to_owned()])
    ///     .with_timeout(Duration::from_secs(60))
    ///     .with_depth(2);
    /// let task = NewTask::from_request("team-a", &request);
    /// assert_eq!((task.timeout, task.depth), (Duration::from_secs(60), 2));
    /// assert_eq!(task.request(), request);
    /// ```
    #[must_use]
    pub fn from_request(workspace: impl Into<String>, request: &SubagentRequest) -> Self {
        NewTask {
            behaviour_prompts: request.behaviour_prompts.clone(),
            tool_whitelist: request.tool_whitelist.clone(),
            output_spec: request.output_spec.clone(),
            context: request.context.clone(),
            timeout: request.timeout,
            run_async: request.run_async,
            depth: request.depth,
            ..NewTask::new(
                request.task_id.clone(),
                workspace,
                request.subagent_name.clone(),
                request.goal_prompt.clone(),
            )
        }
    }

    /// The request it launches, as stored with the task (with fresh
    /// handles: no progress reported, a closed inbox, no questions).
    #[must_use]
    pub fn request(&self) -> SubagentRequest {
        SubagentRequest::new(
            self.id.clone(),
            self.subagent_name.clone(),
            self.goal_prompt.clone(),
        )
        .with_behaviour_prompts(self.behaviour_prompts.clone())
        .with_tool_whitelist(self.tool_whitelist.clone())
        .with_output_spec(self.output_spec.clone())
        .with_context(self.context.clone())
        .with_timeout(self.timeout)
        .with_run_async(self.run_async)
        .with_depth(self.depth)
    }

    /// Keeps its result for `front` while that front lives.
    #[must_use]
    pub fn with_front(mut self, front: &crate::FrontLease) -> Self {
        self.front = Some(front.front_id);
        self
    }

    /// Sets who launched it.
    #[must_use]
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }
}

/// A task as the fleet holds it: the model's task, and where it belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetTask {
    /// The task, with the model's statuses and times.
    pub info: AsyncTaskInfo,
    /// Its workspace.
    pub workspace: String,
    /// Who launched it, when known.
    pub origin: Option<String>,
    /// The worker that runs or ran it, once claimed.
    pub worker: Option<String>,
    /// The last line of progress its worker reported, while it ran.
    pub progress: Option<String>,
    /// The front its result is kept for, when one submitted or adopted it.
    pub front: Option<i64>,
    /// How long its whole output was (bytes), when the fleet stores it
    /// ([`Fleet::whole_output`](crate::Fleet::whole_output)): its result
    /// was cut.
    pub whole_output_bytes: Option<u64>,
}

/// What a worker registers with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerSpec {
    /// Its name, for people and for the error of the tasks it loses
    /// (`interrupted: worker <name> lost`). Need not be unique.
    pub name: String,
    /// How many tasks it runs at once (at least 1).
    pub capacity: u32,
    /// The subagents it serves: it is given only their tasks.
    pub subagents: Vec<String>,
    /// The workspaces it serves: it is given only their tasks, and it
    /// registers only if it names at least one. A task runs in the
    /// worker's checkout with the worker's secrets, so a worker serves only
    /// the workspaces whose people it trusts with them.
    pub workspaces: Vec<String>,
    /// What the model is told of them (name and description), published
    /// with the registration: the fleet's catalog is the union of the live
    /// workers' ([`Fleet::catalog`](crate::Fleet::catalog)). A subagent
    /// served but missing here is published with an empty description.
    pub catalog: Vec<SubagentInfo>,
    /// How long its lease lasts without a heartbeat (at least 1 ms).
    pub lease: Duration,
}

impl WorkerSpec {
    /// A worker named `name` serving `subagents`, with capacity 1 and a
    /// lease of [`DEFAULT_LEASE`], in no workspace yet: name them with
    /// [`with_workspaces`](Self::with_workspaces) (a worker serving none is
    /// refused at registration).
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        subagents: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        WorkerSpec {
            name: name.into(),
            capacity: 1,
            subagents: subagents.into_iter().map(Into::into).collect(),
            workspaces: Vec::new(),
            catalog: Vec::new(),
            lease: DEFAULT_LEASE,
        }
    }

    /// Sets the descriptions published for its subagents (the entries the
    /// `task` tool lists for them).
    #[must_use]
    pub fn with_catalog(mut self, catalog: Vec<SubagentInfo>) -> Self {
        self.catalog = catalog;
        self
    }

    /// The catalog published with the registration: one entry per subagent
    /// served, in the order served, its description from
    /// [`catalog`](Self::catalog) (empty when it has none), and whether it
    /// takes steering messages (from there too; `false` when not named).
    ///
    /// ```
    /// use asynctask_fleet::WorkerSpec;
    /// use asynctask_tools::SubagentInfo;
    ///
    /// let spec = WorkerSpec::new("build-1", ["tester", "linter"])
    ///     .with_catalog(vec![SubagentInfo::new("tester", "Runs the tests").with_messages(true)]);
    /// let published = spec.published_catalog();
    /// assert_eq!(published[0], SubagentInfo::new("tester", "Runs the tests").with_messages(true));
    /// assert_eq!(published[1], SubagentInfo::new("linter", ""));
    /// ```
    #[must_use]
    pub fn published_catalog(&self) -> Vec<SubagentInfo> {
        self.subagents
            .iter()
            .map(|name| {
                let known = self.catalog.iter().find(|info| &info.name == name);
                let description = known.map_or("", |info| info.description.as_str());
                SubagentInfo::new(name.clone(), description)
                    .with_messages(known.is_some_and(|info| info.accepts_messages))
            })
            .collect()
    }

    /// Sets the workspaces it serves (it claims only their tasks).
    ///
    /// ```
    /// use asynctask_fleet::WorkerSpec;
    ///
    /// let spec = WorkerSpec::new("build-1", ["tester"]).with_workspaces(["team-a", "team-b"]);
    /// assert_eq!(spec.workspaces, ["team-a", "team-b"]);
    /// ```
    #[must_use]
    pub fn with_workspaces(
        mut self,
        workspaces: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.workspaces = workspaces.into_iter().map(Into::into).collect();
        self
    }

    /// Sets how many tasks it runs at once.
    #[must_use]
    pub fn with_capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// Sets how long its lease lasts without a heartbeat.
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
}

/// The lease a worker's registration starts with, unless it says otherwise:
/// long enough to ride out a database restart, short enough that a lost
/// worker's tasks are reported within a minute.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A registered worker's lease: renewed by
/// [`Fleet::heartbeat`](crate::Fleet::heartbeat), lost when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLease {
    /// The worker's id in the database (a new one at every registration).
    pub worker_id: i64,
    /// Its name.
    pub name: String,
    /// When the lease expires unless renewed, in Unix milliseconds of the
    /// fleet's clock.
    pub expires_at: u64,
}

/// A task a worker claimed: it runs it, and every write it makes about the
/// task carries the claim's fencing token. It carries the whole launch the
/// front submitted ([`request`](Self::request) is what its subagent runs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimedTask {
    /// The task's id.
    pub id: String,
    /// Its workspace.
    pub workspace: String,
    /// The subagent to run.
    pub subagent_name: String,
    /// Its goal.
    pub goal_prompt: String,
    /// The fencing token of this claim: it only grows across the fleet, and
    /// the task accepts writes carrying it only while the claim is current.
    pub fence: i64,
    /// Extra behaviour instructions.
    pub behaviour_prompts: Vec<String>,
    /// The tools its subagent may use (`None`: all of its tools).
    pub tool_whitelist: Option<Vec<String>>,
    /// The variables its subagent must emit.
    pub output_spec: Vec<OutputVarSpec>,
    /// Named context values.
    pub context: Vec<ContextVar>,
    /// How long it may run (the timeout its front resolved).
    pub timeout: Duration,
    /// Whether its launch was in the background.
    pub run_async: bool,
    /// How deep its subagent runs among nested subagents.
    pub depth: u32,
}

impl ClaimedTask {
    /// The claimed task, its launch read from `stored` (the JSON
    /// [`stored_request`] wrote); the id, subagent and goal are the row's.
    pub(crate) fn from_stored(
        (id, workspace, subagent_name, goal_prompt): (String, String, String, String),
        fence: i64,
        stored: &str,
    ) -> Result<Self, serde_json::Error> {
        let request: SubagentRequest = serde_json::from_str(stored)?;
        Ok(ClaimedTask {
            id,
            workspace,
            subagent_name,
            goal_prompt,
            fence,
            behaviour_prompts: request.behaviour_prompts,
            tool_whitelist: request.tool_whitelist,
            output_spec: request.output_spec,
            context: request.context,
            timeout: request.timeout,
            run_async: request.run_async,
            depth: request.depth,
        })
    }

    /// The request its subagent runs: everything the front launched, with
    /// fresh handles (a worker gives it its own progress, inbox and
    /// questions).
    #[must_use]
    pub fn request(&self) -> SubagentRequest {
        SubagentRequest::new(
            self.id.clone(),
            self.subagent_name.clone(),
            self.goal_prompt.clone(),
        )
        .with_behaviour_prompts(self.behaviour_prompts.clone())
        .with_tool_whitelist(self.tool_whitelist.clone())
        .with_output_spec(self.output_spec.clone())
        .with_context(self.context.clone())
        .with_timeout(self.timeout)
        .with_run_async(self.run_async)
        .with_depth(self.depth)
    }
}

/// The launch a task row stores (JSON: a [`SubagentRequest`] without its
/// handles).
pub(crate) fn stored_request(task: &NewTask) -> String {
    serde_json::to_string(&task.request()).unwrap_or_default()
}

/// A running task the fleet gave up on because its worker's lease expired:
/// it is now failed, `interrupted: worker <name> lost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The task's id.
    pub id: String,
    /// Its workspace.
    pub workspace: String,
    /// The worker that lost it.
    pub worker: String,
}

/// The error of a task whose worker was lost.
///
/// # Examples
///
/// ```
/// assert_eq!(asynctask_fleet::lost_worker_error("build-3"), "interrupted: worker build-3 lost");
/// ```
#[must_use]
pub fn lost_worker_error(worker: &str) -> String {
    format!("interrupted: worker {worker} lost")
}

/// The error of a task running under a worker's registration that the
/// worker does not run (a claim whose answer it never got).
///
/// # Examples
///
/// ```
/// assert_eq!(
///     asynctask_fleet::untracked_task_error("build-3"),
///     "interrupted: worker build-3 lost track of it"
/// );
/// ```
#[must_use]
pub fn untracked_task_error(worker: &str) -> String {
    format!("interrupted: worker {worker} lost track of it")
}
