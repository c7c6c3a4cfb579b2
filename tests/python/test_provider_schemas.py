"""The generated tool definitions against the providers' own SDKs.

Every file under docs/schemas/<provider>/ is what `asynctask schemas --provider
<provider>` prints, and each is accepted by the typed model (or service shape) that
the provider's SDK declares for a tool definition: openai (Chat Completions and
Responses), mistralai (which takes the Chat Completions shape), anthropic, botocore
(Bedrock's Converse `toolConfig`), google-genai (`FunctionDeclaration` and its
OpenAPI `Schema`, and the Interactions API's `Function`) and the MCP SDK. Where an
SDK has its own rewriting for a strict mode, the generated schema is already what
that rewriting produces. The node-by-node rules of each provider are checked over
every tool by the Rust tests (crates/asynctask-tools/tests/it/schemas.rs).
"""

from __future__ import annotations

import json
import subprocess
import typing
from pathlib import Path
from typing import Any, Optional

import botocore.session
import pytest
from anthropic.lib._parse._transform import transform_schema
from anthropic.types import ToolParam
from botocore.validate import validate_parameters
from google.genai import interactions, types
from mcp_types import Tool as McpTool
from mistralai.client.models import Tool as MistralTool
from openai import pydantic_function_tool
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam
from openai.types.shared_params import FunctionDefinition
from pydantic import BaseModel, Field, TypeAdapter

from helpers import REPO, binary

SCHEMAS = REPO / "docs" / "schemas"
PROVIDERS = [
    "openai-chat",
    "openai-responses",
    "anthropic",
    "anthropic-strict",
    "bedrock",
    "bedrock-strict",
    "gemini",
    "gemini-interactions",
    "gemini-openapi",
    "mcp",
]
HOST_TOOLS = ["task", "check_async_tasks", "message_async_task", "answer_async_task", "todo_pause"]
MCP_TOOLS = ["task", "check_async_tasks", "message_async_task", "answer_async_task", "wait_async_tasks", "end_async_task"]


def definitions(provider: str) -> list[dict[str, Any]]:
    """The committed files of `provider`, in the order `asynctask schemas` prints them."""
    tools = MCP_TOOLS if provider == "mcp" else HOST_TOOLS
    return [json.loads((SCHEMAS / provider / f"{tool}.json").read_text()) for tool in tools]


def typed_dict_keys(kind: type) -> set[str]:
    """The keys a TypedDict declares, its bases' included."""
    return set(typing.get_type_hints(kind))


def model_keys(model: type[BaseModel]) -> set[str]:
    """The JSON keys a pydantic model declares (aliases where it has them)."""
    return {field.alias or name for name, field in model.model_fields.items()}


def assert_known_keys(value: dict[str, Any], known: set[str], where: str) -> None:
    """Extra keys pass some SDK validators silently; the API would refuse them."""
    unknown = set(value) - known
    assert not unknown, f"{where}: keys the SDK does not declare: {sorted(unknown)}"


