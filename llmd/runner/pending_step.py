"""A step launched on the device whose samples the host has not read yet.

Launching queues the forward pass, the sampler and a non-blocking copy of the sampled ids
into pinned host memory, then returns at once; `resolve` waits for that copy only (an
event, not a device-wide synchronize), so the host can prepare the next step meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from llmd.outputs import TokenLogprob
from llmd.runner.prompt_logprobs import PromptLogprobs
from llmd.runner.sampler import DeviceSample, SamplerOutput
from llmd.runner.sampling_batch import SamplingBatch


@dataclass
class RunnerOutput:
    """Sampled tokens of one step, keyed by request id, and where the time went.

    `prepare_s` is host work before launch; `forward_s` launch plus waiting for the device
    (the device's forward and sampling); `sample_s` reading the samples on the host.
    `device_busy_s` / `device_gap_s` (CUDA only, from events) are the device's time on
    this step and its idle time since the previous step's end.
    """

    sampled_token_ids: dict[str, int]
    logprobs: dict[str, TokenLogprob] = field(default_factory=dict)
    verified_token_ids: dict[str, list[int]] = field(default_factory=dict)
    """Per verify chunk (speculative decoding): the sample at each of its positions, the
    last being its entry in `sampled_token_ids`."""
    verified_logprobs: dict[str, list[TokenLogprob]] = field(default_factory=dict)
    """The logprobs of those samples, for verify chunks whose request asked for them."""
    prompt_logprobs: dict[str, tuple[int, list[TokenLogprob]]] = field(default_factory=dict)
    """Per request that asked: its first position this step and one entry per position."""
    prepare_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0
    device_busy_s: float | None = None
    device_gap_s: float | None = None
    num_experts_touched: int = 0
    """(MoE layer, expert) pairs the step's tokens were routed to; 0 for a dense model."""


@dataclass
class StepEvents:
    """CUDA events around a step's device work (timing enabled), to measure idle gaps."""

    started: torch.cuda.Event
    done: torch.cuda.Event
    previous_done: torch.cuda.Event | None


@dataclass(frozen=True, eq=False)
class PendingStep:
    """The samples of one launched step, on their way to the host (compared by identity).

    `device_sample` is held until the step resolves: the copy into `host_sample` reads it.
    """

    request_ids: list[str]
    batch: SamplingBatch
    device_sample: DeviceSample
    host_sample: DeviceSample
    prepare_s: float
    launch_s: float
    events: StepEvents | None
    prompt_logprobs: PromptLogprobs | None = None
    num_experts_touched: int | torch.Tensor = 0
    """An MoE step's touched (layer, expert) pairs: an int, or a host copy on its way."""
    draft_request_ids: list[str] = field(default_factory=list)
    """The request of each row after the sampled ones: a verify chunk's draft positions."""

    @classmethod
    def start(
        cls,
        request_ids: list[str],
        batch: SamplingBatch,
        sample: DeviceSample,
        prepare_s: float,
        launch_s: float,
        events: StepEvents | None,
        prompt_logprobs: PromptLogprobs | None = None,
        num_experts_touched: int | torch.Tensor = 0,
        draft_request_ids: list[str] | None = None,
    ) -> PendingStep:
        """Queue the copy of `sample` to pinned host memory and mark the step's end.

        Without `events` (CPU) the step has already run and its sample is on the host.
        """
        host_sample = sample
        if events is not None:
            host_sample = DeviceSample(
                _to_pinned_host(sample.token_ids),
                None if sample.packed_logprobs is None else _to_pinned_host(sample.packed_logprobs),
            )
            if prompt_logprobs is not None:
                prompt_logprobs.copy_to_host()
            if isinstance(num_experts_touched, torch.Tensor):
                num_experts_touched = _to_pinned_host(num_experts_touched)
            events.done.record()
        return cls(
            request_ids, batch, sample, host_sample, prepare_s, launch_s, events, prompt_logprobs,
            num_experts_touched,
            draft_request_ids or [],
        )  # fmt: skip

    def resolve(self) -> RunnerOutput:
        """Wait for this step's samples (and only them), then return them by request id."""
        waited_from = time.perf_counter()
        if self.events is not None:
            self.events.done.synchronize()
        read_from = time.perf_counter()
        result: SamplerOutput = self.host_sample.read(self.batch)
        read_until = time.perf_counter()
        logprobs = {
            request_id: entry
            for request_id, entry in zip(self.request_ids, result.logprobs)
            if entry is not None
        }
        output = RunnerOutput(
            sampled_token_ids=dict(zip(self.request_ids, result.token_ids)),
            logprobs=logprobs,
            prepare_s=self.prepare_s,
            forward_s=self.launch_s + (read_from - waited_from),
            sample_s=read_until - read_from,
            num_experts_touched=int(self.num_experts_touched),
        )
        if self.draft_request_ids:
            self._add_verified(output, result)
        if self.prompt_logprobs is not None:
            output.prompt_logprobs = self.prompt_logprobs.read()
        if self.events is not None:
            events = self.events
            output.device_busy_s = events.started.elapsed_time(events.done) / 1000
            if events.previous_done is not None:
                output.device_gap_s = events.previous_done.elapsed_time(events.started) / 1000
        return output

    def _add_verified(self, output: RunnerOutput, result: SamplerOutput) -> None:
        """Group the draft positions' samples (rows after the sampled ones) by request,
        each list ending with the request's sampled row (its last position)."""
        num_sampled = len(self.request_ids)
        verified = output.verified_token_ids
        verified_logprobs = output.verified_logprobs
        for request_id, token_id, logprob in zip(
            self.draft_request_ids,
            result.token_ids[num_sampled:],
            result.logprobs[num_sampled:],
        ):
            verified.setdefault(request_id, []).append(token_id)
            if logprob is not None:
                verified_logprobs.setdefault(request_id, []).append(logprob)
        for request_id, token_ids in verified.items():
            token_ids.append(output.sampled_token_ids[request_id])
            if request_id in verified_logprobs:
                verified_logprobs[request_id].append(output.logprobs[request_id])


def _to_pinned_host(tensor: torch.Tensor) -> torch.Tensor:
    """Queue a copy of a device tensor into fresh pinned host memory; returns the host tensor."""
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    return host
