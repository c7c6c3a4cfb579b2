//! The [`Tool`] trait and the [`ToolSpec`] that describes a tool to each provider.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::params::ToolParams;
use crate::result::ToolResult;
use crate::schema;

/// A tool the model can call.
///
/// `execute` takes the model's raw JSON arguments (untrusted) and never panics
/// on bad input: it answers with a [`ToolResult`] whose `error` names the problem.
/// `cancel` is the host's signal that the call itself was abandoned.
///
/// Most tools parse their arguments into a typed struct first: implement
/// [`TypedTool`] instead, and `Tool` comes with the parsing and the error result.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls, as in [`spec`](Self::spec) (without building
    /// the whole spec).
    fn name(&self) -> &str;

    /// The tool's name, description and canonical parameter schema.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the call; a background task it already
    /// launched keeps running.
    async fn execute(&self, params: Value, cancel: CancellationToken) -> ToolResult;
}

/// A [`Tool`] whose arguments are a [`ToolParams`] type: the adapter parses the
/// model's JSON into [`Params`](Self::Params) and hands it to [`run`](Self::run),
/// or answers with the `InvalidToolParams` result that names the field at fault.
///
/// # Examples
///
/// ```
/// use asynctask_tools::{ToolParams, ToolResult, ToolSpec, Tool, TypedTool};
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct Greet {
///     /// Who to greet.
///     name: String,
/// }
/// impl ToolParams for Greet {}
/// struct Greeter;
/// #[async_trait::async_trait]
/// impl TypedTool for Greeter {
///     type Params = Greet;
///     fn name(&self) -> &str { "greet" }
///     fn spec(&self) -> ToolSpec {
///         ToolSpec::new("greet", "Greet", "Say hello.", Greet::schema())
///     }
///     async fn run(&self, params: Greet, _cancel: CancellationToken) -> ToolResult {
///         let text = format!("hello, {}", params.name);
///         ToolResult::success(text.clone(), text, serde_json::Value::Null)
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let tool: &dyn Tool = &Greeter;
/// let ok = tool.execute(serde_json::json!({"name": "Ada"}), CancellationToken::new()).await;
/// assert_eq!(ok.llm_content, "hello, Ada");
/// let bad = tool.execute(serde_json::json!({"name": 1}), CancellationToken::new()).await;
/// assert_eq!(bad.llm_content, "Invalid parameters for greet: name: invalid type: integer `1`, expected a string");
/// # });
/// ```
#[async_trait]
pub trait TypedTool: Send + Sync {
    /// The parsed arguments.
    type Params: ToolParams + Send + 'static;

    /// The name the model calls.
    fn name(&self) -> &str;

    /// The tool's name, description and canonical parameter schema (usually
    /// [`Params::schema`](ToolParams::schema)).
    fn spec(&self) -> ToolSpec;

    /// Runs the tool on arguments that parsed.
    ///
    /// # Cancel safety
    ///
    /// As [`Tool::execute`].
    async fn run(&self, params: Self::Params, cancel: CancellationToken) -> ToolResult;
}

#[async_trait]
impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        TypedTool::name(self)
    }

    fn spec(&self) -> ToolSpec {
        TypedTool::spec(self)
    }

    async fn execute(&self, params: Value, cancel: CancellationToken) -> ToolResult {
        match T::Params::parse(params) {
            Ok(params) => self.run(params, cancel).await,
            Err(err) => err.to_tool_result(TypedTool::name(self)),
        }
    }
}