def test_every_provider_is_committed_and_printed() -> None:
    assert sorted(path.name for path in SCHEMAS.iterdir()) == sorted(PROVIDERS)
    for provider in PROVIDERS:
        # The mcp directory also holds todo_pause, for hosts that serve it from an
        # MCP server of their own; `asynctask mcp` does not.
        tools = set(MCP_TOOLS) | {"todo_pause"} if provider == "mcp" else set(HOST_TOOLS)
        assert {path.stem for path in (SCHEMAS / provider).glob("*.json")} == tools, provider
        printed = subprocess.run(
            [str(binary()), "schemas", "--provider", provider],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert json.loads(printed.stdout) == definitions(provider), provider


def test_openai_chat_is_a_chat_completions_function_tool() -> None:
    adapter = TypeAdapter(ChatCompletionFunctionToolParam)
    for tool in definitions("openai-chat"):
        adapter.validate_python(tool, strict=True)
        assert_known_keys(tool, typed_dict_keys(ChatCompletionFunctionToolParam), tool["function"]["name"])
        assert_known_keys(tool["function"], typed_dict_keys(FunctionDefinition), tool["function"]["name"])
        # Mistral's chat API takes the same shape, `strict` included.
        mistral = MistralTool.model_validate(tool)
        assert mistral.function.strict is True
        assert_known_keys(tool["function"], model_keys(type(mistral.function)), tool["function"]["name"])


def test_openai_responses_is_a_responses_function_tool() -> None:
    adapter = TypeAdapter(FunctionToolParam)
    for tool in definitions("openai-responses"):
        adapter.validate_python(tool, strict=True)
        assert_known_keys(tool, typed_dict_keys(FunctionToolParam), tool["name"])
        # `strict` is written out: left out, the API tries strict mode and falls back.
        assert tool["strict"] is True


class _Item(BaseModel):
    name: str


class _Optional(BaseModel):
    items: Optional[list[str]] = Field(default=None, description="d")
    objects: Optional[list[_Item]] = None
    count: Optional[int] = None


def _shape(node: Any) -> Any:
    """A schema without the words (`description`, `title`) and with `$ref`s inlined."""
    if isinstance(node, dict):
        return {key: _shape(value) for key, value in node.items() if key not in ("description", "title")}
    if isinstance(node, list):
        return [_shape(value) for value in node]
    return node


def test_openai_nullable_arrays_are_written_as_the_openai_sdk_writes_them() -> None:
    """OpenAI strict mode refuses `type: ["array", "null"]` with `items`; the SDK's
    own strict schema for an optional list is `anyOf` with a null branch."""
    sdk = pydantic_function_tool(_Optional)["function"]["parameters"]["properties"]
    assert _shape(sdk["items"]) == {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}]}
    for provider in ("openai-chat", "openai-responses"):
        task = definitions(provider)[0]
        parameters = task["function"]["parameters"] if provider == "openai-chat" else task["parameters"]
        properties = parameters["properties"]
        for name in ("behaviour_prompts", "tool_whitelist"):
            assert _shape(properties[name]) == _shape(sdk["items"]), (provider, name)
        for name in ("output_spec", "context"):
            branches = properties[name]["anyOf"]
            assert [branch["type"] for branch in branches] == ["array", "null"], (provider, name)
            assert branches[0]["items"]["type"] == "object", (provider, name)
        # Scalars keep their type array (the SDK's `anyOf` form is equivalent).
        assert properties["timeout_seconds"]["type"] == ["integer", "null"], provider


def test_anthropic_is_a_tool_param() -> None:
    adapter = TypeAdapter(ToolParam)
    for provider in ("anthropic", "anthropic-strict"):
        for tool in definitions(provider):
            adapter.validate_python(tool)
            assert_known_keys(tool, typed_dict_keys(ToolParam), f"{provider}/{tool['name']}")
            assert tool["input_schema"]["type"] == "object"


def test_anthropic_strict_is_already_what_the_sdk_makes_strict() -> None:
    """The Anthropic SDK rewrites a schema for strict mode (unsupported keywords into
    the description); the strict files are a fixed point of that rewriting."""
    for tool in definitions("anthropic-strict"):
        assert tool["strict"] is True
        assert transform_schema(tool["input_schema"]) == tool["input_schema"], tool["name"]
    # And it does rewrite the plain files, which carry bounds strict mode refuses.
    plain = {tool["name"]: tool["input_schema"] for tool in definitions("anthropic")}
    assert transform_schema(plain["todo_pause"]) != plain["todo_pause"]


def converse_request(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "modelId": "anthropic.claude-sonnet-4-5",
        "messages": [{"role": "user", "content": [{"text": "hello"}]}],
        "toolConfig": {"tools": tools},
    }


