"""Prompts of an exact input length, unique per request unless a shared-prefix group is asked for.

Owns: turning a RequestSpec (input_tokens, prefix_group, prefix_tokens) into prompt content —
token ids (exact by construction; /v1/completions accepts a list of ints on vLLM, SGLang and
llama.cpp) or text calibrated against a token counter (a local tokenizer.json via `tokenizers`,
or the server's own /tokenize) — and the prompt's sha256 (records keep hashes, not prompts).
Randomness comes from (seed, request index), so a sweep is reproducible; servers cache repeated
prompts, so every request's content differs from its first token on unless it shares a prefix.
Does no request sending (driver.py) and reads no dataset files (datasets.py).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Protocol, Sequence

from kneecap.errors import KneecapError
from kneecap.workload import RequestSpec

# Common English words: in the BPE vocabularies of current LLMs (Llama 3, Qwen 2/3, Mistral,
# GPT-NeoX) " word" for each of these is a single token, so a space-joined run of n of them is
# close to n tokens; the counter then makes it exact.
WORDS = tuple(dict.fromkeys("""the of and to in is was for on are with as by at be this from or have an they which
one you were all we can her has there been if more when will would who so no she other its may these
about than them some time could only new also two any like then first our what into over after most
years out such made many where people did must well before through back year much good just way those
even should because each long very own part still state used since great both life under later while
however world last city same last high work between public day country around being local another few
place small number three large end again early another water power group often make during within every
set area different house form right general line family order play late human history""".split()))


def prompt_sha256(content: str | Sequence[int]) -> str:
    """sha256 hex of a prompt: UTF-8 of text, or of the JSON list of token ids."""
    if isinstance(content, str):
        data = content.encode("utf-8")
    else:
        data = json.dumps(list(content), separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()


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

    @property
    def text(self) -> str | None:
        return self.content if isinstance(self.content, str) else None


class PromptSource(Protocol):
    """Anything that gives the prompt for a request."""

    def prompt_for(self, spec: RequestSpec) -> Prompt: ...


class TokenCounter(Protocol):
    """Counts the tokens a server will see for a text prompt (special tokens such as BOS included)."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class RandomTokenPrompts:
    """Token-id prompts of exactly spec.input_tokens ids drawn uniformly from [low, high).

    Pick the range inside the model's vocabulary and away from special tokens (ids below ~1000
    hold them in most vocabularies). A shared-prefix group's first prefix_tokens ids are the same
    for every request of the group; the rest are drawn from (seed, request index).
    """

    seed: int = 0
    low: int = 1000
    high: int = 30000

    def __post_init__(self) -> None:
        if not (0 <= self.low < self.high):
            raise KneecapError(f"token id range must satisfy 0 <= low < high, got [{self.low}, {self.high})",
                               "pass a range inside the model's vocabulary")

    @classmethod
    def for_vocab(cls, vocab_size: int | None, seed: int = 0) -> "RandomTokenPrompts":
        """A range inside a vocabulary of vocab_size ids (e.g. ServerInfo.vocab_size; None: the default).

        Skips the lowest ids (special tokens sit there in Llama/Mistral/tiny test vocabularies) and
        stays below 30,000 (Llama 3 and Qwen keep their special tokens at the top of the vocabulary).
        """
        if vocab_size is None:
            return cls(seed=seed)
        if vocab_size < 8:
            raise KneecapError(f"a vocabulary of {vocab_size} tokens is too small for random token prompts",
                               "use text prompts (--endpoint chat or a dataset)")
        return cls(seed=seed, low=max(3, min(1000, vocab_size // 10)), high=min(vocab_size, 30000))

    def prompt_for(self, spec: RequestSpec) -> Prompt:
        prefix = _prefix_len(spec)
        ids: list[int] = []
        if prefix:
            grng = random.Random(f"kneecap-prefix:{self.seed}:{spec.prefix_group}")
            ids = [grng.randrange(self.low, self.high) for _ in range(prefix)]
        rng = random.Random(f"kneecap-prompt:{self.seed}:{spec.index}")
        ids.extend(rng.randrange(self.low, self.high) for _ in range(spec.input_tokens - prefix))
        return Prompt.of(ids, len(ids))


@dataclass(frozen=True)
class RandomTextPrompts:
    """Text prompts of random common words, calibrated to exactly spec.input_tokens by `counter`.

    Without a counter the text has spec.input_tokens words and its token count is unknown
    (num_tokens None): the server's usage.prompt_tokens then says what was sent. With a counter
    the word count is adjusted until the counter agrees (or `max_rounds` adjustments fail, in which
    case num_tokens holds the count actually reached). Chat templates add tokens the counter does
    not see: exact text lengths hold for /v1/completions.
    """

    counter: TokenCounter | None = None
    seed: int = 0
    max_rounds: int = 8

    def prompt_for(self, spec: RequestSpec) -> Prompt:
        prefix = _prefix_len(spec)
        prefix_words: list[str] = []
        if prefix:
            grng = random.Random(f"kneecap-prefix:{self.seed}:{spec.prefix_group}")
            prefix_words = grng.choices(WORDS, k=prefix)
        rng = random.Random(f"kneecap-prompt:{self.seed}:{spec.index}")
        target = spec.input_tokens
        pool = rng.choices(WORDS, k=max(8, 2 * target))
        n = max(1, target - prefix)
        if self.counter is None:
            return Prompt.of(" ".join(prefix_words + pool[:n]), None)
        best: tuple[int, str] | None = None
        for _ in range(self.max_rounds):
            while n > len(pool):
                pool.extend(rng.choices(WORDS, k=target))
            text = " ".join(prefix_words + pool[:n])
            got = self.counter.count(text)
            if got == target:
                return Prompt.of(text, got)
            if best is None or abs(got - target) < abs(best[0] - target):
                best = (got, text)
            step = target - got
            if n + step < 1:
                break
            n += step
        if best is None:
            raise KneecapError("text prompt calibration needs max_rounds >= 1", "pass max_rounds >= 1")
        return Prompt.of(best[1], best[0])


def _prefix_len(spec: RequestSpec) -> int:
    if spec.prefix_group is None or spec.prefix_tokens <= 0:
        return 0
    return min(spec.prefix_tokens, spec.input_tokens)


class LocalTokenizer:
    """A TokenCounter from a local tokenizer.json (Hugging Face `tokenizers`), special tokens included."""

    def __init__(self, path: str, add_special_tokens: bool = True):
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - optional dependency
            raise KneecapError("the tokenizers package is not installed", "pip install 'kneecap[hf]'") from None
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises its own Exception type for bad files
            raise KneecapError(f"cannot read tokenizer {path}: {exc}", "point --tokenizer at a tokenizer.json file") from None
        self.add_special_tokens = add_special_tokens

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=self.add_special_tokens).ids)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=self.add_special_tokens).ids


