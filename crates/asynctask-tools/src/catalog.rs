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

/// What a runner tells the model about the subagents it does not offer: why
/// (a config the user has not trusted, one changed since the user trusted it,
/// no config at all) and what the user does about it, and the names it holds
/// back. The `task` tool adds the text to its description, a serving layer to
/// its instructions, and a call naming a withheld subagent is refused with
/// the text instead of as an unknown name. Withheld names are never listed
/// to the model.
///
/// # Examples
///
/// ```
/// use asynctask_tools::CatalogNote;
///
/// let note = CatalogNote::new("The project's config is not trusted.")
///     .with_withheld(vec!["deploy".to_owned()]);
/// assert_eq!(note.withheld, ["deploy"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CatalogNote {
    /// One or two sentences for the model.
    pub text: String,
    /// Names that are not offered, though the model may have heard of them.
    pub withheld: Vec<String>,
}

impl CatalogNote {
    /// A note withholding no name.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        CatalogNote {
            text: text.into(),
            withheld: Vec::new(),
        }
    }

    /// Names the subagents held back.
    #[must_use]
    pub fn with_withheld(mut self, withheld: Vec<String>) -> Self {
        self.withheld = withheld;
        self
    }
}
