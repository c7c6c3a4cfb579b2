//! What a runner says about each subagent it offers: [`SubagentInfo`], the
//! entries of [`SubagentRunner::catalog`](crate::SubagentRunner::catalog).

/// One subagent a runner offers: its name, what it is for, and whether it
/// reads messages sent to it while it runs.
///
/// # Examples
///
/// ```
/// use asynctask_tools::SubagentInfo;
///
/// let info = SubagentInfo::new("tester", "Runs the unit tests").with_messages(true);
/// assert_eq!((info.name.as_str(), info.accepts_messages), ("tester", true));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct SubagentInfo {
    /// The name the model passes as `subagent_name`.
    pub name: String,
    /// What it is for, for the model (may be empty).
    pub description: String,
    /// Whether it reads its [inbox](crate::SubagentRequest::inbox): `message_async_task`
    /// refuses messages to a subagent that does not. `false` unless set.
    pub accepts_messages: bool,
}

impl SubagentInfo {
    /// A subagent that takes no messages.
    #[must_use]
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        SubagentInfo {
            name: name.into(),
            description: description.into(),
            accepts_messages: false,
        }
    }

    /// Says whether it reads messages sent while it runs.
    #[must_use]
    pub fn with_messages(mut self, accepts_messages: bool) -> Self {
        self.accepts_messages = accepts_messages;
        self
    }
}
