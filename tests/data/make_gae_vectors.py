"""Make ``verl_gae_vectors.json``: inputs and the outputs of verl's own ``compute_gae_advantage_return``.

Run once, by hand, with verl's released source (``pip download verl --no-deps -d /tmp/verl``)::

    python tests/data/make_gae_vectors.py /tmp/verl/verl-0.9.1-py3-none-any.whl

(a wheel, or a directory holding a verl checkout or unpacked wheel). verl itself is not installed
and not imported: its package ``__init__`` pulls ray, omegaconf and the rest. The script reads
``verl/trainer/ppo/core_algos.py`` and ``verl/utils/torch_functional.py`` from that source, takes
the unmodified text of ``compute_gae_advantage_return`` and of the ``masked_*`` helpers its
``verl_F.masked_whiten`` call needs, and executes only those functions (decorators left off: they
register the function in verl's registry, which is not loaded). The JSON records verl's version and
the sha256 of the wheel and of both source files; ``tests/test_advantages_gae.py`` checks gigpo
against it.

Layout (docs/algorithm.md#ppo-with-a-learned-critic). verl's function works per token: ``[B, L]``
tensors over each row's response tokens, ``response_mask`` 1 on response tokens, the token rewards
0 but where the reward manager put the row's reward. gigpo's ``row_gae`` takes one row per agent
step: ``scores[i]`` (the episode score less the invalid-action penalty) and the critic's values of
that step's response tokens. The two meet as verl-agent lays out a step: row i of verl's batch is
step i's response, right-padded to ``L``; ``token_level_rewards[i, len_i - 1] = scores[i]`` and 0
elsewhere; ``values[i, :len_i]`` are the step's token values. Padding values are random on
purpose: verl 0.9.1 carries ``nextvalues`` past masked tokens, so the value after a row's last
token is 0 (gigpo's rule) whatever sits in the padding. Outputs are compared on masked tokens
only (verl leaves ``values`` in the padding of its returns and whitened shifts there).

verl runs here in float64 (its function is dtype-generic), so the stored outputs carry no float32
rounding of their own and gigpo's float32 results can be held to 1e-6.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

CORE = "verl/trainer/ppo/core_algos.py"
TF = "verl/utils/torch_functional.py"
VERSION = "verl/version/version"
OUT = Path(__file__).with_name("verl_gae_vectors.json")

# (name, gamma, lam, row lengths, seed): verl-agent's default (1, 1), the common (0.99, 0.95), a
# short horizon, TD(0) (lam 0), one-token rows, and one row alone in its batch.
CASES = [
    ("verl_agent_default", 1.0, 1.0, [5, 1, 9, 3, 7, 2], 0),
    ("gamma099_lam095", 0.99, 0.95, [4, 12, 1, 6, 8, 3, 10], 1),
    ("gamma09_lam05", 0.9, 0.5, [3, 3, 11, 2, 5], 2),
    ("td0", 0.97, 0.0, [6, 2, 9, 4], 3),
    ("one_token_rows", 1.0, 0.95, [1, 1, 1, 1, 2], 4),
    ("single_row", 0.99, 0.9, [13], 5),
]


def read_sources(src: Path) -> tuple[dict[str, bytes], dict]:
    """The two source files (and the version file) from a wheel or a source directory."""
    names = (CORE, TF, VERSION)
    if src.is_file():
        with zipfile.ZipFile(src) as z:
            files = {n: z.read(n) for n in names if n in z.namelist()}
        origin = {"wheel": src.name, "wheel_sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    else:
        files = {n: (src / n).read_bytes() for n in names if (src / n).exists()}
        origin = {"directory": src.name}
        head = src / ".git" / "HEAD"
        if head.exists():  # a git checkout: record the commit
            ref = head.read_text().strip()
            origin["commit"] = (src / ".git" / ref[5:]).read_text().strip() if ref.startswith("ref: ") else ref
    missing = [n for n in (CORE, TF) if n not in files]
    if missing:
        raise SystemExit(f"{src}: no {missing}; pass a verl wheel or a verl source directory")
    return files, origin


def function_source(text: str, name: str) -> str:
    """The unmodified text of top-level function ``name`` (``def`` to its end; decorators left off)."""
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            seg = ast.get_source_segment(text, node)
            assert seg is not None
            return seg
    raise SystemExit(f"verl source has no function {name!r}")


def load_verl_gae(files: dict[str, bytes]):
    """verl's ``compute_gae_advantage_return``, executed from its own source with ``verl_F``'s helpers."""
    tf_text = files[TF].decode()
    ns_f: dict = {"torch": torch}
    for fn in ("masked_sum", "masked_mean", "masked_var", "masked_whiten"):
        exec(function_source(tf_text, fn), ns_f)  # noqa: S102 - verl's own text, see the docstring
    verl_F = SimpleNamespace(**{k: v for k, v in ns_f.items() if k.startswith("masked_")})
    ns: dict = {"torch": torch, "verl_F": verl_F}
    exec(function_source(files[CORE].decode(), "compute_gae_advantage_return"), ns)  # noqa: S102
    return ns["compute_gae_advantage_return"]


def make_case(fn, name, gamma, lam, lengths, seed) -> dict:
    rng = np.random.default_rng(seed)
    B, L = len(lengths), max(lengths) + 2  # two padding columns past the longest row
    # Step rewards as the trainer makes them: episode scores (0/1 or a WebShop-like fraction) less
    # the 0.1 invalid-action penalty on some rows.
    scores = rng.choice([0.0, 1.0, 0.35], size=B) - 0.1 * (rng.random(B) < 0.3)
    values = rng.uniform(-1.0, 1.5, size=(B, L))  # padding holds values too (see the docstring)
    mask = np.zeros((B, L), np.int64)
    rewards = np.zeros((B, L))
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        rewards[i, n - 1] = scores[i]
    adv, ret = fn(
        torch.tensor(rewards, dtype=torch.float64),
        torch.tensor(values, dtype=torch.float64),
        torch.tensor(mask, dtype=torch.float64),
        gamma,
        lam,
    )
    return {
        "name": name,
        "params": {"gamma": gamma, "lam": lam},
        "inputs": {
            "scores": scores.tolist(),
            "lengths": list(lengths),
            "token_level_rewards": rewards.tolist(),
            "values": values.tolist(),
            "response_mask": mask.tolist(),
        },
        "outputs": {"advantages": adv.tolist(), "returns": ret.tolist()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("verl", type=Path, help="a verl wheel (.whl) or a directory with verl's source")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    files, origin = read_sources(a.verl)
    fn = load_verl_gae(files)
    source = {
        "function": f"compute_gae_advantage_return in {CORE} (verl_F.masked_whiten from {TF})",
        "verl_version": files[VERSION].decode().strip() if VERSION in files else "unknown",
        **origin,
        "sha256": {n: hashlib.sha256(files[n]).hexdigest() for n in (CORE, TF)},
        "torch": torch.__version__,
        "dtype": "float64",
        "made_by": "tests/data/make_gae_vectors.py",
    }
    cases = [make_case(fn, *c) for c in CASES]
    a.out.write_text(json.dumps({"schema_version": 1, "source": source, "cases": cases}, indent=1) + "\n")
    print(f"wrote {a.out} ({len(cases)} cases, verl {source['verl_version']})")


if __name__ == "__main__":
    main()
