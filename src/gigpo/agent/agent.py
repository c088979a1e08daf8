"""The agent: one step's prompt as token ids (with overflow handling) and the response's parse.

``Agent.build_prompt`` renders the family template (``prompts.render_prompt``), applies the
tokenizer's chat template with ``add_generation_prompt=True`` and tokenizes it. When the prompt is
longer than ``max_prompt_tokens`` it drops the preamble parts (the prompting agents' few-shot
examples and reflections), first part first, then the oldest history entries, then cuts the
current observation from the left (the task text stays), and as a last resort splices the token
ids (head + tail). Every cut is counted on the returned ``Prompt``; nothing is cut silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gigpo.agent.parsing import ParsedAction, parse_action
from gigpo.agent.prompts import PROMPT_FORMS, clean_text, render_prompt
from gigpo.envs.spec import families, get_family

_ELLIPSIS = "..."


@dataclass
class Prompt:
    """One step's prompt.

    ids: exact prompt token ids the model sees (chat template applied).
    text: the same prompt as text (for inspection).
    message: the user message before the chat template (what a chat API is sent); after a hard
        truncation, the text of the spliced ids.
    preamble_dropped: preamble parts left out to fit ``max_prompt_tokens``.
    history_dropped: history entries left out to fit ``max_prompt_tokens`` (beyond the K limit).
    observation_truncated: the current observation was cut from the left to fit.
    hard_truncated: even history-free with an empty observation it was too long; ids were spliced.
    """

    ids: list[int]
    text: str
    message: str = ""
    preamble_dropped: int = 0
    history_dropped: int = 0
    observation_truncated: bool = False
    hard_truncated: bool = False


class Agent:
    """Prompt building and action parsing for one env family.

    Args:
        family: a registered env family (``alfworld``, ``webshop``, ``search``, a plugin's);
            its ``FamilySpec`` gives the prompt wording, default history and action syntax.
        tokenizer: a Hugging Face tokenizer; its chat template is used when it has one, otherwise
            the message is wrapped as ``"User: ...\\nAssistant:"``.
        history_length: K, the number of past (observation, action) pairs shown
            (default 2; 4 for search, docs/algorithm.md#paper-settings).
        max_prompt_tokens: longest prompt in tokens (spec scripts: 2048 / 4096).
        constrain_actions: decode the ``<action>`` text only from the admissible actions
            (``gigpo.policy.constrain``; an option, not the reference behaviour). Families whose
            envs list no admissible actions (search) are left unconstrained.
        jump_forward: with ``constrain_actions``, end each action with the tokenizer's EOS alone
            (``ActionVocab(end_id=...)``), which makes a response's tail forced once one action
            is left (the sampler then skips it).
        repeat_task: repeat the task at the end of the prompt (``render_prompt``; an option, not
            the reference prompt).
        prompt_form: ``full`` (the family's template) or ``observation`` (the observation
            alone; families with ``FamilySpec.observation_is_state`` and no history shown);
            see ``render_prompt``.
    """

    def __init__(
        self,
        family: str,
        tokenizer,
        *,
        history_length: int | None = None,
        max_prompt_tokens: int = 2048,
        constrain_actions: bool = False,
        jump_forward: bool = False,
        repeat_task: bool = False,
        prompt_form: str = "full",
    ) -> None:
        try:
            self.spec = get_family(family)
        except ValueError as e:
            raise ValueError(f"Agent: {e}") from None
        k = self.spec.default_history if history_length is None else history_length
        if k < 0:
            raise ValueError(f"Agent: history_length must be >= 0, got {k}")
        if prompt_form not in PROMPT_FORMS:
            raise ValueError(f"Agent: prompt_form must be one of {PROMPT_FORMS}, got {prompt_form!r}")
        if prompt_form == "observation" and (not self.spec.observation_is_state or k or repeat_task):
            raise ValueError(
                f"Agent: prompt_form='observation' shows the observation alone: it needs a family whose "
                f"observation is its whole state (FamilySpec.observation_is_state: "
                f"{', '.join(f for f in families() if get_family(f).observation_is_state) or 'none'}; "
                f"{family!r}: {self.spec.observation_is_state}), history_length 0 (got {k}) and no repeat_task"
            )
        if max_prompt_tokens < 16:
            raise ValueError(f"Agent: max_prompt_tokens must be >= 16 to hold a chat template, got {max_prompt_tokens}")
        self.family = family
        self.tokenizer = tokenizer
        self.history_length = k
        self.max_prompt_tokens = max_prompt_tokens
        self.constrain_actions = constrain_actions
        if jump_forward and tokenizer.eos_token_id is None:
            raise ValueError("Agent: jump_forward ends each action with the tokenizer's EOS; this tokenizer has none")
        self.end_id = tokenizer.eos_token_id if jump_forward else None
        self.repeat_task = repeat_task
        self.prompt_form = prompt_form
        self._vocab = None

    # -- prompts ---------------------------------------------------------------------------
    def _wrap(self, message: str) -> str:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(
                [{"role": "user", "content": message}], add_generation_prompt=True, tokenize=False
            )
        return f"User: {message}\nAssistant:"

    def _encode(self, message: str) -> tuple[str, list[int]]:
        text = clean_text(self._wrap(message))
        # The chat template already holds BOS/special tokens as text: no extra special tokens.
        return text, list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_message(self, message: str) -> Prompt:
        """``message`` as a whole prompt (chat template applied), without any cut."""
        text, ids = self._encode(message)
        return Prompt(ids, text, message=clean_text(message))

    def build_prompt(
        self,
        task: str,
        observation: str,
        history: Sequence[tuple[str, str]] = (),
        *,
        step: int = 0,
        admissible_actions: Sequence[str] | None = None,
        preamble: Sequence[str] = (),
    ) -> Prompt:
        """The prompt for one step.

        Args:
            task: task text. observation: current raw observation.
            history: ALL past (observation, action) pairs of the trajectory, oldest first; the last
                K are shown (fewer when the prompt would overflow).
            step: steps taken so far. admissible_actions: listed in the prompt when given.
            preamble: text parts shown before the task (``render_prompt``), ordered least
                important first: the first is the first dropped when the prompt would overflow.
        """
        shown = list(history[-self.history_length :]) if self.history_length else []
        pre = list(preamble)

        def render(hist, obs) -> tuple[str, list[int], str]:
            message = render_prompt(
                self.spec,
                task,
                obs,
                history=hist,
                step=step,
                admissible_actions=admissible_actions,
                repeat_task=self.repeat_task,
                preamble=pre,
                form=self.prompt_form,
            )
            return (*self._encode(message), message)

        def prompt(rendered, **cuts) -> Prompt:
            text, ids, message = rendered
            return Prompt(ids, text, message=message, preamble_dropped=len(preamble) - len(pre), **cuts)

        limit = self.max_prompt_tokens
        cur = render(shown, observation)
        while len(cur[1]) > limit and pre:  # 1) drop the preamble, its first part first
            pre = pre[1:]
            cur = render(shown, observation)
        dropped = 0
        while len(cur[1]) > limit and shown:  # 2) drop the oldest history
            shown = shown[1:]
            dropped += 1
            cur = render(shown, observation)
        if len(cur[1]) <= limit:
            return prompt(cur, history_dropped=dropped)
        # 3) keep the longest suffix of the observation that fits (binary search on characters).
        lo, hi = 0, len(observation)
        best = render(shown, _ELLIPSIS)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            cand = render(shown, _ELLIPSIS + observation[len(observation) - mid :])
            if len(cand[1]) <= limit:
                lo, best = mid, cand
            else:
                hi = mid - 1
        if len(best[1]) <= limit:
            return prompt(best, history_dropped=dropped, observation_truncated=True)
        text, ids, _ = best
        # 4) the task text alone is too long: keep the head (template start) and the tail
        # (format instruction + generation prompt) of the ids.
        head = limit // 4
        ids = ids[:head] + ids[len(ids) - (limit - head) :]
        text = self.tokenizer.decode(ids)
        return Prompt(
            ids,
            text,
            message=text,
            preamble_dropped=len(preamble) - len(pre),
            history_dropped=dropped,
            observation_truncated=True,
            hard_truncated=True,
        )

    def action_constraint(self, admissible_actions: Sequence[str] | None):
        """The ``ActionConstraint`` for one step, or None (option off or no admissible list)."""
        if not self.constrain_actions or not admissible_actions:
            return None
        if self._vocab is None:
            from gigpo.policy.constrain import ActionVocab

            self._vocab = ActionVocab(self.tokenizer, end_id=self.end_id)
        # The parser lower-cases and strips the action text (docs/algorithm.md#action-parsing):
        # allow the env's form of it.
        return self._vocab.constraint([a.strip().lower() for a in admissible_actions])

    # -- responses -------------------------------------------------------------------------
    def parse(self, response_text: str) -> ParsedAction:
        """The action sent to the env and its validity (docs/algorithm.md#action-parsing)."""
        return parse_action(self.spec, response_text)