/// A tool's declaration: name, description, and the canonical JSON Schema of its
/// parameters (draft 2020-12, subschemas inlined, no `$schema`), with adapters
/// that lower it to what each LLM provider accepts.
///
/// # Examples
///
/// ```
/// use asynctask_tools::{CheckAsyncTasksTool, Tool};
/// use asynctask_manager::AsyncTaskManager;
///
/// let spec = CheckAsyncTasksTool::new(AsyncTaskManager::default()).spec();
/// let openai = spec.to_openai_chat();
/// assert_eq!(openai["function"]["strict"], true);
/// assert_eq!(openai["function"]["parameters"]["required"], serde_json::json!(["task_id"]));
/// let gemini = spec.to_gemini_openapi();
/// assert_eq!(gemini["parameters"]["properties"]["task_id"]["nullable"], true);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls (`task`, `check_async_tasks`,
    /// `message_async_task`, `todo_pause`).
    pub name: String,
    /// A human-readable name (`Check Async Tasks`).
    pub display_name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// The canonical JSON Schema of the parameters.
    pub parameters: Value,
    /// Behaviour hints for clients (MCP annotations). Deserializing, a spec
    /// without them gets [`ToolAnnotations::DEFAULT`].
    #[serde(default)]
    pub annotations: ToolAnnotations,
}

/// Hints about a tool's behaviour, as MCP defines them.
///
/// Start from [`DEFAULT`](Self::DEFAULT) (MCP's own defaults) or
/// [`READ_ONLY`](Self::READ_ONLY) and adjust with the `with_*` methods.
/// Deserializing, a hint left out takes its value from `DEFAULT`.
///
/// # Examples
///
/// ```
/// use asynctask_tools::ToolAnnotations;
///
/// let end = ToolAnnotations::DEFAULT.with_idempotent(true).with_open_world(false);
/// assert!(end.destructive && end.idempotent && !end.read_only && !end.open_world);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ToolAnnotations {
    /// The tool changes nothing.
    pub read_only: bool,
    /// The tool may change things in ways that cannot be undone.
    pub destructive: bool,
    /// Calling it twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool reaches beyond the host (the network, other programs).
    pub open_world: bool,
}

impl ToolAnnotations {
    /// MCP's defaults: the tool may change things, destructively, is not
    /// idempotent, and reaches beyond the host.
    pub const DEFAULT: ToolAnnotations = ToolAnnotations {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };

    /// A tool that only reads what the host holds.
    pub const READ_ONLY: ToolAnnotations = ToolAnnotations {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };

    /// Sets [`read_only`](Self::read_only).
    #[must_use]
    pub const fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets [`destructive`](Self::destructive).
    #[must_use]
    pub const fn with_destructive(mut self, destructive: bool) -> Self {
        self.destructive = destructive;
        self
    }

    /// Sets [`idempotent`](Self::idempotent).
    #[must_use]
    pub const fn with_idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets [`open_world`](Self::open_world).
    #[must_use]
    pub const fn with_open_world(mut self, open_world: bool) -> Self {
        self.open_world = open_world;
        self
    }
}

impl Default for ToolAnnotations {
    fn default() -> Self {
        ToolAnnotations::DEFAULT
    }
}

