"""Multi-turn conversations: C users, each holding K-turn conversations whose context grows turn by turn.

Owns the plan (how many conversations, each turn's new-input and output lengths, seeded), every turn's
request as planned (expected_turns: turn k's prompt is turn k-1's prompt + turn k-1's answer + turn k's new
input, so a server's prefix cache hits the whole earlier conversation) and the one step that grows a prompt
(grow_prompt, text or token ids). Think time is the pause between an answer and the next turn. The level
runner owns users, clocks and sending; this module only says what to send next.
--requests counts turns: 48 requests of 3 turns are 16 conversations.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def turns(self) -> int:
        return len(self.new_input_tokens)


@dataclass(frozen=True)
class TurnRequest:
    """One turn as planned, and how long to think before sending it."""

    spec: RequestSpec  # conversation_id and turn set
    think_time_s: float  # pause after the previous turn's answer (0 for turn 1)


@dataclass(frozen=True)
class MultiTurnPlan:
    conversations: tuple[Conversation, ...]
    think_time_s: float = 0.0


def plan_conversations(
    requests: int,
    turns: int,
    new_input: LengthDist,
    output: LengthDist,
    *,
    seed: int = 0,
    think_time_s: float = 0.0,
    count_flag: str = "--requests",
) -> MultiTurnPlan:
    """requests // turns conversations of `turns` turns; lengths drawn from the distributions, seeded.
    count_flag: the flag that gave `requests` (--requests, or --warmup for a level's warmup), named in the error."""
    import numpy as np

    if turns < 1:
        raise KneecapError(f"--turns must be >= 1, got {turns}", "pass e.g. --turns 3")
    if requests < turns or requests % turns:
        raise KneecapError(
            f"{count_flag} {requests} is not a whole number of {turns}-turn conversations",
            f"{count_flag} counts turns: pass a multiple of {turns}, e.g. {max(1, requests // turns) * turns}",
        )
    if think_time_s < 0:
        raise KneecapError(f"--think-time-s must be >= 0, got {think_time_s}", "pass e.g. --think-time-s 2")
    n = requests // turns
    rng = np.random.default_rng([seed, 4099])
    ins = new_input.sample(rng, n * turns).reshape(n, turns)
    outs = output.sample(rng, n * turns).reshape(n, turns)
    convs = tuple(
        Conversation(
            conversation_id=f"c{i}",
            index=i,
            new_input_tokens=tuple(int(x) for x in ins[i]),
            output_tokens=tuple(int(x) for x in outs[i]),
        )
        for i in range(n)
    )
    return MultiTurnPlan(conversations=convs, think_time_s=float(think_time_s))


def expected_turns(plan: MultiTurnPlan, conv: Conversation) -> list[TurnRequest]:
    """Every turn of a conversation assuming each answer is exactly its planned length: turn k's input is every
    earlier turn's new input and answer plus its own new input, the whole earlier conversation its prefix (the
    simulator's prefix cache key)."""
    out: list[TurnRequest] = []
    prompt = 0
    for turn in range(1, conv.turns + 1):
        prompt += conv.new_input_tokens[turn - 1]
        index = conv.index * conv.turns + (turn - 1)
        spec = RequestSpec(
            index=index,
            request_id=f"r{index}",
            class_name=CLASS_NAME,
            input_tokens=prompt,
            output_tokens=conv.output_tokens[turn - 1],
            prefix_group=conv.index,
            prefix_tokens=max(0, prompt - 1),
            conversation_id=conv.conversation_id,
            turn=turn,
        )
        out.append(TurnRequest(spec=spec, think_time_s=plan.think_time_s if turn > 1 else 0.0))
        prompt += conv.output_tokens[turn - 1]
    return out


def grow_prompt(previous, answer, new_input):
    """Turn k's prompt from turn k-1's, its answer and the new input, as text or as token ids (the same kind
    in, the same kind out): every earlier token stays a prefix. Text turns are joined by a newline."""
    if isinstance(previous, str):
        return f"{previous}{answer}\n{new_input}"
    return tuple(previous) + tuple(int(t) for t in answer) + tuple(int(t) for t in new_input)
