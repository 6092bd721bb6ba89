"""A chat request's tool fields as a `ToolPlan`, and the constraint it adds to the sampling.

The plan's checks raise typed errors naming the request's field; here they become 400s.
A forced call (`required`, a named tool) is a JSON-schema constraint on the reply, so it
cannot be combined with another output constraint.
"""

from __future__ import annotations

from llmd.errors import InvalidParameterError
from llmd.http.errors import bad_request
from llmd.http.request_models import ChatCompletionRequest
from llmd.sampling_params import SamplingParams
from llmd.tools.tool_plan import ToolPlan


def tool_plan(body: ChatCompletionRequest, parser_name: str) -> ToolPlan | None:
    """The request's plan (None without tools or with tool_choice none); bad fields are 400s."""
    try:
        return ToolPlan.from_request(
            body.tools, body.tool_choice, body.parallel_tool_calls, parser_name
        )
    except InvalidParameterError as error:
        raise bad_request(f"{error.parameter}: {error.message}", error.parameter) from None


def with_tool_constraint(params: dict[str, object], plan: ToolPlan | None) -> dict[str, object]:
    """`params` with the forced call's constraint, when the plan forces one."""
    constraint = None if plan is None else plan.structured_outputs()
    if constraint is None:
        return params
    if params.get("structured_outputs") is not None:
        raise bad_request(
            "a forced tool call (required or a named function) cannot be combined with "
            "another output constraint",
            "tool_choice",
        )
    constrained = {**params, "structured_outputs": constraint}
    try:
        SamplingParams.from_dict(constrained)
    except InvalidParameterError as error:
        raise bad_request(f"tool_choice: {error}", "tool_choice") from None
    return constrained