class ServerTokenizer:
    """A TokenCounter backed by the server's POST /tokenize (blocking; use while preparing a level).

    One body serves the three engines: vLLM reads {"model", "prompt", "add_special_tokens"} and
    answers {"count", "max_model_len", "tokens"} (vLLM docs, "Tokenizer API"); SGLang reads
    {"prompt", "add_special_tokens"} and answers {"tokens", "count", ...} (SGLang native API docs);
    llama.cpp reads {"content", "add_special"} and answers {"tokens"} (llama.cpp server README).
    """

    def __init__(self, base_url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = 30.0):
        self.url = base_url.rstrip("/") + "/tokenize"
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"ServerTokenizer({self.url!r}, model={self.model!r})"

    def count(self, text: str) -> int:
        import urllib.error
        import urllib.request

        body = {"prompt": text, "content": text, "add_special_tokens": True, "add_special": True}
        if self.model:
            body["model"] = self.model
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise KneecapError(f"the server's tokenize endpoint {self.url} answered HTTP {exc.code}",
                               "use token-id prompts (completions endpoint) or --tokenizer PATH/tokenizer.json") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise KneecapError(f"cannot use the server's tokenize endpoint {self.url}: {type(exc).__name__}",
                               "use token-id prompts (completions endpoint) or --tokenizer PATH/tokenizer.json") from None
        if isinstance(data, dict):
            if isinstance(data.get("count"), int):
                return data["count"]
            if isinstance(data.get("tokens"), list):
                return len(data["tokens"])
        raise KneecapError(f"the server's tokenize endpoint {self.url} answered an unknown shape",
                           "use token-id prompts or --tokenizer PATH/tokenizer.json")