def test_bedrock_is_a_converse_tool() -> None:
    converse = botocore.session.get_session().get_service_model("bedrock-runtime").operation_model("Converse")
    spec_shape = converse.input_shape.members["toolConfig"].members["tools"].member.members["toolSpec"]
    for provider in ("bedrock", "bedrock-strict"):
        tools = definitions(provider)
        validate_parameters(converse_request(tools), converse.input_shape)
        for tool in tools:
            assert_known_keys(tool["toolSpec"], set(spec_shape.members), f"{provider}/{tool['toolSpec']['name']}")
            assert tool["toolSpec"]["inputSchema"]["json"]["type"] == "object"
    # The strict schemas are the Anthropic strict ones (Bedrock's strict mode has
    # Anthropic's limits).
    anthropic = {tool["name"]: tool["input_schema"] for tool in definitions("anthropic-strict")}
    for tool in definitions("bedrock-strict"):
        assert tool["toolSpec"]["strict"] is True
        assert tool["toolSpec"]["inputSchema"]["json"] == anthropic[tool["toolSpec"]["name"]]
    # The validator itself refuses a broken tool.
    broken = definitions("bedrock")[0]["toolSpec"] | {"inputSchema": {"schema": {}}}
    with pytest.raises(Exception, match="inputSchema"):
        validate_parameters(converse_request([{"toolSpec": broken}]), converse.input_shape)


def test_gemini_declarations_are_function_declarations() -> None:
    for provider in ("gemini", "gemini-openapi"):
        declarations = [types.FunctionDeclaration.model_validate(tool) for tool in definitions(provider)]
        types.Tool(function_declarations=declarations)
    # `parameters` is the typed OpenAPI `Schema`, which forbids unknown keys.
    for tool in definitions("gemini-openapi"):
        assert types.FunctionDeclaration.model_validate(tool).parameters is not None
    with pytest.raises(Exception, match="Extra inputs"):
        types.Schema.model_validate({"type": "OBJECT", "unknownKeyword": False})


def test_gemini_interactions_are_function_tools() -> None:
    for tool in definitions("gemini-interactions"):
        function = interactions.Function.model_validate(tool)
        assert function.type == "function"
        assert_known_keys(tool, model_keys(interactions.Function), tool["name"])
        # The same schema as the `parametersJsonSchema` declaration.
        assert tool["parameters"] == json.loads((SCHEMAS / "gemini" / f"{tool['name']}.json").read_text())[
            "parametersJsonSchema"
        ]


def test_mcp_is_an_mcp_tool() -> None:
    for tool in definitions("mcp"):
        McpTool.model_validate(tool)
        assert_known_keys(tool, model_keys(McpTool) - {"execution"}, tool["name"])


def _walk(node: Any) -> Any:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_mcp_schemas_survive_forwarding_to_openai_strict_and_gemini() -> None:
    """Clients forward MCP tools unchanged: no `default`, no `format`, and nullable
    arrays as `anyOf` (what OpenAI strict mode and Gemini's `parameters` accept)."""
    for tool in definitions("mcp"):
        for node in _walk(tool["inputSchema"]):
            assert "default" not in node, (tool["name"], node)
            assert "format" not in node, (tool["name"], node)
            kinds = node.get("type")
            if isinstance(kinds, list):
                assert not {"array", "object"} & set(kinds), (tool["name"], node)


def test_the_checks_are_not_vacuous(tmp_path: Path) -> None:
    """Each SDK check above refuses a definition it should refuse."""
    with pytest.raises(Exception):
        TypeAdapter(ChatCompletionFunctionToolParam).validate_python({"type": "function"}, strict=True)
    with pytest.raises(Exception):
        TypeAdapter(ToolParam).validate_python({"name": "x"})
    with pytest.raises(Exception):
        types.FunctionDeclaration.model_validate({"name": "x", "parametersJsonSchemaa": {}})
    with pytest.raises(Exception):
        interactions.Function.model_validate({"type": "not-a-function"})
    with pytest.raises(AssertionError):
        assert_known_keys({"name": "x", "input_schemaa": {}}, typed_dict_keys(ToolParam), "x")
