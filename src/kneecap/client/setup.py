"""One client setup for `kneecap bench` and `kneecap run`: what to send a live server, decided once.

Owns: the ClientConfig (timeouts, keep-alive, ignore_eos), the checks before the first level (the
server speaks the OpenAI API, serves the model asked for, accepts the key), the prompt decision
(token ids inside a vocabulary the server states, else text calibrated by a local tokenizer.json or
the server's own /tokenize, else what the check request shows the server accepts), the one check
request that proves the prompts are accepted, and the keep-alive decision (client/keepalive.py).
Each failure is one KneecapError naming the fix. Does not run levels (bench/, loadplan/).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace

from kneecap.client import openai as oa
from kneecap.client.driver import ClientConfig, request_headers, run_sync
from kneecap.client.prompts import (
    LocalTokenizer,
    RandomTextPrompts,
    RandomTokenPrompts,
    ServerTokenizer,
    token_id_range,
)
from kneecap.client.server_info import LLAMACPP, SGLANG, VLLM, ServerInfo
from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec
from kneecap.workload.endpoints import COMPLETIONS, endpoint_path

STALL_TIMEOUT_S = 120.0  # longest silence inside one response before it counts as a stall
CHECK_TIMEOUT_S = 120.0  # the check request (a cold server may be slow to answer its first one)
CHECK_INPUT_TOKENS = 64  # the check request's prompt length (capped by the run's own input length)
SALT_BYTES = 4  # a run's prompt salt: 8 hex characters
CHECK_USER = "kneecap prompt check"  # the check request's OpenAI `user` field: servers' logs can tell it apart

# the ways of building prompts, in the order they are tried
TOKEN_IDS = "token_ids"  # random ids inside the vocabulary the server (or --tokenizer) states
SERVER_TOKEN_IDS = "token_ids_server_tokenize"  # random ids among those the server's /tokenize gives common words
LOCAL_TOKENIZER = "text_local_tokenizer"  # text calibrated with --tokenizer PATH/tokenizer.json
SERVER_TOKENIZE = "text_server_tokenize"  # text calibrated with the server's POST /tokenize
DEFAULT_TOKEN_IDS = "token_ids_default_range"  # ids in [1000, 30000): any large vocabulary (vocab unknown)
UNCALIBRATED_TEXT = "text_uncalibrated"  # words, length unknown until usage.prompt_tokens says
DATASET = "dataset"


def new_salt() -> str:
    """A fresh prompt salt for one run (random; recorded in the manifest, kept by --resume)."""
    return os.urandom(SALT_BYTES).hex()


# Engines that put a running usage count in every streamed chunk when asked
# (stream_options.continuous_usage_stats: vLLM's and SGLang's OpenAI protocol). A chunk's tokens are then
# the increase of usage.completion_tokens, exact when a chunk carries several (vLLM --stream-interval,
# speculative decoding); other servers get only include_usage (OpenAI itself rejects unknown options),
# and so does kneecap serve (it looks like vLLM but sends one token per chunk).
PER_CHUNK_USAGE_ENGINES = (VLLM, SGLANG)


def client_config(
    base_url: str,
    *,
    model: str,
    endpoint: str,
    api_key: str | None,
    timeout_s: float,
    keepalive: bool = True,
    ignore_eos: bool = True,
    keep_prompts: bool = False,
    continuous_usage_stats: bool = False,
) -> ClientConfig:
    """The driver's config, the same for bench and run (stall timeout capped by the request timeout)."""
    return ClientConfig(
        base_url=base_url,
        model=model,
        endpoint=endpoint,
        api_key=api_key,
        timeout_s=timeout_s,
        stall_timeout_s=min(STALL_TIMEOUT_S, timeout_s),
        keepalive=keepalive,
        ignore_eos=ignore_eos,
        keep_prompts=keep_prompts,
        continuous_usage_stats=continuous_usage_stats,
    )


# -- the server and the model --------------------------------------------------------------------
def check_server(info: ServerInfo, model: str | None, *, url: str) -> str:
    """The model to request, after checking /v1/models: the key is accepted, the server speaks the
    OpenAI API (or at least does not say it does not), and it serves `model`."""
    status = info.models_status
    if status in (401, 403):
        raise auth_error(url, status)
    if model is None:
        if info.model_id:
            return info.model_id
        if not info.models_json:
            raise not_openai_error(url, f"GET /v1/models answered {_said(status)}")
        raise KneecapError(f"the server at {url} lists no model in GET /v1/models", "pass --model NAME")
    if info.model_ids and model not in info.model_ids:
        served = ", ".join(info.model_ids[:10]) + (" ..." if len(info.model_ids) > 10 else "")
        raise KneecapError(
            f"the server at {url} does not serve model {model!r}; it serves: {served}",
            f"pass --model {info.model_ids[0]} (or another name it lists)",
        )
    return model


