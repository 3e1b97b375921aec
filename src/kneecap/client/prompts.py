"""Prompts of an exact input length, unique per request unless a shared-prefix group is asked for.

Owns: turning a RequestSpec (input_tokens, prefix_group, prefix_tokens) into prompt content —
token ids (exact by construction; /v1/completions accepts a list of ints on vLLM, SGLang and
llama.cpp) or text calibrated against a token counter (a local tokenizer.json via `tokenizers`,
or the server's own /tokenize) — and the prompt's sha256 (records keep hashes, not prompts).
Randomness comes from (seed, salt, request index): request indices run on across a sweep's levels,
and the salt is drawn afresh for every run (kept by --resume, given with --prompt-salt to repeat a
run exactly), so a second run against the same server does not hit the first run's prefix cache;
every request's content differs from its first token on unless it shares a prefix.
Does no request sending (driver.py) and reads no dataset files (datasets.py).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec
from kneecap.workload.datasets import prompt_sha256

# Common English words: in the BPE vocabularies of current LLMs (Llama 3, Qwen 2/3, Mistral,
# GPT-NeoX) " word" for each of these is a single token, so a space-joined run of n of them is
# close to n tokens; the counter then makes it exact.
WORDS = tuple(
    dict.fromkeys(
        """the of and to in is was for on are with as by at be this from or have an they which
