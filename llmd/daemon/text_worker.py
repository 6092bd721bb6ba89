"""The text thread: tokenizes new requests and turns engine steps into protocol messages.

Tokenizing, chat templates, incremental detokenization and stop-string matching are
CPU work the engine thread must never wait for; this thread owns every live request's
text state, so none of it needs a lock.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from llmd.daemon.engine_batch import EngineBatch, UpdateRecord
from llmd.daemon.engine_commands import AbortCommand, AddCommand, FinishCommand
from llmd.daemon.engine_loop import EngineLoop, label_text
from llmd.daemon.finished_message import (
    finished_message,
    log_finished,
    unstarted_abort_message,
)
from llmd.daemon.live_request import LiveRequest
from llmd.daemon.outbox import Outbox, Send, SendGroup
from llmd.daemon.prompt_echo import (
    echo_prompt,
    logprob_entry,
    prompt_logprob_entries,
    take_prompt_fields,
)
from llmd.daemon.prompt_limits import PromptLimits
from llmd.daemon.thread_names import name_os_thread
from llmd.daemon.tokenizer_requests import TokenizerRequest, answer_tokenizer_request
from llmd.engine.detokenizer import IncrementalDetokenizer
from llmd.engine.ended_request import EndedRequest
from llmd.engine.request import FinishReason
from llmd.engine.text_stream import TextStream, is_ended_on_token
from llmd.engine.tokenizer import Tokenizer
from llmd.errors import EngineDeadError, InvalidParameterError, LLMDError
from llmd.metrics import ServingMetrics
from llmd.outputs import RequestMetrics
from llmd.protocol import (
    Accepted,
    ErrorReply,
    GenerateRequest,
    PrefillProgress,
    RequestFailedError,
    TokenDelta,
    WireMessage,
    encode,
)
from llmd.sampling_params import SamplingParams
from llmd.tools.parser_choice import DEFAULT_PARSER

logger = logging.getLogger(__name__)

T = TypeVar("T")

NUM_PROGRESS_STEPS = 4
"""Prefill progress is reported at most at each quarter of a long prompt."""
NUM_TOKENIZER_THREADS = 2
"""Prompts are tokenized here, off the text thread: a long one never holds up the others."""


@dataclass(frozen=True)
class NewRequest:
    """A generate message the I/O thread accepted and assigned `engine_id`."""

    engine_id: str
    peer: bytes
    message: GenerateRequest
    arrival_time: float


@dataclass(frozen=True)
class Tokenized:
    """A tokenizer thread finished `job`: its prompt token ids, or the error it raised."""

    job: NewRequest
    params: SamplingParams
    future: Future[list[int]]


@dataclass(frozen=True)
class AbortJob:
    """Abort a request (client asked, client vanished, or the daemon is stopping)."""

    engine_id: str


TextJob = EngineBatch | NewRequest | Tokenized | AbortJob
"""Everything `TextWorker.submit` takes; the text thread dispatches on the class."""


class TextWorker:
    """Owns the text side of every live request, in one thread."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        limits: PromptLimits,
        engine_loop: EngineLoop,
        outbox: Outbox,
        metrics: ServingMetrics,
        instance_id: str | None = None,
        tool_call_parser: str = DEFAULT_PARSER,
    ):
        self.tokenizer = tokenizer
        self.tool_call_parser = tool_call_parser
        """The format tools are written in for a chat template that ignores them."""
        self.instance_id = instance_id
        self.engine_loop = engine_loop
        self.outbox = outbox
        self.metrics = metrics
        self._jobs: queue.SimpleQueue[TextJob | None] = queue.SimpleQueue()
        self._live: dict[str, LiveRequest] = {}
        self._step_sends: list[Send] | None = None
        """While an engine step's batch is handled, its replies, posted together at its end."""
        self._tokenizing: dict[str, NewRequest] = {}
        """Requests whose prompt is in the tokenizer pool, by engine id."""
        self.limits = limits
        self._pool = ThreadPoolExecutor(
            NUM_TOKENIZER_THREADS,
            thread_name_prefix="llmd-tokenize",
            initializer=name_os_thread,
            initargs=("llmd-tokenize",),
        )
        self._thread = threading.Thread(target=self._run, name="llmd-text", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def submit(self, job: TextJob) -> None:
        """Queue a NewRequest, AbortJob or EngineBatch (thread-safe)."""
        self._jobs.put(job)

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread after the jobs already queued."""
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def answer_tokenizer_request(self, peer: bytes, message: TokenizerRequest) -> None:
        """Answer a tokenize or detokenize in the tokenizer pool (called by the I/O thread)."""

        def answer() -> None:
            reply = answer_tokenizer_request(
                self.tokenizer, message, self.limits.max_model_len, self.tool_call_parser
            )
            self.outbox.post(Send(peer, encode(reply)))

        self._pool.submit(answer)

    @property
    def is_alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()

    # ---------------------------------------------------------------- loop

    def _run(self) -> None:
        name_os_thread("llmd-text")
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if isinstance(job, EngineBatch):
                    self._on_batch(job)
                elif isinstance(job, NewRequest):
                    self._on_new(job)
                elif isinstance(job, Tokenized):
                    self._on_tokenized(job)
                elif isinstance(job, AbortJob):
                    self._on_abort(job.engine_id)
            except Exception:  # never let one bad job end the thread
                logger.exception("text worker failed on %r", type(job).__name__)

    def _on_new(self, job: NewRequest) -> None:
        """Check the request cheaply, then queue it in the engine or the tokenizer pool."""
        message = job.message
        try:
            if self.engine_loop.dead_error is not None:
                raise EngineDeadError(f"the engine has died ({self.engine_loop.dead_error})")
            params = message.params()
            if message.prompt_token_ids is not None:
                prompt_token_ids = list(message.prompt_token_ids)
                self.limits.check_token_ids(prompt_token_ids)
                self._add(job, params, prompt_token_ids)
                return
            self.limits.check_text(message.prompt, message.messages, message.tools)
        except Exception as error:
            self._send_error(job.peer, message.id, error)
            return
        self._tokenizing[job.engine_id] = job
        future = self._pool.submit(self._tokenize, message)
        future.add_done_callback(lambda done: self.submit(Tokenized(job, params, done)))

    def _tokenize(self, message: GenerateRequest) -> list[int]:
        """Runs in a tokenizer thread (the HF tokenizer releases the GIL while it encodes)."""
        if message.prompt is not None:
            return self.tokenizer.encode(message.prompt)
        if message.messages is None:  # GenerateRequest.validate lets no such request through
            raise InvalidParameterError(
                "give exactly one of prompt, prompt_token_ids or messages", "prompt"
            )
        return self.tokenizer.apply_chat_template(
            message.messages, tools=message.tools, tool_call_parser=self.tool_call_parser
        )

    def _on_tokenized(self, done: Tokenized) -> None:
        job = self._tokenizing.pop(done.job.engine_id, None)
        if job is None:
            return  # aborted while it was being tokenized; its last message is sent
        try:
            if self.engine_loop.dead_error is not None:
                raise EngineDeadError(f"the engine has died ({self.engine_loop.dead_error})")
            self._add(job, done.params, done.future.result())
        except Exception as error:
            self._send_error(job.peer, job.message.id, error)

    def _add(self, job: NewRequest, params: SamplingParams, prompt_token_ids: list[int]) -> None:
        """Build the request's text state and queue it in the engine."""
        message = job.message
        detokenizer = IncrementalDetokenizer(
            self.tokenizer, prompt_token_ids, params.skip_special_tokens, params.stop
        )
        self._live[job.engine_id] = LiveRequest(
            job.engine_id,
            job.peer,
            message.id,
            message.stream,
            params,
            TextStream(detokenizer),
            message.label,
        )
        if message.echo:
            echo_prompt(self._live[job.engine_id], self.tokenizer, message.prompt, prompt_token_ids)
        self.engine_loop.submit(
            AddCommand(
                job.engine_id,
                prompt_token_ids,
                params,
                message.priority,
                job.arrival_time,
                message.label,
            )
        )

    def _on_abort(self, engine_id: str) -> None:
        job = self._tokenizing.pop(engine_id, None)
        if job is not None:  # not in the engine yet: end it here
            self._send_unstarted_abort(job)
            return
        live = self._live.get(engine_id)
        if live is not None and not live.is_ending:
            live.is_ending = True
            self.engine_loop.submit(AbortCommand(engine_id))

    def _on_batch(self, batch: EngineBatch) -> None:
        self._step_sends = []
        try:
            self._on_batch_items(batch)
        finally:
            sends, self._step_sends = self._step_sends, None
            if sends:
                self.outbox.post(SendGroup(tuple(sends)))

    def _on_batch_items(self, batch: EngineBatch) -> None:
        for engine_id, num_prompt_tokens in batch.added:
            live = self._live.get(engine_id)
            if live is not None:
                live.num_prompt_tokens = num_prompt_tokens
                accepted = Accepted(live.client_id, engine_id, num_prompt_tokens, self.instance_id)
                self._send(live, accepted)
        for engine_id, error in batch.rejected:
            live = self._live.pop(engine_id, None)
            if live is not None:
                self._send_error(live.peer, live.client_id, error)
        for update in batch.updates:
            self._guarded(update.request_id, self._on_update, update)
        for engine_id, num_computed, num_prompt in batch.progress:
            live = self._live.get(engine_id)
            if live is not None and live.should_report_progress(num_computed, NUM_PROGRESS_STEPS):
                self._send(live, PrefillProgress(live.client_id, num_computed, num_prompt))
        for request in batch.ended:
            self._guarded(request.request_id, self._on_ended, request)

    def _guarded(self, engine_id: str, handler: Callable[[T], None], argument: T) -> None:
        """Run a per-request handler; a failure ends that request only."""
        try:
            handler(argument)
        except Exception as error:
            live = self._live.pop(engine_id, None)
            label = None if live is None else live.label
            logger.exception("request %s%s failed in the text worker", engine_id, label_text(label))
            if live is not None:
                self.engine_loop.submit(AbortCommand(engine_id))
                self._send_error(live.peer, live.client_id, error)

    # ---------------------------------------------------------------- requests

    def _on_update(self, update: UpdateRecord) -> None:
        live = self._live.get(update.request_id)
        if live is None:
            return
        ended = update.request  # the final state, once is_finished
        if live.is_ending:  # a stop string matched or an abort is on its way
            if ended is not None:
                self._finish(live, ended)
            return
        # A final EOS or stop token id ends generation but is not part of the text.
        is_on_token = ended is not None and is_ended_on_token(
            ended.finish_reason, ended.stop_reason
        )
        step = live.text.advance(update.new_token_ids, update.is_finished, is_on_token)
        # A speculative step's run may go on past a stop string's token: that part is dropped.
        new_token_ids = update.new_token_ids[: step.num_tokens_kept]
        live.output_token_ids.extend(new_token_ids)
        text = step.text
        if update.prompt_logprobs is not None:
            live.prompt_logprobs = prompt_logprob_entries(update.prompt_logprobs, self.tokenizer)
        kept_logprobs = (update.new_logprobs or [])[: step.num_tokens_kept]
        new_logprobs = [logprob_entry(lp, self.tokenizer) for lp in kept_logprobs]
        if live.logprobs is not None:
            live.logprobs.extend(new_logprobs)
        if step.stop_string is not None and not update.is_finished:
            live.is_ending = True
            self.engine_loop.submit(
                FinishCommand(
                    live.engine_id,
                    FinishReason.STOP,
                    step.stop_string,
                    num_output_tokens=len(live.output_token_ids),
                )
            )
        if live.stream and (text or new_token_ids):
            logprobs = new_logprobs if live.logprobs is not None else None
            delta = TokenDelta(
                live.client_id, text, new_token_ids, logprobs, **take_prompt_fields(live)
            )
            self._send(live, delta)
        if ended is not None:
            self._finish(live, ended)

    def _on_ended(self, request: EndedRequest) -> None:
        live = self._live.get(request.request_id)
        if live is not None:
            self._finish(live, request)

    def _finish(self, live: LiveRequest, request: EndedRequest) -> None:
        """Send the request's last message, from its frozen final state."""
        del self._live[live.engine_id]
        reason, stop_reason = live.text.final_reasons(
            request.finish_reason.value if request.finish_reason else "abort", request.stop_reason
        )
        num_delivered = len(live.output_token_ids) if live.text.stop_string is not None else None
        metrics = RequestMetrics.from_ended(request, num_delivered)
        self.metrics.record_request(metrics, reason)
        log_finished(live, metrics, reason)
        if reason == FinishReason.ERROR.value:
            error = RequestFailedError(request.error_message or "the engine failed this request")
            self._send_error(live.peer, live.client_id, error)
            return
        finished = finished_message(live, request, metrics, reason, stop_reason)
        self._send(live, finished, is_last=True)

    def _send_unstarted_abort(self, job: NewRequest) -> None:
        """The last message of a request aborted before the engine ever saw it."""
        finished = unstarted_abort_message(job.message.id, job.message.stream)
        self.outbox.post(Send(job.peer, encode(finished), (job.peer, job.message.id)))

    # ---------------------------------------------------------------- output

    def _send(self, live: LiveRequest, message: WireMessage, is_last: bool = False) -> None:
        release = (live.peer, live.client_id) if is_last else None
        self._post(Send(live.peer, encode(message), release))

    def _post(self, send: Send) -> None:
        """Hand `send` to the I/O thread now, or with the rest of the step being handled."""
        if self._step_sends is not None:
            self._step_sends.append(send)
        else:
            self.outbox.post(send)

    def _send_error(self, peer: bytes, client_id: str, error: Exception) -> None:
        """The request's last message: a typed error."""
        if isinstance(error, LLMDError):
            reply = ErrorReply.from_error(client_id, error)
        else:
            logger.error("request %s failed: %r", client_id, error)
            reply = ErrorReply(client_id, "internal", f"{type(error).__name__}: {error}")
        self._post(Send(peer, encode(reply), (peer, client_id)))