def auth_error(url: str, status: int) -> KneecapError:
    return KneecapError(
        f"the server at {url} refused the API key (HTTP {status})",
        "set the key the server expects in KNEECAP_API_KEY or OPENAI_API_KEY, "
        "or name it with --api-key-env / --api-key-file",
    )


def not_openai_error(url: str, what: str) -> KneecapError:
    return KneecapError(
        f"the server at {url} is not an OpenAI-compatible server ({what})",
        "point --base-url at the server's root, e.g. http://127.0.0.1:8000 for vLLM, SGLang or "
        "llama.cpp (kneecap calls /v1/models and /v1/completions or /v1/chat/completions there)",
    )


def _said(status: int | None) -> str:
    return "nothing" if status is None else f"HTTP {status}" + ("" if status != 200 else " without a model list")


# -- prompts -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptChoice:
    """How prompts are built for a run: `make(seed)` gives the PromptSource (picklable, for workers)."""

    way: str
    detail: str
    exact: bool  # do records' expected_input_tokens hold the exact count the server will see?
    low: int = 0
    high: int = 0
    counter: object | None = None  # a TokenCounter for the text ways
    overhead_tokens: int = 0  # tokens the server adds around the text (chat template), from the check request
    salt: str = ""
    dataset_texts: tuple[str, ...] = field(default=(), repr=False)
    check_requests: int = 0  # check requests sent to settle this way (they reach the server before any level)

    pool: tuple[int, ...] = field(default=(), repr=False)  # SERVER_TOKEN_IDS: the ids to draw from
    dataset_in_order: bool = False  # DATASET: request i takes text i (a sample whose lengths the specs carry)

    def make(self, seed: int):
        if self.way in (TOKEN_IDS, DEFAULT_TOKEN_IDS):
            return RandomTokenPrompts(seed=seed, low=self.low, high=self.high, salt=self.salt)
        if self.way == SERVER_TOKEN_IDS:
            return RandomTokenPrompts(seed=seed, salt=self.salt, pool=self.pool)
        if self.way == DATASET:
            from kneecap.client.datasets import DatasetPrompts

            return DatasetPrompts(texts=self.dataset_texts, seed=seed, in_order=self.dataset_in_order)
        return RandomTextPrompts(counter=self.counter, seed=seed, salt=self.salt, overhead_tokens=self.overhead_tokens)

    def to_dict(self) -> dict:
        out = {
            "way": self.way,
            "detail": self.detail,
            "exact_input_tokens": self.exact,
            "salt": self.salt,
            "check_requests": self.check_requests,
        }
        if self.way in (TOKEN_IDS, DEFAULT_TOKEN_IDS):
            out["token_id_range"] = [self.low, self.high]
        if self.pool:
            out["distinct_token_ids"] = len(self.pool)
        if self.overhead_tokens:
            out["template_overhead_tokens"] = self.overhead_tokens
        return out


def prompt_candidates(
    info: ServerInfo,
    *,
    endpoint: str,
    model: str,
    api_key: str | None,
    salt: str,
    tokenizer: str | None = None,
    dataset_texts: tuple[str, ...] | None = None,
    dataset_in_order: bool = False,
) -> list[PromptChoice]:
    """The ways to build prompts for this server, best first (the check request picks the first accepted)."""
    if dataset_texts is not None:
        return [
            PromptChoice(
                DATASET,
                "prompts of the dataset file",
                exact=False,
                salt=salt,
                dataset_texts=dataset_texts,
                dataset_in_order=dataset_in_order,
            )
        ]
    out: list[PromptChoice] = []
    completions = endpoint == COMPLETIONS
    if tokenizer is not None:
        local = LocalTokenizer(tokenizer)
        out.append(
            PromptChoice(
                LOCAL_TOKENIZER, f"text calibrated with {tokenizer}", exact=completions, counter=local, salt=salt
            )
        )
    if completions and info.vocab_size:
        low, high = token_id_range(info.vocab_size)
        out.append(
            PromptChoice(
                TOKEN_IDS,
                f"token ids in [{low}, {high}) of the {info.vocab_size}-token vocabulary the server states",
                exact=True,
                low=low,
                high=high,
                salt=salt,
            )
        )
    if completions and info.engine in (VLLM, SGLANG, LLAMACPP, None):
        out.append(
            PromptChoice(
                SERVER_TOKEN_IDS,
                "token ids the server's /tokenize gives common words",
                exact=True,
                counter=ServerTokenizer(info.base_url, model=model, api_key=api_key, engine=info.engine),
                salt=salt,
            )
        )
    if info.engine in (VLLM, SGLANG, LLAMACPP, None):
        chat_counted = not completions and info.engine == VLLM  # vLLM's /tokenize applies the chat template
        counter = ServerTokenizer(info.base_url, model=model, api_key=api_key, engine=info.engine, chat=chat_counted)
        out.append(
            PromptChoice(
                SERVER_TOKENIZE,
                "text calibrated with the server's /tokenize" + (" (chat template applied)" if chat_counted else ""),
                exact=completions or chat_counted,
                counter=counter,
                salt=salt,
            )
        )
    if completions:
        low, high = RandomTokenPrompts().low, RandomTokenPrompts().high
        out.append(
            PromptChoice(
                DEFAULT_TOKEN_IDS,
                f"token ids in [{low}, {high}) (the server states no vocabulary)",
                exact=True,
                low=low,
                high=high,
                salt=salt,
            )
        )
    out.append(
        PromptChoice(
            UNCALIBRATED_TEXT, "random words; input lengths as the server counts them (usage)", exact=False, salt=salt
        )
    )
    return out