impl ToolSpec {
    /// A spec with [default annotations](ToolAnnotations::DEFAULT).
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        display_name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            display_name: display_name.into(),
            description: description.into(),
            parameters,
            annotations: ToolAnnotations::DEFAULT,
        }
    }

    /// Replaces the annotations.
    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// OpenAI Chat Completions: `{"type":"function","function":{name, description,
    /// parameters, strict: true}}`. The parameters are lowered to OpenAI's strict
    /// rules (every property required, optional ones nullable, nullable arrays
    /// and objects as `anyOf` with a `{"type": "null"}` branch,
    /// `additionalProperties: false` on every object, unsupported keywords moved
    /// into descriptions).
    #[must_use]
    pub fn to_openai_chat(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": schema::lower_openai_strict(&self.parameters),
                "strict": true,
            }
        })
    }

    /// OpenAI Responses API: `{"type":"function", name, description, parameters,
    /// strict: true}`, with the same strict lowering as
    /// [`to_openai_chat`](Self::to_openai_chat). `strict` is written out: left
    /// out, the API tries strict mode and falls back to non-strict.
    #[must_use]
    pub fn to_openai_responses(&self) -> Value {
        json!({
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": schema::lower_openai_strict(&self.parameters),
            "strict": true,
        })
    }

    /// Anthropic Messages API: `{name, description, input_schema}` with the
    /// canonical schema.
    #[must_use]
    pub fn to_anthropic(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.parameters,
        })
    }

    /// Anthropic Messages API with strict tool use: `{name, description,
    /// input_schema, strict: true}`, the schema lowered to what strict mode
    /// accepts (length and number bounds and patterns moved into descriptions,
    /// optional properties left out rather than nullable).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_tools::{TodoPauseTool, Tool};
    ///
    /// let strict = TodoPauseTool::new().spec().to_anthropic_strict();
    /// assert_eq!(strict["strict"], true);
    /// let reason = &strict["input_schema"]["properties"]["reason"];
    /// assert!(reason.get("maxLength").is_none());
    /// assert!(reason["description"].as_str().unwrap().ends_with("1 to 500 characters. Must not be blank."));
    /// ```
    #[must_use]
    pub fn to_anthropic_strict(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": schema::lower_strict(&self.parameters),
            "strict": true,
        })
    }

    /// Amazon Bedrock Converse API, one entry of `toolConfig.tools`:
    /// `{"toolSpec": {name, description, inputSchema: {json}}}` with the
    /// canonical schema.
    #[must_use]
    pub fn to_bedrock(&self) -> Value {
        json!({
            "toolSpec": {
                "name": self.name,
                "description": self.description,
                "inputSchema": {"json": self.parameters},
            }
        })
    }

    /// Amazon Bedrock Converse API with strict tool use: as
    /// [`to_bedrock`](Self::to_bedrock) with `strict: true` and the schema of
    /// [`to_anthropic_strict`](Self::to_anthropic_strict) (Bedrock's strict
    /// mode has Anthropic's limits).
    #[must_use]
    pub fn to_bedrock_strict(&self) -> Value {
        json!({
            "toolSpec": {
                "name": self.name,
                "description": self.description,
                "inputSchema": {"json": schema::lower_strict(&self.parameters)},
                "strict": true,
            }
        })
    }

    /// Gemini function declaration with `parametersJsonSchema`: the canonical
    /// JSON Schema with `pattern`, `minLength` and `maxLength` moved into
    /// descriptions (Gemini ignores them there).
    #[must_use]
    pub fn to_gemini(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "parametersJsonSchema": schema::lower_gemini_json(&self.parameters),
        })
    }

    /// Gemini Interactions API function tool: `{"type": "function", name,
    /// description, parameters}`, with the schema of [`to_gemini`](Self::to_gemini).
    #[must_use]
    pub fn to_gemini_interactions(&self) -> Value {
        json!({
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": schema::lower_gemini_json(&self.parameters),
        })
    }

    /// Gemini function declaration with `parameters` in the OpenAPI 3.0 subset:
    /// upper-case types, `nullable` instead of type arrays, no
    /// `additionalProperties`, `$ref` or `const`.
    #[must_use]
    pub fn to_gemini_openapi(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "parameters": schema::lower_gemini_openapi(&self.parameters),
        })
    }

    /// MCP `tools/list` entry: `{name, title, description, inputSchema,
    /// annotations}` with every hint written out.
    #[must_use]
    pub fn to_mcp(&self) -> Value {
        json!({
            "name": self.name,
            "title": self.display_name,
            "description": self.description,
            "inputSchema": self.parameters,
            "annotations": {
                "title": self.display_name,
                "readOnlyHint": self.annotations.read_only,
                "destructiveHint": self.annotations.destructive,
                "idempotentHint": self.annotations.idempotent,
                "openWorldHint": self.annotations.open_world,
            },
        })
    }

    /// The definition for `provider`.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_tools::{Provider, TodoPauseTool, Tool};
    ///
    /// let spec = TodoPauseTool::new().spec();
    /// assert_eq!(spec.for_provider(Provider::Anthropic), spec.to_anthropic());
    /// assert_eq!(spec.for_provider(Provider::OpenAiChat)["function"]["name"], "todo_pause");
    /// ```
    #[must_use]
    pub fn for_provider(&self, provider: Provider) -> Value {
        match provider {
            Provider::OpenAiChat => self.to_openai_chat(),
            Provider::OpenAiResponses => self.to_openai_responses(),
            Provider::Anthropic => self.to_anthropic(),
            Provider::AnthropicStrict => self.to_anthropic_strict(),
            Provider::Bedrock => self.to_bedrock(),
            Provider::BedrockStrict => self.to_bedrock_strict(),
            Provider::Gemini => self.to_gemini(),
            Provider::GeminiInteractions => self.to_gemini_interactions(),
            Provider::GeminiOpenApi => self.to_gemini_openapi(),
            Provider::Mcp => self.to_mcp(),
        }
    }
}