one you were all we can her has there been if more when will would who so no she other its may these
about than them some time could only new also two any like then first our what into over after most
years out such made many where people did must well before through back year much good just way those
even should because each long very own part still state used since great both life under later while
however world last city same last high work between public day country around being local another few
place small number three large end again early another water power group often make during within every
set area different house form right general line family order play late human history""".split()
    )
)


@dataclass(frozen=True)
class Prompt:
    """Prompt content (text or token ids), its input token count when known, and its sha256."""

    content: str | tuple[int, ...]
    num_tokens: int | None
    sha256: str

    @classmethod
    def of(cls, content: str | Sequence[int], num_tokens: int | None) -> "Prompt":
        if not isinstance(content, str):
            content = tuple(int(t) for t in content)
        return cls(content, num_tokens, prompt_sha256(content))


class PromptSource(Protocol):
    """Anything that gives the prompt for a request."""

    def prompt_for(self, spec: RequestSpec) -> Prompt: ...


class TokenCounter(Protocol):
    """Counts the tokens a server will see for a text prompt (special tokens such as BOS included)."""

    def count(self, text: str) -> int: ...


# Random token ids stay below this id: Llama 3 and Qwen keep their special tokens at the top of the vocabulary.
TOKEN_ID_CEILING = 30000
TOKEN_ID_FLOOR = 1000  # and above this one: special tokens sit at the bottom in Llama/Mistral/GPT-NeoX
MIN_TOKEN_VOCAB = 8


def token_id_range(vocab_size: int) -> tuple[int, int]:
    """[low, high) of random prompt token ids inside a vocabulary of vocab_size ids (the one rule).

    Only for a vocabulary the server states (llama.cpp /v1/models meta.n_vocab) or a local
    tokenizer's: ids >= vocab_size are refused (llama.cpp HTTP 400 "invalid tokens", vLLM HTTP 400
    "Token id N is out of vocabulary"). Skips the lowest tenth (at most TOKEN_ID_FLOOR ids, at
    least 3: special tokens sit there) and stays below TOKEN_ID_CEILING.
    """
    if vocab_size < MIN_TOKEN_VOCAB:
        raise KneecapError(
            f"a vocabulary of {vocab_size} tokens is too small for random token prompts",
            "use text prompts (--tokenizer PATH/tokenizer.json, or a server with /tokenize)",
        )
    return max(3, min(TOKEN_ID_FLOOR, vocab_size // 10)), min(vocab_size, TOKEN_ID_CEILING)


def _rng(kind: str, seed: int, salt: str, key: object) -> random.Random:
    return random.Random(f"kneecap-{kind}:{seed}:{salt}:{key}")


@dataclass(frozen=True)
class RandomTokenPrompts:
    """Token-id prompts of exactly spec.input_tokens ids drawn uniformly from [low, high).

    Build the range with `token_id_range` from a vocabulary size the server (or a tokenizer) states. A
    shared-prefix group's first prefix_tokens ids are the same for every request of the group; the
    rest are drawn from (seed, salt, request index).
    """

    seed: int = 0
    low: int = TOKEN_ID_FLOOR
    high: int = TOKEN_ID_CEILING
    salt: str = ""
    pool: tuple[int, ...] = ()  # draw from these ids instead (ids the server's own /tokenize produced)

    def __post_init__(self) -> None:
        if self.pool:
            return
        if not (0 <= self.low < self.high):
            raise KneecapError(
                f"token id range must satisfy 0 <= low < high, got [{self.low}, {self.high})",
                "pass a range inside the model's vocabulary",
            )

    def prompt_for(self, spec: RequestSpec) -> Prompt:
        if spec.block_hashes:  # a replayed trace: block k is the same ids wherever its hash id appears
            ids = []
            for h in spec.block_hashes:
                if len(ids) >= spec.input_tokens:
                    break
                ids.extend(self._draw(_rng("block", self.seed, self.salt, h), spec.block_tokens))
            ids = ids[: spec.input_tokens]
            ids.extend(self._draw(_rng("prompt", self.seed, self.salt, spec.index), spec.input_tokens - len(ids)))
            return Prompt.of(ids, len(ids))
        prefix = _prefix_len(spec)
        ids: list[int] = []
        if prefix:
            ids = self._draw(_rng("prefix", self.seed, self.salt, spec.prefix_group), prefix)
        ids.extend(self._draw(_rng("prompt", self.seed, self.salt, spec.index), spec.input_tokens - prefix))
        return Prompt.of(ids, len(ids))

    def _draw(self, rng: random.Random, n: int) -> list[int]:
        if self.pool:
            return rng.choices(self.pool, k=n)
        return [rng.randrange(self.low, self.high) for _ in range(n)]


@dataclass(frozen=True)
class RandomTextPrompts:
    """Text prompts of random common words, calibrated to exactly spec.input_tokens by `counter`.

    Without a counter the text has spec.input_tokens words and its token count is unknown
    (num_tokens None): the server's usage.prompt_tokens then says what was sent. With a counter the
    text is cut, character by character, where the counter reaches the target (interpolation and
    bisection over the cut: a handful of counts per prompt for any tokenizer, from one word per
    token to one byte per token); at most `max_counts` counts, then num_tokens holds the count
    reached. `overhead_tokens` are tokens the server adds that the counter does not see (a chat
    template around the text, measured once before the sweep): the text is calibrated to
    input_tokens - overhead_tokens. A shared-prefix group's text is calibrated once to prefix_tokens.
    """

    counter: TokenCounter | None = None
    seed: int = 0
    max_counts: int = 48
    salt: str = ""
    overhead_tokens: int = 0
    _prefixes: dict = field(default_factory=dict, compare=False, repr=False)  # group -> calibrated prefix text

    def prompt_for(self, spec: RequestSpec) -> Prompt:
        rng = _rng("prompt", self.seed, self.salt, spec.index)
        target = spec.input_tokens
        if spec.block_hashes:  # a replayed trace: one word a token per block (equal hash ids, equal text), uncounted
            words: list[str] = []
            for h in spec.block_hashes:
                if len(words) >= target:
                    break
                words.extend(_rng("block", self.seed, self.salt, h).choices(WORDS, k=spec.block_tokens))
            words = words[:target] + rng.choices(WORDS, k=max(0, target - len(words)))
            text = " ".join(words)
            return Prompt.of(
                text, self.counter.count(text) + self.overhead_tokens if self.counter is not None else None
            )
        prefix = _prefix_len(spec)
        if self.counter is None:
            words = (
                [] if not prefix else _rng("prefix", self.seed, self.salt, spec.prefix_group).choices(WORDS, k=prefix)
            )
            return Prompt.of(" ".join(words + rng.choices(WORDS, k=max(1, target - prefix))), None)
        head = ""
        if prefix:
            head = self._prefix_text(spec.prefix_group, min(prefix, max(1, target - self.overhead_tokens)))
            head += " "
        text, got = _calibrate(self.counter, head, rng, max(1, target - self.overhead_tokens), self.max_counts)
        return Prompt.of(text, got + self.overhead_tokens)

    def _prefix_text(self, group: int, tokens: int) -> str:
        key = (group, tokens)
        if key not in self._prefixes:
            grng = _rng("prefix", self.seed, self.salt, group)
            self._prefixes[key] = _calibrate(self.counter, "", grng, tokens, self.max_counts)[0]
        return self._prefixes[key]


def _calibrate(counter: TokenCounter, head: str, rng: random.Random, target: int, max_counts: int) -> tuple[str, int]:
    """(head + body[:k], its count) for the k where the count reaches `target` (body: random words)."""
    body = " ".join(rng.choices(WORDS, k=max(8, 2 * target)))
    counts: dict[int, int] = {}

    def f(k: int) -> int:
        if k not in counts:
            counts[k] = counter.count(head + body[:k])
        return counts[k]

    while f(len(body)) < target and len(counts) < max_counts:  # the body must reach the target
        body += " " + " ".join(rng.choices(WORDS, k=2 * target))
    lo, hi = 0, len(body)  # invariant: f(lo) < target <= f(hi) (f(0) may already be >= target: then lo stays 0)
    if f(hi) < target or f(0) >= target:
        k = hi if f(hi) < target else 0
        return head + body[:k], f(k)
    while hi - lo > 1 and f(hi) != target and len(counts) < max_counts:
        span = f(hi) - f(lo)
        guess = lo + round((hi - lo) * (target - f(lo)) / span) if span else (lo + hi) // 2
        if len(counts) % 3 == 2:  # every third step bisects, so a lumpy counter cannot stall interpolation
            guess = (lo + hi) // 2
        guess = min(hi - 1, max(lo + 1, guess))
        if f(guess) < target:
            lo = guess
        else:
            hi = guess
    if f(hi) != target:  # the count jumps over the target: shorten the cut until it lands, if it can
        for k in range(hi - 1, lo, -1):
            if len(counts) >= max_counts or f(k) < target:
                break
            if f(k) == target:
                hi = k
                break
    best = min((hi, lo), key=lambda k: abs(f(k) - target))
    return head + body[:best], f(best)


def _prefix_len(spec: RequestSpec) -> int:
    if spec.prefix_group is None or spec.prefix_tokens <= 0:
        return 0
    return min(spec.prefix_tokens, spec.input_tokens)


class LocalTokenizer:
    """A TokenCounter from a local tokenizer.json (Hugging Face `tokenizers`), special tokens included.

    Pickles as its path (worker processes load the file again)."""

    def __init__(self, path: str, add_special_tokens: bool = True):
        self.path = str(path)
        self.add_special_tokens = add_special_tokens
        self._tok = self._load()

    def _load(self):
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - optional dependency
            raise KneecapError("the tokenizers package is not installed", "pip install 'kneecap[hf]'") from None
        try:
            return Tokenizer.from_file(self.path)
        except Exception as exc:  # tokenizers raises its own Exception type for bad files
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise KneecapError(
                f"cannot read tokenizer {self.path}: {reason}", "point --tokenizer at a tokenizer.json file"
            ) from None

    def __getstate__(self) -> dict:
        return {"path": self.path, "add_special_tokens": self.add_special_tokens}

    def __setstate__(self, state: dict) -> None:
        self.path, self.add_special_tokens = state["path"], state["add_special_tokens"]
        self._tok = self._load()

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=self.add_special_tokens).ids)


_TOKENIZE_FIX = "pass --tokenizer PATH/tokenizer.json (the model's own) to count tokens locally"


class ServerTokenizer:
    """A TokenCounter backed by the server's POST /tokenize (blocking; use while preparing a level).

    Request shapes per engine: vLLM and SGLang read {"model", "prompt", "add_special_tokens"} and
    answer {"count", "max_model_len", "tokens"} (vLLM docs "Tokenizer API",
    vllm/entrypoints/serve/tokenize/protocol.py; SGLang http_server.py /tokenize); vLLM also reads
    {"model", "messages", "add_generation_prompt"} and counts with the model's chat template
    (`chat=True`: the exact prompt a chat completion sends); llama.cpp reads {"content",
    "add_special"} and answers {"tokens"} (llama.cpp tools/server README). An unknown engine gets
    both completion shapes in one body.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        engine: str | None = None,
        chat: bool = False,
    ):
        self.url = base_url.rstrip("/").removesuffix("/v1") + "/tokenize"
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.engine = engine
        self.chat = chat

    def __repr__(self) -> str:
        return f"ServerTokenizer({self.url!r}, model={self.model!r}, engine={self.engine!r}, chat={self.chat})"

    def body(self, text: str) -> dict:
        if self.chat:
            body: dict = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        elif self.engine == "llama.cpp":
            return {"content": text, "add_special": True}
        elif self.engine in ("vllm", "sglang"):
            body = {"prompt": text, "add_special_tokens": True}
        else:
            body = {"prompt": text, "content": text, "add_special_tokens": True, "add_special": True}
        if self.model:
            body["model"] = self.model
        return body

    def count(self, text: str) -> int:
        data = self._ask(self.body(text))
        if isinstance(data, dict):
            if isinstance(data.get("count"), int):
                return data["count"]
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
        raise KneecapError(f"the server's tokenize endpoint {self.url} answered an unknown shape", _TOKENIZE_FIX)

    def token_ids(self, text: str) -> list[int]:
        """The ids the server's tokenizer gives `text`, without special tokens (completions shape)."""
        body = self.body(text)
        body["add_special_tokens"] = body["add_special"] = False
        data = self._ask(body)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise KneecapError(f"the server's tokenize endpoint {self.url} answered no token ids", _TOKENIZE_FIX)
        return tokens

    def _ask(self, body: dict):
        import urllib.error
        import urllib.request

        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise KneecapError(
                f"the server's tokenize endpoint {self.url} answered HTTP {exc.code}", _TOKENIZE_FIX
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise KneecapError(
                f"cannot use the server's tokenize endpoint {self.url}: {type(exc).__name__}", _TOKENIZE_FIX
            ) from None
        return data