def server_token_pool(counter: ServerTokenizer) -> tuple[int, ...]:
    """The distinct ids the server's /tokenize gives kneecap's common words (one request)."""
    from kneecap.client.prompts import WORDS

    ids = tuple(sorted(set(counter.token_ids(" " + " ".join(WORDS)))))
    if len(ids) < 8:
        raise KneecapError(
            f"the server's /tokenize gave only {len(ids)} distinct ids for common words",
            "pass --tokenizer PATH/tokenizer.json",
        )
    return ids


@dataclass(frozen=True)
class CheckAnswer:
    status: int | None
    prompt_tokens: int | None = None
    message: str = ""
    json_answer: bool = False
    timed_out: bool = False  # the connection was made but no answer came within the check's timeout


def send_check(cfg: ClientConfig, content, timeout_s: float = CHECK_TIMEOUT_S) -> CheckAnswer:
    """One non-streamed request of max_tokens 1 with this prompt content; what the server answered."""
    body = oa.request_body(
        cfg.endpoint,
        cfg.model,
        content,
        1,
        stream=False,
        ignore_eos=cfg.ignore_eos,
        extra_body={"user": CHECK_USER, **cfg.extra_body},
    )
    req = urllib.request.Request(
        cfg.url, data=oa.encode_body(body), method="POST", headers=request_headers(cfg, stream=False)
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read(1 << 20)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(4096) if exc.fp is not None else b""
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return CheckAnswer(
            None, message=f"{type(reason).__name__}: {reason}"[:200], timed_out=isinstance(reason, TimeoutError)
        )
    try:
        doc = json.loads(raw)
    except ValueError:
        text = raw[:120].decode("utf-8", "replace").strip()
        return CheckAnswer(status, message=text.replace(cfg.api_key, "***") if cfg.api_key else text)
    usage = doc.get("usage") if isinstance(doc, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message", "") if isinstance(error, dict) else (error if isinstance(error, str) else "")
    if not message and isinstance(doc, dict) and isinstance(doc.get("message"), str):
        message = doc["message"]
    if cfg.api_key:  # a server may echo the key back in an error body
        message = str(message).replace(cfg.api_key, "***")
    return CheckAnswer(status, tokens if isinstance(tokens, int) else None, str(message)[:300], isinstance(doc, dict))


def settle_prompts(
    cfg: ClientConfig,
    candidates: list[PromptChoice],
    *,
    input_tokens: int | None,
    timeout_s: float = CHECK_TIMEOUT_S,
    send=send_check,
) -> PromptChoice:
    """The first way whose check request the server accepts (HTTP 200); one-line errors otherwise.

    Stops at once on HTTP 401/403 (the key), 404 or a non-JSON answer (not this API, or not this
    model); a 400 (the prompt) moves on to the next way. A calibrated text way whose check shows a
    constant template overhead (chat) keeps it, so later prompts hit the exact length."""
    n = max(1, min(input_tokens or CHECK_INPUT_TOKENS, CHECK_INPUT_TOKENS))
    spec = RequestSpec(index=-1, request_id="check", class_name="check", input_tokens=n, output_tokens=1)
    refused: list[str] = []
    sent = 0
    for choice in candidates:
        try:
            if choice.way == SERVER_TOKEN_IDS and not choice.pool:
                choice = replace(choice, pool=server_token_pool(choice.counter))
            prompt = choice.make(seed=0).prompt_for(spec)
        except KneecapError as exc:  # e.g. the server's /tokenize is not there
            refused.append(f"{choice.way}: {exc.message}")
            continue
        answer = send(cfg, prompt.content, timeout_s)
        sent += 1
        choice = replace(choice, check_requests=sent)
        if answer.status == 200 and answer.json_answer:
            if choice.counter is not None and not choice.exact and answer.prompt_tokens and prompt.num_tokens:
                overhead = answer.prompt_tokens - prompt.num_tokens
                if overhead > 0:  # measured: the chat template's tokens around the text
                    return replace(
                        choice,
                        overhead_tokens=overhead,
                        exact=True,
                        detail=choice.detail + f" + {overhead} chat-template tokens measured",
                    )
            return choice
        if answer.status is None and answer.timed_out:  # it listens but did not answer: the sweep measures that
            return replace(
                choice,
                detail=f"{choice.detail} (the check request got no answer in {timeout_s:g} s: prompts not proved)",
            )
        if answer.status is None:
            raise KneecapError(
                f"cannot reach the server at {cfg.base_url} ({answer.message})",
                f"check that it is running and listening there (curl {cfg.base_url}/v1/models)",
            )
        if answer.status in (401, 403):
            raise auth_error(cfg.base_url, answer.status)
        if answer.status == 404 and answer.json_answer and "model" in answer.message.lower():
            raise KneecapError(
                f"the server at {cfg.base_url} does not serve model {cfg.model!r} ({answer.message})",
                "pass --model with a name GET /v1/models lists",
            )
        if answer.status in (404, 405, 501) or (answer.status == 200 and not answer.json_answer):
            what = f"POST {endpoint_path(cfg.endpoint)} answered HTTP {answer.status}"
            raise not_openai_error(cfg.base_url, what + (f": {answer.message[:60]!r}" if answer.message else ""))
        if answer.status not in (400, 422):  # 5xx, 429...: the server's trouble, not the prompt's; the sweep shows it
            note = f"the check request answered HTTP {answer.status}: prompts not proved"
            return replace(choice, detail=f"{choice.detail} ({note})")
        refused.append(f"{choice.way}: HTTP {answer.status} {answer.message}".strip())
    raise KneecapError(
        f"the server at {cfg.base_url} refused every kind of prompt kneecap can build ({'; '.join(refused)[:400]})",
        "pass --tokenizer PATH/tokenizer.json (the served model's own) so prompts are text of exact length",
    )


# -- keep-alive ----------------------------------------------------------------------------------
def decide_keepalive(cfg: ClientConfig, flag: bool | None, *, timeout_s: float, flag_name: str):
    """(keepalive, summary.json's `connections`, the probe or None). flag None: probe the server."""
    if flag is not None:
        return flag, {"keepalive": flag, "decided_by": flag_name}, None
    from kneecap.client.keepalive import PROBE_TIMEOUT_S, probe_keepalive

    probe = run_sync(probe_keepalive(replace(cfg, keepalive=True), timeout_s=min(PROBE_TIMEOUT_S, timeout_s)))
    connections = probe.decision()
    return connections["keepalive"], connections, probe


# -- the whole setup, as bench and run get it ------------------------------------------------------
@dataclass(frozen=True)
class LiveClient:
    """What a run sends a live server with, decided once before its first level: the client config
    (keep-alive settled), the prompt way (`prompts.make(seed)` gives the PromptSource), summary.json's
    `connections`, and the keep-alive probe (None when a flag decided)."""

    cfg: ClientConfig
    prompts: PromptChoice
    connections: dict
    probe: object | None = None


def prepare_client(
    info: ServerInfo,
    *,
    base_url: str,
    model: str,
    endpoint: str,
    api_key: str | None,
    timeout_s: float,
    keepalive: bool | None,
    flag_name: str,
    salt: str,
    ignore_eos: bool = True,
    keep_prompts: bool = False,
    tokenizer: str | None = None,
    dataset_texts: tuple[str, ...] | None = None,
    input_tokens: int | None = None,
    dataset_in_order: bool = False,
) -> LiveClient:
    """The one client setup of `kneecap bench` and `kneecap run`: the prompt way proved by one check request
    (inside the vocabulary the server states, else calibrated text...), then keep-alive (`keepalive` None:
    probe the server; else the flag named `flag_name` decided). One-line KneecapError on a refusal."""
    cfg = client_config(
        base_url,
        model=model,
        endpoint=endpoint,
        api_key=api_key,
        timeout_s=timeout_s,
        keepalive=keepalive is not False,
        ignore_eos=ignore_eos,
        keep_prompts=keep_prompts,
        continuous_usage_stats=info.engine in PER_CHUNK_USAGE_ENGINES and not info.simulated,
    )
    ways = prompt_candidates(
        info,
        endpoint=endpoint,
        model=model,
        api_key=api_key,
        salt=salt,
        tokenizer=tokenizer,
        dataset_texts=dataset_texts,
        dataset_in_order=dataset_in_order,
    )
    choice = settle_prompts(cfg, ways, input_tokens=input_tokens, timeout_s=min(timeout_s, CHECK_TIMEOUT_S))
    kept, connections, probe = decide_keepalive(cfg, keepalive, timeout_s=timeout_s, flag_name=flag_name)
    return LiveClient(cfg=replace(cfg, keepalive=kept), prompts=choice, connections=connections, probe=probe)
