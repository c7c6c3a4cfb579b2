//! The [`Tool`] trait and the [`ToolSpec`] that describes a tool to each provider.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::result::ToolResult;
use crate::schema;

/// A tool the model can call.
///
/// `execute` takes the model's raw JSON arguments (untrusted) and never panics
/// on bad input: it answers with a [`ToolResult`] whose `error` names the problem.
/// `cancel` is the host's signal that the call itself was abandoned.
#[async_trait]
pub trait Tool: Send + Sync {
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
pub struct ToolSpec {
    /// The name the model calls (`task`, `check_async_tasks`, `todo_pause`).
    pub name: String,
    /// A human-readable name (`Check Async Tasks`).
    pub display_name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// The canonical JSON Schema of the parameters.
    pub parameters: Value,
    /// Behaviour hints for clients (MCP annotations).
    pub annotations: ToolAnnotations,
}

/// Hints about a tool's behaviour, as MCP defines them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

impl ToolSpec {
    /// OpenAI Chat Completions: `{"type":"function","function":{name, description,
    /// parameters, strict: true}}`. The parameters are lowered to OpenAI's strict
    /// rules (every property required, optional ones nullable,
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
    /// [`to_openai_chat`](Self::to_openai_chat).
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

    /// Gemini function declaration with `parametersJsonSchema` (the canonical JSON
    /// Schema).
    #[must_use]
    pub fn to_gemini(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "parametersJsonSchema": self.parameters,
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

    /// The definition for `provider`, or `None` for an unknown provider name.
    /// Names: `openai-chat`, `openai-responses`, `anthropic`, `gemini`,
    /// `gemini-openapi`, `mcp` (see [`PROVIDERS`](crate::PROVIDERS)).
    #[must_use]
    pub fn for_provider(&self, provider: &str) -> Option<Value> {
        Some(match provider {
            "openai-chat" => self.to_openai_chat(),
            "openai-responses" => self.to_openai_responses(),
            "anthropic" => self.to_anthropic(),
            "gemini" => self.to_gemini(),
            "gemini-openapi" => self.to_gemini_openapi(),
            "mcp" => self.to_mcp(),
            _ => return None,
        })
    }
}

/// Every provider name [`ToolSpec::for_provider`] knows, in documentation order.
pub const PROVIDERS: &[&str] = &[
    "openai-chat",
    "openai-responses",
    "anthropic",
    "gemini",
    "gemini-openapi",
    "mcp",
];
