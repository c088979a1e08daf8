"""Admissible-action decoding: the text inside ``<action> ... </action>`` limited to a given list.

An option (``rollout.constrain_actions``), off by default and in the paper configs: the reference
samples free text and penalises invalid actions (docs/algorithm.md#action-parsing). A model trained from scratch
on a CPU budget (``tiny``) cannot learn to copy names from its prompt in minutes; with this
option it only has to *choose* among the admissible actions, which is the decision GiGPO's step
credit is about.

How: free sampling until the response's text ends with the open tag; from there every token must
follow a prefix trie over ``tokens(action) + tokens(close tag)`` of the allowed actions; after the
close tag only EOS may follow (any of the model's EOS ids, or with ``end_id`` that one alone). A
step whose next token is restricted samples from the policy's
distribution renormalised over the allowed ids (logits of the rest set to -inf). The sampler
records each restricted position with its allowed ids (``Generation.allowed``), and every
log-prob the trainer recomputes (old, reference, new, SFT) applies the same masks, so the PPO
ratio compares the same distributions.

Once a response's remaining tokens are all forced (one action is left in the trie and one id may
end it), ``ActionConstraint.forced_tail`` gives them: the sampler writes them with log-prob 0, as
the masked distribution gives, without running the model on them (jump-forward decoding, as in
SGLang's compressed finite-state machines). With several EOS ids the last token is a choice, so
``end_id`` (``rollout.jump_forward``) is what makes a tail forced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gigpo.text import clean_text

OPEN_TAG, CLOSE_TAG = "<action>", "</action>"

# One restricted position of a response: (index k of the response token, allowed ids int64 [m]).
Allowed = list[tuple[int, np.ndarray]]


class ActionVocab:
    """Per-tokenizer caches: each token id's text and each action's token ids.

    ``open_tag=None`` restricts from the first response token (for prompts that already end with
    the open tag). ``end_id``: the one id allowed after the close tag (default: the caller's EOS
    ids, ``ActionConstraint.allowed``).
    """

    def __init__(
        self, tokenizer, *, open_tag: str | None = OPEN_TAG, close_tag: str = CLOSE_TAG, end_id: int | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.open_tag, self.close_tag = open_tag, close_tag
        self.end_id = None if end_id is None else int(end_id)
        self._piece: dict[int, str] = {}
        self._ids: dict[str, tuple[int, ...]] = {}
        self.close_ids = self.encode(close_tag)

    def piece(self, tok: int) -> str:
        s = self._piece.get(tok)
        if s is None:
            s = self._piece[tok] = self.tokenizer.decode([int(tok)])
        return s

    def encode(self, text: str) -> tuple[int, ...]:
        ids = self._ids.get(text)
        if ids is None:
            encoded = self.tokenizer(clean_text(text), add_special_tokens=False)["input_ids"]
            ids = self._ids[text] = tuple(int(i) for i in encoded)
        return ids

    def constraint(self, actions: Sequence[str]) -> "ActionConstraint":
        if not actions:
            raise ValueError("ActionConstraint needs at least one allowed action")
        root: dict = {}
        for a in actions:
            node = root
            for t in self.encode(a) + self.close_ids:
                node = node.setdefault(t, {})
        return ActionConstraint(self, root)


@dataclass
class ActionConstraint:
    """The trie of one prompt's allowed actions (build with ``ActionVocab.constraint``)."""

    vocab: ActionVocab
    root: dict

    def start(self) -> "_State":
        return _State() if self.vocab.open_tag is not None else _State(mode="trie", node=self.root)

    def allowed(self, st: "_State", eos_ids: Sequence[int]) -> np.ndarray | None:
        """Ids allowed as the next token, or None (unrestricted)."""
        if st.mode == "trie":
            if st.node:
                return np.fromiter(st.node.keys(), dtype=np.int64)
            return np.asarray(eos_ids if self.vocab.end_id is None else [self.vocab.end_id], dtype=np.int64)
        return None

    def forced_tail(self, st: "_State", eos_ids: Sequence[int]) -> list[int] | None:
        """The rest of the response from ``st`` when every token of it is forced (one id allowed
        at each position, through the last), else None. ``st`` is left as it is."""
        if st.mode != "trie":
            return None
        node, tail = st.node, []
        while len(node) == 1:
            [(tok, node)] = node.items()
            tail.append(tok)
        if node:
            return None  # a choice is left
        end = eos_ids if self.vocab.end_id is None else [self.vocab.end_id]
        return tail + [int(end[0])] if len(end) == 1 else None

    def advance(self, st: "_State", tok: int) -> None:
        """Update ``st`` with the sampled token ``tok``."""
        tok = int(tok)
        if st.mode == "free":
            tag = self.vocab.open_tag
            assert tag is not None  # start() begins in free mode only when there is an open tag
            st.tail = (st.tail + self.vocab.piece(tok))[-4 * len(tag) :]
            if st.tail.endswith(tag):
                st.mode, st.node = "trie", self.root
            elif tag in st.tail:
                st.mode = "off"  # the tag ended inside a token: no clean start, leave it free
        elif st.mode == "trie":
            if not st.node:  # EOS after the close tag: nothing more is generated
                st.mode = "off"
            elif tok in st.node:
                st.node = st.node[tok]
            else:  # not reachable when sampling under the mask; stay safe on foreign data
                st.mode = "off"

    def positions(self, response_ids: Sequence[int], eos_ids: Sequence[int]) -> Allowed:
        """The restricted positions of a whole response, as the sampler would have recorded them."""
        st, out = self.start(), []
        for k, tok in enumerate(response_ids):
            ids = self.allowed(st, eos_ids)
            if ids is not None:
                out.append((k, ids))
            self.advance(st, tok)
        return out


@dataclass
class _State:
    mode: str = "free"  # free -> trie (after the open tag) -> off; or free -> off
    tail: str = ""
    node: dict = field(default_factory=dict)
