"""Multi-turn conversations: C users, each holding K-turn conversations whose context grows turn by turn.

Owns the plan (how many conversations, each turn's new-input and output lengths, seeded) and the
pure step "given turn k-1 and the tokens of its answer, what is turn k": turn k's prompt is turn
k-1's prompt + turn k-1's answer + turn k's new input, at the token level, so a server's prefix
cache hits the whole earlier conversation. Think time is the pause between an answer and the next
turn. The level runner owns users, clocks and sending; this module only says what to send next.
--requests counts turns: 48 requests of 3 turns are 16 conversations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from kneecap.errors import KneecapError
from kneecap.workload import LengthDist, RequestSpec

CLASS_NAME = "multiturn"


@dataclass(frozen=True)
class Conversation:
    """One planned conversation: per-turn new-input and output token counts (turn 1 first)."""

    conversation_id: str
    index: int
    new_input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    seed: int = 0

    @property
    def turns(self) -> int:
        return len(self.new_input_tokens)


@dataclass(frozen=True)
class TurnRequest:
    """What to send for one turn: the full prompt as token ids, and how long to think before sending it."""

    spec: RequestSpec  # input_tokens = len(prompt_tokens); conversation_id and turn set
    prompt_tokens: tuple[int, ...]
    think_time_s: float  # pause after the previous turn's answer (0 for turn 1)


@dataclass(frozen=True)
class MultiTurnPlan:
    conversations: tuple[Conversation, ...]
    think_time_s: float = 0.0
    max_context_tokens: int | None = None
    low: int = 1000  # token id range of the new inputs (inside the vocabulary, above special tokens)
    high: int = 30000


def plan_conversations(requests: int, turns: int, new_input: LengthDist, output: LengthDist, *, seed: int = 0,
                       think_time_s: float = 0.0, max_context_tokens: int | None = None,
                       low: int = 1000, high: int = 30000, count_flag: str = "--requests") -> MultiTurnPlan:
    """requests // turns conversations of `turns` turns; lengths drawn from the distributions, seeded.
    count_flag: the flag that gave `requests` (--requests, or --warmup for a level's warmup), named in the error."""
    import numpy as np

    if turns < 1:
        raise KneecapError(f"--turns must be >= 1, got {turns}", "pass e.g. --turns 3")
    if requests < turns or requests % turns:
        raise KneecapError(f"{count_flag} {requests} is not a whole number of {turns}-turn conversations",
                           f"{count_flag} counts turns: pass a multiple of {turns}, e.g. {max(1, requests // turns) * turns}")
    if think_time_s < 0:
        raise KneecapError(f"--think-time-s must be >= 0, got {think_time_s}", "pass e.g. --think-time-s 2")
    if not (0 <= low < high):
        raise KneecapError(f"token id range must satisfy 0 <= low < high, got [{low}, {high})", "pass a range inside the vocabulary")
    n = requests // turns
    rng = np.random.default_rng([seed, 4099])
    ins = new_input.sample(rng, n * turns).reshape(n, turns)
    outs = output.sample(rng, n * turns).reshape(n, turns)
    convs = tuple(Conversation(conversation_id=f"c{i}", index=i, new_input_tokens=tuple(int(x) for x in ins[i]),
                               output_tokens=tuple(int(x) for x in outs[i]), seed=seed) for i in range(n))
    return MultiTurnPlan(conversations=convs, think_time_s=float(think_time_s),
                         max_context_tokens=max_context_tokens, low=low, high=high)


def new_input_ids(plan: MultiTurnPlan, conv: Conversation, turn: int) -> list[int]:
    """The new tokens a user types at `turn` (1-based): deterministic in (seed, conversation, turn)."""
    rng = random.Random(f"kneecap-turn:{conv.seed}:{conv.index}:{turn}")
    return [rng.randrange(plan.low, plan.high) for _ in range(conv.new_input_tokens[turn - 1])]


def synthetic_answer(plan: MultiTurnPlan, conv: Conversation, turn: int, n: int | None = None) -> list[int]:
    """A stand-in answer of n tokens (default: the planned output length) for drivers that generate no text (the simulator)."""
    count = conv.output_tokens[turn - 1] if n is None else n
    rng = random.Random(f"kneecap-answer:{conv.seed}:{conv.index}:{turn}")
    return [rng.randrange(plan.low, plan.high) for _ in range(count)]


def _turn_request(plan: MultiTurnPlan, conv: Conversation, turn: int, prompt: list[int], think_s: float,
                  id_prefix: str) -> TurnRequest | None:
    out = conv.output_tokens[turn - 1]
    if plan.max_context_tokens is not None and len(prompt) + out > plan.max_context_tokens:
        return None  # the conversation outgrew the context: it ends here
    index = conv.index * conv.turns + (turn - 1)
    spec = RequestSpec(index=index, request_id=f"{id_prefix}{index}", class_name=CLASS_NAME,
                       input_tokens=len(prompt), output_tokens=out,
                       # the whole earlier conversation is this turn's prefix (the simulator's prefix cache key)
                       prefix_group=conv.index, prefix_tokens=max(0, len(prompt) - 1),
                       conversation_id=conv.conversation_id, turn=turn)
    return TurnRequest(spec=spec, prompt_tokens=tuple(prompt), think_time_s=think_s)


def first_turn(plan: MultiTurnPlan, conv: Conversation, id_prefix: str = "r") -> TurnRequest | None:
    """Turn 1: just the user's first input, sent without thinking. None if it does not fit the context."""
    return _turn_request(plan, conv, 1, new_input_ids(plan, conv, 1), 0.0, id_prefix)


def next_turn(plan: MultiTurnPlan, conv: Conversation, previous: TurnRequest, answer_tokens: Sequence[int],
              id_prefix: str = "r") -> TurnRequest | None:
    """Turn k from turn k-1 and the token ids of its answer; None when the conversation is over.

    The prompt is previous.prompt_tokens + answer_tokens + the new input of turn k, so every
    earlier token is a prefix of the new prompt. Over when turn k-1 was the last turn, or when
    turn k's prompt plus its output would exceed max_context_tokens.
    """
    if previous.spec.conversation_id != conv.conversation_id:
        raise KneecapError(f"turn of {previous.spec.conversation_id} given to conversation {conv.conversation_id}",
                           "pass each conversation its own previous turn")
    turn = previous.spec.turn + 1
    if turn > conv.turns:
        return None
    prompt = list(previous.prompt_tokens) + [int(t) for t in answer_tokens] + new_input_ids(plan, conv, turn)
    return _turn_request(plan, conv, turn, prompt, plan.think_time_s, id_prefix)


def expected_turns(plan: MultiTurnPlan, conv: Conversation, id_prefix: str = "r") -> list[TurnRequest]:
    """Every turn of a conversation assuming each answer is exactly its planned length (synthetic_answer)."""
    out: list[TurnRequest] = []
    t = first_turn(plan, conv, id_prefix)
    while t is not None:
        out.append(t)
        t = next_turn(plan, conv, t, synthetic_answer(plan, conv, t.spec.turn), id_prefix)
    return out


def grow_prompt(previous, answer, new_input):
    """Turn k's prompt from turn k-1's, its answer and the new input, as text or as token ids (the same kind
    in, the same kind out): every earlier token stays a prefix. Text turns are joined by a newline."""
    if isinstance(previous, str):
        return f"{previous}{answer}\n{new_input}"
    return tuple(previous) + tuple(int(t) for t in answer) + tuple(int(t) for t in new_input)