/// An LLM provider's tool-definition format.
///
/// Its [`name`](Self::name) is the lowercase, hyphenated spelling used on the
/// command line and in `docs/schemas/<name>/`.
///
/// # Examples
///
/// ```
/// use asynctask_tools::Provider;
///
/// assert_eq!("gemini-openapi".parse::<Provider>(), Ok(Provider::GeminiOpenApi));
/// assert_eq!(Provider::OpenAiChat.to_string(), "openai-chat");
/// let unknown = "cohere".parse::<Provider>().unwrap_err();
/// assert_eq!(
///     unknown.to_string(),
///     "unknown provider 'cohere'; expected one of: openai-chat, openai-responses, anthropic, \
///      anthropic-strict, bedrock, bedrock-strict, gemini, gemini-interactions, gemini-openapi, mcp",
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI Chat Completions, strict function calling.
    OpenAiChat,
    /// OpenAI Responses API, strict function calling.
    OpenAiResponses,
    /// Anthropic Messages API.
    Anthropic,
    /// Anthropic Messages API, strict tool use.
    AnthropicStrict,
    /// Amazon Bedrock Converse API.
    Bedrock,
    /// Amazon Bedrock Converse API, strict tool use.
    BedrockStrict,
    /// Gemini with `parametersJsonSchema` (JSON Schema).
    Gemini,
    /// Gemini Interactions API function tools (JSON Schema).
    GeminiInteractions,
    /// Gemini with `parameters` (the OpenAPI 3.0 subset).
    GeminiOpenApi,
    /// MCP `tools/list`.
    Mcp,
}

impl Provider {
    /// Every provider, in documentation order.
    pub const ALL: [Provider; 10] = [
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
        Provider::Anthropic,
        Provider::AnthropicStrict,
        Provider::Bedrock,
        Provider::BedrockStrict,
        Provider::Gemini,
        Provider::GeminiInteractions,
        Provider::GeminiOpenApi,
        Provider::Mcp,
    ];

    /// The provider's name: `openai-chat`, `openai-responses`, `anthropic`,
    /// `anthropic-strict`, `bedrock`, `bedrock-strict`, `gemini`,
    /// `gemini-interactions`, `gemini-openapi` or `mcp`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai-chat",
            Provider::OpenAiResponses => "openai-responses",
            Provider::Anthropic => "anthropic",
            Provider::AnthropicStrict => "anthropic-strict",
            Provider::Bedrock => "bedrock",
            Provider::BedrockStrict => "bedrock-strict",
            Provider::Gemini => "gemini",
            Provider::GeminiInteractions => "gemini-interactions",
            Provider::GeminiOpenApi => "gemini-openapi",
            Provider::Mcp => "mcp",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Provider {
    type Err = UnknownProvider;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Provider::ALL
            .into_iter()
            .find(|provider| provider.name() == name)
            .ok_or_else(|| UnknownProvider {
                name: name.to_owned(),
            })
    }
}

/// A provider name that [`Provider`] does not know; the message lists the
/// ones it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider '{name}'; expected one of: {}", provider_names())]
pub struct UnknownProvider {
    /// The name that was given.
    pub name: String,
}

fn provider_names() -> String {
    Provider::ALL.map(Provider::name).join(", ")
}
