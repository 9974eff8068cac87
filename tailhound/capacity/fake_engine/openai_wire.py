"""What the fake engine reads and writes on the OpenAI API, as vLLM serves it: requests checked, bodies built.

Completions and chat completions, whole or streamed as Server-Sent Events chunks in OpenAI's format (ending
with ``data: [DONE]``, the usage chunk with ``stream_options.include_usage``), and OpenAI-shaped errors. A
prompt has one token per whitespace-separated word; the output is ``max_tokens`` words, one per chunk.
"""

from __future__ import annotations

import json

from aiohttp import web

DEFAULT_MODEL = "tailhound/fake-llm"
DEFAULT_MAX_TOKENS = 16
MAX_MODEL_LEN = 32768
WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on")


class Reject(Exception):
    """A request the server answers with an error (`status`, OpenAI's error `kind`)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def error_response(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def count_words(value: object) -> int:
    """Prompt tokens of a prompt or message content: whitespace-separated words (text parts of a list too)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        total = 0
        for part in value[:10_000]:
            if isinstance(part, str):
                total += len(part.split())
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                total += len(part["text"].split())
        return total
    return 0


def request_tokens(body: object, chat: bool, max_output_tokens: int, model: str) -> tuple[int, int]:
    """(prompt tokens, output tokens) of a request body, or :class:`Reject` with vLLM's status."""
    if not isinstance(body, dict):
        raise Reject(400, "the body must be a JSON object")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Reject(400, "messages: a non-empty list is required")
        prompt = sum(count_words(m.get("content")) for m in messages[:10_000] if isinstance(m, dict))
    else:
        if "prompt" not in body:
            raise Reject(400, "prompt is required")
        prompt = count_words(body["prompt"])
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise Reject(400, "max_tokens must be a positive integer")
    if max_tokens > max_output_tokens:
        raise Reject(400, f"max_tokens {max_tokens} is over this server's limit of {max_output_tokens}")
    if prompt + max_tokens > MAX_MODEL_LEN:
        raise Reject(400, f"prompt ({prompt} tokens) + max_tokens ({max_tokens}) exceeds {MAX_MODEL_LEN}")
    asked = body.get("model")
    if asked is not None and asked != model:
        raise Reject(404, f"The model `{asked}` does not exist.", "NotFoundError")
    return max(1, prompt), max_tokens


def word(i: int) -> str:
    """Output token `i`."""
    return f" {WORDS[i % len(WORDS)]}"


def usage_of(prompt: int, output: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}


def completion_json(rid: str, created: int, model: str, chat: bool, prompt: int, output: int) -> dict:
    """The whole (not streamed) answer."""
    text = "".join(word(i) for i in range(output))
    choice = (
        {
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": None,
            "finish_reason": "length",
        }
        if chat
        else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
    )
    return {
        "id": rid,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage_of(prompt, output),
    }


class StreamChunks:
    """The Server-Sent Events of one streamed answer."""

    def __init__(self, rid: str, created: int, model: str, chat: bool, include_usage: bool) -> None:
        self.rid, self.created, self.model, self.chat, self.include_usage = rid, created, model, chat, include_usage
        self.obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(self, choice: dict | None) -> bytes:
        data: dict = {
            "id": self.rid,
            "object": self.obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice] if choice is not None else [],
        }
        if self.include_usage:
            data["usage"] = None
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    def choice(self, text: str | None, finish: str | None, role: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def token(self, i: int) -> bytes:
        """Output token `i` (a chat answer's first chunk names the role before it)."""
        out = self.chunk(self.choice(None, None, role=True)) if self.chat and i == 0 else b""
        return out + self.chunk(self.choice(word(i), None))

    def tail(self, prompt: int, output: int) -> bytes:
        """The finish chunk, the usage chunk when asked for, and ``[DONE]``."""
        tail = self.chunk(self.choice(None, "length"))
        if self.include_usage:
            final = {
                "id": self.rid,
                "object": self.obj,
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_of(prompt, output),
            }
            tail += b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n"
        return tail + b"data: [DONE]\n\n"
