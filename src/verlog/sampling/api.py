"""A client of any OpenAI-compatible chat server (vLLM, SGLang, llama.cpp, a hosted API), for evaluation.

Built on the ``openai`` package (the reference client of that protocol: base URL, key, timeouts), with its own
retry loop instead of the package's: every failure, a refused connection as much as a reply that is not a chat
completion, is retried the same way (exponential backoff), and the one that keeps failing ends in one
:class:`ApiError` line that says what to do. Requests of one batch run concurrently, in threads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["ApiError", "ApiSettings", "ChatClient"]

#: HTTP statuses worth another try (timeouts, rate limits, server errors); other 4xx are the caller's fault.
RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}


class ApiError(RuntimeError):
    """A chat request that kept failing (or cannot succeed); the message says what to do."""


@dataclass(frozen=True)
class ApiSettings:
    """Where the chat server is and how hard to try."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8
    retries: int = 4
    timeout: float = 120.0
    backoff: float = 1.0  # seconds before the first retry, doubled each time


class ChatClient:
    """``complete(chats)``: one answer text per chat, requests in parallel, each retried with backoff."""

    def __init__(self, settings: ApiSettings) -> None:
        try:
            from openai import OpenAI
        except ImportError as error:
            raise ApiError(f'the openai package is missing ({error}); pip install -e ".[api]"') from error
        self.settings = settings
        key = os.environ.get(settings.api_key_env) or "EMPTY"  # a local server takes any key
        self.client = OpenAI(base_url=settings.base_url, api_key=key, timeout=settings.timeout, max_retries=0)
        self.failed_attempts = 0  # attempts that failed but were retried successfully or not

    def complete(
        self,
        chats: Sequence[list[dict[str, str]]],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        """The answer to each chat (greedy at temperature 0); raises :class:`ApiError` if one keeps failing."""
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
        if seed is not None:
            params["seed"] = seed
        workers = max(1, min(self.settings.concurrency, len(chats)))
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda chat: self._one(chat, params), chats))

    def _one(self, chat: list[dict[str, str]], params: dict[str, Any]) -> str:
        import openai

        s = self.settings
        problem = ""
        for attempt in range(s.retries + 1):
            if attempt:
                time.sleep(s.backoff * 2 ** (attempt - 1))
            try:
                reply = self.client.chat.completions.create(model=s.model, messages=chat, **params)
            except openai.APIStatusError as error:
                if error.status_code in (401, 403):
                    raise ApiError(
                        f"{s.base_url} refused the key (HTTP {error.status_code}): put it in ${s.api_key_env}"
                    ) from error
                if error.status_code == 404:
                    raise ApiError(
                        f"{s.base_url} does not serve model {s.model!r} (HTTP 404): check the model name "
                        "(GET /v1/models lists them) and the base URL (it ends in /v1)"
                    ) from error
                if error.status_code not in RETRY_STATUSES:
                    raise ApiError(f"{s.base_url} rejected the request: {_short(error)}") from error
                problem = f"HTTP {error.status_code}"
            except (openai.APIConnectionError, openai.APITimeoutError) as error:
                problem = f"no answer ({type(error).__name__})"
            except (openai.APIError, ValueError) as error:  # a body that is not a chat completion
                problem = f"answered garbage ({_short(error)})"
            else:
                text = _text(reply)
                if text is not None:
                    return text
                problem = "answered garbage (no choices[0].message.content)"
            self.failed_attempts += 1
        raise ApiError(
            f"{s.base_url}: {problem} after {s.retries + 1} tries; check that the server is up and answers "
            "chat completions, then run the same command again (finished episodes are kept)"
        )


def _text(reply: Any) -> str | None:
    try:
        content = reply.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _short(error: Exception) -> str:
    return " ".join(str(error).split())[:200]
