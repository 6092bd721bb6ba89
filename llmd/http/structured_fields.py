"""The request fields that constrain the output, mapped to one `StructuredOutputs`.

Clients say "JSON only" in several dialects: OpenAI's `response_format`, vLLM's
`structured_outputs` object and its older `guided_*` fields. Each maps to the same
constraint here, each error names the field the client sent, and the grammar is checked
(off the event loop) before the request is accepted, so a bad schema is a 400, never a
failed or silently unconstrained answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmd.errors import InvalidParameterError
from llmd.http.errors import HttpError, bad_request
from llmd.structured.grammar_source import check_grammar
from llmd.structured_outputs import KINDS, StructuredOutputs

if TYPE_CHECKING:
    from llmd.http.request_models import SamplingFields

GUIDED_FIELDS = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}
"""vLLM's older request fields and the constraint kind each one sets."""
SCHEMA_FIELD = "response_format.json_schema.schema"
"""Where OpenAI's json_schema format carries its schema: the field its errors name."""


class JsonSchemaFormat(BaseModel):
    """`response_format.json_schema`: a named schema; `strict` is accepted (always enforced)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    """The JSON schema itself (`schema` on the wire; pydantic models own that name)."""
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's `response_format`: free text, any JSON object, or a JSON schema."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


@dataclass(frozen=True)
class RequestedOutputs:
    """The constraint a request asked for and the request field it came from."""

    spec: StructuredOutputs
    field: str
    """The field as the client sent it (`guided_regex`, `response_format.json_schema.schema`,
    `structured_outputs.regex`, ...): what a 400 about the constraint names."""


def requested_outputs(body: SamplingFields) -> RequestedOutputs | None:
    """The body's one output constraint (None for free text), or a 400 naming the field.

    Only the constraint's own rules are checked here; `checked_outputs` adds the grammar's.
    """
    given = _given_constraints(body)
    if not given:
        return None
    if len(given) > 1:
        fields = [field for field, _ in given]
        raise bad_request(f"give at most one output constraint, got {', '.join(fields)}", fields[1])
    ((field, data),) = given
    try:
        spec = StructuredOutputs.from_dict(data)
    except InvalidParameterError as error:
        raise _named(error, field) from None
    return RequestedOutputs(spec, _field_of(field, spec.kind))


async def checked_outputs(body: SamplingFields) -> dict[str, Any] | None:
    """The constraint's wire form once its grammar is known to build; a 400 otherwise.

    The check may take a while for a large schema, so it runs on a worker thread and the
    event loop keeps serving everyone else meanwhile.
    """
    requested = requested_outputs(body)
    if requested is None:
        return None
    try:
        await asyncio.to_thread(check_grammar, requested.spec)
    except InvalidParameterError as error:
        raise bad_request(f"{requested.field}: {error.message}", requested.field) from None
    return requested.spec.to_dict()


def _given_constraints(body: SamplingFields) -> list[tuple[str, dict[str, Any]]]:
    """(request field, StructuredOutputs map) of every constraint the body sets."""
    given: list[tuple[str, dict[str, Any]]] = []
    response_format = body.response_format
    if response_format is not None and response_format.type == "json_object":
        given.append(("response_format", {"json_object": True}))
    elif response_format is not None and response_format.type == "json_schema":
        if response_format.json_schema is None:
            raise bad_request(
                "response_format.json_schema: required when type is json_schema",
                "response_format.json_schema",
            )
        given.append(("response_format", {"json": response_format.json_schema.json_schema}))
    if body.structured_outputs is not None:
        data = body.structured_outputs
        kinds = [kind for kind in KINDS if data.get(kind) not in (None, False)]
        if len(kinds) > 1:
            raise bad_request(
                f"structured_outputs: give exactly one of {', '.join(KINDS)}, "
                f"got {', '.join(kinds)}",
                "structured_outputs",
            )
        given.append(("structured_outputs", data))
    for field, kind in GUIDED_FIELDS.items():
        value = getattr(body, field)
        if value is not None:
            given.append((field, {kind: value}))
    return given


def _field_of(field: str, kind: str) -> str:
    """The request field a constraint of `kind` given as `field` is named by."""
    if field == "response_format":
        return SCHEMA_FIELD if kind == "json" else "response_format"
    if field == "structured_outputs":
        return f"structured_outputs.{kind}"
    return field


def _named(error: InvalidParameterError, field: str) -> HttpError:
    """A StructuredOutputs error as a 400 naming the request field the client sent."""
    if field == "structured_outputs":
        name = error.parameter or field  # its errors already name structured_outputs.<kind>
    elif field == "response_format":
        name = SCHEMA_FIELD
    else:
        name = field
    return bad_request(f"{name}: {error.message}", name)
