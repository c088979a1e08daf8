"""One ``FamilySpec`` per env family, and the registry that maps family names to them.

Everything that differs between families outside their env code lives in the spec: prompt text,
action syntax, expert response text, SFT relabelling, metrics, thread safety, the ``tiny``
model's corpus share. The rest of the library reads the spec instead of testing family names.

Where specs come from (first match wins; a name can be registered once):
  * the built-in families (``gigpo.envs.builtin``), registered by ``gigpo/envs/__init__.py``
    with one ``register_builtin`` call each (this module imports none of them);
  * Python entry points in group ``gigpo.families`` (each a ``FamilySpec`` or a zero-argument
    callable returning one), loaded once, on the first lookup of a name not yet registered or
    the first listing; one that fails to load is left out with a warning naming it, and only
    asking for an unknown name (possibly the broken plug-in's) is an error;
  * ``register_family(spec)`` called by user code, e.g. a module named by the config key
    ``env.family_module`` (``load_family_module``), whose ``FAMILY_SPEC`` is registered.

The family's module (``spec.module``) is imported only when an env or tasks are made, so a spec
costs nothing for a user who lacks the family's optional dependencies.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import threading
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Mapping

ENTRY_POINT_GROUP = "gigpo.families"
PROMPT_STYLES = ("env", "qa")
ACTION_SYNTAXES = ("action", "search")


@dataclass(frozen=True)
class FamilySpec:
    """What the library needs to know about one env family (see ``docs/extending.md``).

    Attributes:
        name: the family name (``env.family``, ``Task.family``, ``TextEnv.family``).
        module: dotted path of the module providing ``make_env(**kw)`` and
            ``make_tasks(split, n=None, seed=0, **kw)``; imported on first use.
        system_prompt: the prompt's first line (who the agent is, where it acts).
        action_format: the prompt's last paragraph: how to reason and how to write the action.
        task_label: prefix of the task line (``"<task_label>: <task>"``).
        task_again_label: prefix of the repeated task line (``Agent(repeat_task=True)``).
        prompt_style: ``env``: observation/action history and ``Current observation:`` (ALFWorld,
            WebShop); ``qa``: question answering, where the first observation is the question
            and later ones are tool results (search).
        observation_is_state: the observation alone is the whole state and the task never
            changes within the family (sokoban: the grid), so ``rollout.prompt=observation`` (the
            prompt is the observation and nothing else) loses nothing the policy needs.
        history_noun: what the history lines show, in ``The most recent K <history_noun>:``.
        default_history: K, past steps shown when ``Agent(history_length=None)``.
        action_syntax: ``action``: ``<think>..</think><action>..</action>`` (lower-cased; on
            missing tags the last ``fallback_tail`` characters go to the env, invalid);
            ``search``: ``<search>..</search>`` or ``<answer>..</answer>`` (Search-R1).
        fallback_tail: see ``action_syntax=action``.
        tool_call_kinds: ``ParsedAction.kind`` values that count as tool calls (``traj_tool_calls``
            when the env's info has no ``tool_calls``).
        expert_reason: ``action -> reason`` for the ``<think>`` of expert (SFT) responses,
            given the lower-cased action; None: a generic reason. Unused for ``search`` syntax
            (its expert text carries its own tag).
        metrics: ``StepBatch -> dict`` of extra rollout metrics, merged into ``rollout_metrics``.
        traj_info_keys: env ``info`` keys the rollout copies from each trajectory's last info
            into ``meta["traj_info"]`` (one dict per trajectory, keys the info lacks left out),
            for a ``metrics`` hook that needs per-episode outcomes (sokoban: ``deadlocked``).
        sft_relabel: SFT demos add counterfactual task relabellings (``gigpo.agent.relabel``,
            written for ALFWorld's task and observation wording).
        thread_safe: envs may run in threads (``env.executor=thread``); False refuses that.
        tiny_corpus_episodes: expert episodes of this family in the ``tiny`` tokenizer's corpus
            (0: none). Part of the ``tiny`` cache key, with the module's source files.
        engines: distributions whose versions are part of the ``tiny`` cache key.
        env_kwargs: default ``make_env`` options, under ``env.kwargs``.
    """

    name: str
    module: str
    system_prompt: str
    action_format: str
    task_label: str = "Your task is to"
    task_again_label: str = "Your task"
    prompt_style: str = "env"
    observation_is_state: bool = False
    history_noun: str = "observations and the actions you took"
    default_history: int = 2
    action_syntax: str = "action"
    fallback_tail: int = 30
    tool_call_kinds: tuple[str, ...] = ()
    expert_reason: Callable[[str], str] | None = field(default=None, compare=False)
    metrics: Callable[[Any], dict] | None = field(default=None, compare=False)
    traj_info_keys: tuple[str, ...] = ()
    sft_relabel: bool = False
    thread_safe: bool = True
    tiny_corpus_episodes: int = 0
    engines: tuple[str, ...] = ()
    env_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        where = f"FamilySpec({self.name!r})"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                f"FamilySpec.name must be an identifier-like string (letters, digits, _), got {self.name!r}"
            )
        if not isinstance(self.module, str) or not self.module:
            raise ValueError(
                f"{where}.module must be the dotted path of the module providing make_env/"
                f"make_tasks, got {self.module!r}"
            )
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"{where}.prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}")
        if self.action_syntax not in ACTION_SYNTAXES:
            raise ValueError(f"{where}.action_syntax must be one of {ACTION_SYNTAXES}, got {self.action_syntax!r}")
        for k in ("default_history", "fallback_tail", "tiny_corpus_episodes"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{where}.{k} must be an int >= 0, got {v!r}")
        if not isinstance(self.traj_info_keys, tuple) or not all(isinstance(k, str) for k in self.traj_info_keys):
            raise ValueError(f"{where}.traj_info_keys must be a tuple of info key strings, got {self.traj_info_keys!r}")
        for k in ("expert_reason", "metrics"):
            if getattr(self, k) is not None and not callable(getattr(self, k)):
                raise ValueError(f"{where}.{k} must be callable or None, got {getattr(self, k)!r}")

    def load(self) -> ModuleType:
        """Import and return the family's module."""
        return importlib.import_module(self.module)


_REGISTRY: dict[str, FamilySpec] = {}
_BUILTIN: dict[str, FamilySpec] = {}  # filled by gigpo/envs/__init__.py
_ORIGIN: dict[str, str] = {}  # name -> where its spec came from (``family_origin``)
_BROKEN: dict[str, str] = {}  # entry point name -> why it did not load
_LOCK = threading.RLock()
_loaded = {"entry_points": False}
BUILTIN_ORIGIN = "built-in"


def register_builtin(spec: FamilySpec) -> FamilySpec:
    """Register one of gigpo's own families (called by ``gigpo/envs/__init__.py`` only)."""
    with _LOCK:
        _BUILTIN[spec.name] = spec
        _REGISTRY.setdefault(spec.name, spec)
        _ORIGIN[spec.name] = BUILTIN_ORIGIN
    return spec


def register_family(spec: FamilySpec, *, origin: str = "register_family") -> FamilySpec:
    """Add ``spec`` under ``spec.name``; a name can be registered only once (the same spec again
    is a no-op, so a module that registers on import may be imported twice). ``origin`` is what
    ``family_origin`` (and ``gigpo list``) reports for it."""
    if not isinstance(spec, FamilySpec):
        raise TypeError(f"register_family needs a FamilySpec, got {type(spec).__name__}")
    with _LOCK:
        old = _REGISTRY.get(spec.name)
        if old is not None and old is not spec:
            raise ValueError(
                f"env family {spec.name!r} is already registered (module {old.module!r}); pick another name"
            )
        if old is None:
            _ORIGIN[spec.name] = origin
        _REGISTRY[spec.name] = spec
    return spec


def get_family(name: str) -> FamilySpec:
    """The spec of family ``name``; unknown names raise ``ValueError`` with a close-match hint
    (and the error of every installed plug-in that failed to load: one of them may be it)."""
    spec = _find(name)
    if spec is None:
        raise _unknown(name)
    return spec


def _unknown(name: str) -> ValueError:
    if name in _BROKEN:  # the plug-in of that name is installed but does not load
        return ValueError(f"env family {name!r}: {_BROKEN[name]}")
    close = difflib.get_close_matches(str(name), _REGISTRY, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    broken = f" Installed plug-ins that failed to load: {'; '.join(_BROKEN.values())}." if _BROKEN else ""
    return ValueError(
        f"unknown env family {name!r}; known: {sorted(_REGISTRY)}.{hint} A family "
        f"from a package registers through the {ENTRY_POINT_GROUP!r} entry point group "
        f"or the config key env.family_module (docs/extending.md).{broken}"
    )


def _find(name: str) -> FamilySpec | None:
    # Entry points load only for a name not yet registered, so the built-ins never wait on a plugin.
    with _LOCK:
        if name not in _REGISTRY:
            _load_entry_points()
        return _REGISTRY.get(name)


def families() -> dict[str, FamilySpec]:
    """All registered specs by name, in registration order (built-ins first). An installed
    plug-in that fails to load is left out, with one warning naming it (``broken_plugins``)."""
    with _LOCK:
        _load_entry_points()
        return dict(_REGISTRY)


def builtin_families() -> dict[str, FamilySpec]:
    """gigpo's own families by name, in registration order; no plug-in is looked at."""
    with _LOCK:
        return dict(_BUILTIN)


def is_builtin(name: str) -> bool:
    """``name`` is one of gigpo's own families (and no plug-in replaced it)."""
    with _LOCK:
        return name in _BUILTIN and _REGISTRY.get(name) is _BUILTIN[name]


def family_origin(name: str) -> str:
    """Where family ``name``'s spec came from: ``built-in``, ``entry point 'x' = 'mod:ATTR'
    (dist 1.0)``, ``env.family_module <ref>`` or ``register_family``."""
    get_family(name)
    return _ORIGIN.get(name, "register_family")


def broken_plugins() -> dict[str, str]:
    """``entry point name -> error`` for each installed plug-in that failed to load."""
    with _LOCK:
        _load_entry_points()
        return dict(_BROKEN)


def is_family(name: str) -> bool:
    """``name`` is registered (entry points included). An unknown name while an installed plug-in
    fails to load raises that plug-in's error: the name may be the broken plug-in's family."""
    if not isinstance(name, str):
        return False
    if _find(name) is not None:
        return True
    if _BROKEN:
        raise _unknown(name)
    return False


def load_family_module(ref: str) -> list[FamilySpec]:
    """Import the module ``ref`` and register its ``FAMILY_SPEC`` (a spec, a list of specs, or a
    zero-argument callable returning either); returns the specs.

    ``ref`` is a dotted module name (importable from ``sys.path``) or a path to a ``.py`` file or a
    package directory, whose parent directory is put first on ``sys.path`` (worker processes
    inherit it) so a family in a local directory needs no packaging.
    """
    from gigpo._imports import import_ref

    mod = import_ref(ref, "env.family_module")
    name = mod.__name__
    got = getattr(mod, "FAMILY_SPEC", None)
    if got is None:
        raise ValueError(f"env.family_module: module {name!r} has no FAMILY_SPEC (a gigpo.envs.spec.FamilySpec)")
    if callable(got) and not isinstance(got, FamilySpec):
        got = got()
    specs = list(got) if isinstance(got, (list, tuple)) else [got]
    for s in specs:
        if not isinstance(s, FamilySpec):
            raise ValueError(
                f"env.family_module: {name}.FAMILY_SPEC must be a FamilySpec (or a list of "
                f"them), got {type(s).__name__}"
            )
        register_family(s, origin=f"env.family_module {ref}")
    return specs


def _load_entry_points() -> None:
    if _loaded["entry_points"]:
        return
    _loaded["entry_points"] = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP!r})"
        fix = "fix or uninstall the package providing it"
        try:
            obj = ep.load()
            spec = obj if isinstance(obj, FamilySpec) else obj()
        except Exception as e:  # noqa: BLE001 -- name the broken plugin, whatever it raised
            _broken(ep.name, f"{where} failed to load: {type(e).__name__}: {e}; {fix}")
            continue
        if not isinstance(spec, FamilySpec):
            _broken(
                ep.name,
                f"{where} gave {type(spec).__name__}, not a FamilySpec (or a zero-argument callable "
                f"returning one); {fix}",
            )
            continue
        if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
            _broken(
                ep.name,
                f"{where} registers env family {spec.name!r}, which is already registered (module "
                f"{_REGISTRY[spec.name].module!r}); {fix}",
            )
            continue
        dist = getattr(ep, "dist", None)
        version = f" ({dist.name} {dist.version})" if dist is not None else ""
        _REGISTRY[spec.name] = spec
        _ORIGIN.setdefault(spec.name, f"entry point {ep.name!r} = {ep.value!r}{version}")


def _broken(name: str, message: str) -> None:
    """Record a plug-in that did not load and warn once: a run of another family goes on."""
    _BROKEN[name] = message
    warnings.warn(f"gigpo: skipping an installed env family plug-in: {message}", RuntimeWarning, stacklevel=4)


def _reset_for_tests() -> None:
    """Forget entry-point and user registrations (tests that install fake entry points)."""
    with _LOCK:
        _REGISTRY.clear()
        _REGISTRY.update(_BUILTIN)
        _ORIGIN.clear()
        _ORIGIN.update(dict.fromkeys(_BUILTIN, BUILTIN_ORIGIN))
        _BROKEN.clear()
        _loaded.update(entry_points=False)


def _state() -> list[dict]:
    """A copy of the registry's state, for ``_restore`` (tests)."""
    with _LOCK:
        return [dict(d) for d in (_REGISTRY, _ORIGIN, _BROKEN, _loaded)]


def _restore(state: list[dict]) -> None:
    with _LOCK:
        targets: tuple[dict, ...] = (_REGISTRY, _ORIGIN, _BROKEN, _loaded)
        for live, saved in zip(targets, state):
            live.clear()
            live.update(saved)
