"""The sections of gigpo's config that set how the policy is trained and the run recorded
(``train``, ``critic``, ``sft``, ``guard``, ``log``). ``gigpo.train.config`` assembles the tree."""

from __future__ import annotations

from dataclasses import dataclass

from gigpo.train.configtree import LONG, MANY, TOKENS, F, Section
from gigpo.train.configtree import check as _check

# Names are read from the code that implements them, never copied here.
from gigpo.learner.distributed import MODES as DIST_MODES
from gigpo.learner.loss import AGG_MODES, GSPO_AGG_MODE, KL_TYPES, POLICY_LOSSES


@dataclass
class TrainConfig(Section):
    PREFIX = "train"
    TITLE = "the policy update"

    iterations: int = F(100, "training iterations (rollout + update)", ge=0, le=LONG)
    lr: float = F(1e-6, "AdamW learning rate", gt=0)
    weight_decay: float = F(0.01, "AdamW weight decay", ge=0)
    warmup_iterations: int = F(0, "iterations of linear learning-rate warm-up", ge=0, le=LONG)
    schedule: str = F(
        "constant", "learning-rate schedule after warm-up: constant or cosine", choices=("constant", "cosine")
    )
    grad_clip: float = F(1.0, "max global gradient norm (0 = no clipping)", ge=0)
    ppo_epochs: int = F(1, "passes over each iteration's rows", ge=1, le=100)
    mini_batch_rows: int = F(
        256,
        "step rows per optimizer step, at most (verl-agent: ppo_mini_batch_size); an iteration's "
        "rows are split into ceil(rows / mini_batch_rows) mini-batches of about equal size",
        ge=1,
        le=MANY,
    )
    merge_identical_rows: bool = F(
        True,
        "update rows that are one sample repeated (same prompt, response and advantage sign, as "
        "in a state every rollout passes) as one row weighted by their count: the same loss and "
        "gradient for a mini-batch holding them, one forward/backward instead of many; a merged "
        "row counts as its rows in train.mini_batch_rows. Not with per-token advantages (PPO's "
        "critic) or policy_loss=gspo",
    )
    mini_batch_order: str = F(
        "shuffled",
        "how an iteration's rows are cut into mini-batches: shuffled (rows in random order) or "
        "by_prompt (rows with the same prompt, as rollouts passing one state, kept together, "
        "prompts in random order; the reference cuts its batch in rollout order, a task's rows "
        "together). by_prompt lets train.share_prefix run each state's prompt once per step",
        choices=("shuffled", "by_prompt"),
    )
    share_prefix: bool = F(
        False,
        "run the prompt prefix that rows of a micro-batch share once and each row's rest on its "
        "KV cache (log-probs and gradients the same up to float rounding, fewer tokens through "
        "the model); in the update and the log-prob passes, one process only (off under "
        "DDP/FSDP and with a value head on the policy)",
    )
    update_attention: str = F(
        "",
        "attention kernel of the update's forward and backward passes: '' (the model's own, "
        "sdpa for Hugging Face models), sdpa or eager; eager's backward is faster for a small "
        "model's short rows on a CPU (docs/performance.md); sampling keeps the model's own",
        choices=("", "sdpa", "eager"),
    )
    target_kl: float = F(
        0.0,
        "stop an iteration's update early, before the optimizer step of the first mini-batch "
        "whose mean KL to the sampling policy (k3 estimate, (r - 1) - log r, over its tokens) "
        "exceeds this (as PPO implementations' target_kl); the remaining mini-batches of the "
        "iteration are not trained on. 0 = off",
        ge=0,
    )
    micro_token_budget: int = F(8192, "max padded tokens per micro-batch (gradient accumulation)", ge=1, le=64 * TOKENS)
    pad_multiple: int = F(
        64,
        "pad micro-batch rows to a multiple of this many tokens: a few repeated shapes "
        "let the CPU allocator reuse memory (with varied shapes a run's memory keeps "
        "growing from iteration to iteration); 1 = no extra padding",
        ge=1,
        le=4096,
    )
    policy_loss: str = F(
        "ppo",
        "policy-gradient loss: ppo (per-token ratio, clipped per token, dual clip) or gspo "
        "(GSPO, arXiv:2507.18071: one ratio per row, the geometric mean of its token ratios, "
        f"clipped with clip_low/clip_high, no dual clip; needs loss_agg_mode={GSPO_AGG_MODE}; "
        "the paper clips at 3e-4/4e-4)",
        choices=POLICY_LOSSES,
    )
    clip_low: float = F(0.2, "clip epsilon below 1 (of the token ratio; of the row's ratio under gspo)", ge=0, lt=1)
    clip_high: float = F(0.2, "clip epsilon above 1 (0.28 = clip-higher; of the row's ratio under gspo)", ge=0)
    dual_clip_c: float = F(3.0, "dual-clip bound for negative advantages (unused by policy_loss=gspo)", gt=1)
    use_kl: bool = F(True, "add a KL-to-reference loss term (off: no reference model is loaded)")
    kl_type: str = F("low_var_kl", "KL estimator: low_var_kl, kl, abs or mse", choices=KL_TYPES)
    kl_coef: float = F(0.01, "weight of the KL loss term", ge=0)
    entropy_coef: float = F(0.001, "weight of the entropy bonus", ge=0)
    loss_agg_mode: str = F(
        "token-mean", "loss aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean", choices=AGG_MODES
    )
    skip_zero_advantage_rows: bool = F(
        False,
        "leave rows with advantage 0 out of the update (they carry no "
        "policy gradient; needs use_kl=false and entropy_coef=0, where they "
        "would only dilute the token mean; like DAPO's dynamic sampling)",
    )
    dynamic_sampling: bool = F(
        False,
        "DAPO's dynamic sampling: leave out episode groups whose rows all have "
        "advantage 0 (all rollouts tied: no signal) and roll out more tasks until "
        "env.tasks_per_iter groups carry signal or train.dynamic_sampling_rounds is used up",
    )
    dynamic_sampling_rounds: int = F(
        2, "extra rollout rounds per iteration that dynamic sampling may use", ge=0, le=100
    )
    max_bad_updates: int = F(3, "consecutive non-finite losses that stop the run", ge=1, le=1000)
    torch_threads: int = F(
        1,
        "torch CPU threads (more than the CPU cores free for this run only oversubscribes them; "
        "on a machine shared with other jobs, 1 is often fastest); at most 4 per CPU",
        ge=1,
    )
    autocast: str = F(
        "none",
        "mixed precision of the update's and log-prob passes' forward: none (float32 "
        "matmuls), bf16 (torch.autocast; faster on CPUs with AVX512-BF16, many times slower on "
        "CPUs without AVX512; log-probs and the loss stay float32; sampling is unchanged) or "
        "auto (bf16 where the device has native bfloat16 matmuls, else none)",
        choices=("none", "bf16", "auto"),
    )
    distributed: str = F(
        "ddp",
        "how the processes of `torchrun --nproc-per-node N -m gigpo.cli train` share the update "
        "(one process ignores it): ddp (DistributedDataParallel: each rank holds the whole model) "
        "or fsdp (FSDP2 fully_shard: parameters, gradients and optimizer state sharded per decoder "
        "layer); rank 0 rolls out and evaluates (docs/architecture.md#where-each-rank-does-what)",
        choices=DIST_MODES,
    )
    off_policy_steps: int = F(
        0,
        "rollout and update at the same time: 0 = in series (each iteration trains on rollouts of "
        "the policy it updates); k >= 1 = the rollouts of iteration i + k are sampled while the "
        "learner updates on iteration i's, so every task group is sampled by a policy at most k "
        "updates old (one version per group), trained with decoupled PPO "
        "(docs/training.md#rollout-and-update-at-the-same-time)",
        ge=0,
        le=4,
    )
    off_policy_loss: str = F(
        "decoupled",
        "with off_policy_steps >= 1: 'decoupled' = decoupled PPO, the ratio clipped against the "
        "learner's policy at the start of the update (an extra forward pass over the batch) and "
        "each token weighted from the sampler's policy to it; 'behaviour' = plain PPO against "
        "the sampler's log-probs (no extra pass: faster where the update is most of an iteration)",
        choices=("decoupled", "behaviour"),
    )
    behav_weight_cap: float = F(
        2.0,
        "with off_policy_steps >= 1: each token's importance weight from the sampling policy to "
        "the learner's policy at the start of the update is truncated at this (truncated "
        "importance sampling, Yao et al. 2025; verl's default cap is 2)",
        ge=1,
    )
    dist_timeout_min: float = F(
        120.0,
        "minutes a rank waits for the others in a collective (they wait while rank 0 rolls out, "
        "validates and evaluates; raise it for long evaluations)",
        gt=0,
    )

    def check(self):
        _check(
            self.policy_loss != "gspo" or self.loss_agg_mode == GSPO_AGG_MODE,
            "train.loss_agg_mode",
            f"train.policy_loss=gspo averages per sequence: set train.loss_agg_mode={GSPO_AGG_MODE} "
            f"(got {self.loss_agg_mode})",
        )
        _check(
            not self.skip_zero_advantage_rows or (not self.use_kl and self.entropy_coef == 0),
            "train.skip_zero_advantage_rows",
            "needs train.use_kl=false and train.entropy_coef=0 (rows with "
            "advantage 0 still carry KL/entropy gradient otherwise)",
        )


@dataclass
class CriticConfig(Section):
    """PPO's learned critic, used when the estimator takes values (``algorithm.estimator=ppo``).

    Defaults are verl-agent's (``critic.*``, ``algorithm.gamma/lam``, ``trainer.critic_warmup``);
    the critic's mini-batches, epochs, micro-batch budget, loss aggregation and autocast are the
    policy update's (``train.*``), as in verl (docs/algorithm.md#ppo-with-a-learned-critic).
    """

    PREFIX = "critic"
    TITLE = "PPO's learned critic (algorithm.estimator=ppo)"

    lr: float = F(1e-5, "critic AdamW learning rate (verl-agent: critic.optim.lr; 10x the actor's there)", gt=0)
    weight_decay: float = F(0.01, "critic AdamW weight decay", ge=0)
    grad_clip: float = F(1.0, "max global gradient norm of the critic (0 = no clipping)", ge=0)
    cliprange_value: float = F(
        0.5,
        "value clipping: a token's new value counts at most this far from the value the "
        "advantages were computed with (the loss takes the larger of clipped and unclipped error)",
        gt=0,
    )
    warmup_iterations: int = F(
        0,
        "first iterations that update only the critic; the policy is left unchanged (verl: trainer.critic_warmup)",
        ge=0,
        le=LONG,
    )
    gamma: float = F(
        1.0,
        "GAE discount per response token within a step's row (not algorithm.gamma, the step "
        "discount of the critic-free estimators); 1.0 as verl-agent",
        ge=0,
        le=1,
    )
    lam: float = F(1.0, "GAE lambda within a step's row; 1.0 as verl-agent", ge=0, le=1)
    shared_backbone: bool = F(
        False,
        "for small machines: the value head sits on the policy's own transformer (no second model, "
        "the update's one forward gives log-probs and values) and is trained by the policy's update, "
        "critic.vf_coef x value loss added to the policy loss, with train.lr / weight_decay / "
        "grad_clip (critic.lr, weight_decay, grad_clip unused); needs critic.warmup_iterations=0",
    )
    vf_coef: float = F(
        0.1,
        "with critic.shared_backbone: weight of the value loss in the shared loss (TRL's PPO "
        "default); unused with a separate critic",
        gt=0,
    )


@dataclass
class SFTConfig(Section):
    PREFIX = "sft"
    TITLE = "supervised warm start on expert demonstrations"

    enabled: bool = F(False, "warm-start the model by SFT on expert demos before RL")
    episodes: int = F(200, "expert episodes (train split) to collect", ge=1, le=MANY)
    epochs: int = F(2, "passes over the demonstrations", ge=1, le=1000)
    lr: float = F(1e-3, "AdamW learning rate for SFT", gt=0)
    batch_rows: int = F(16, "demonstration rows per optimizer step", ge=1, le=MANY)
    relabel: int = F(
        0,
        "ALFWorld: up to this many counterfactual rows per expert step that reads the task "
        "(the task naming another object / receptacle type in view, with the matching action; "
        "gigpo.agent.relabel); 0 = off",
        ge=0,
        le=1000,
    )
    explore_steps: int = F(
        0,
        "each demonstration episode first plays 0..this many random admissible actions (uniform), "
        "then the expert takes over; only the expert's moves are demonstrations, so the model "
        "also learns to act from states off the expert's own path; 0 = off",
        ge=0,
        le=10_000,
    )
    warmup_steps: int = F(
        0,
        "optimizer steps of linear learning-rate warm-up before the linear decay (a model "
        "built from scratch needs it to learn to copy names from its prompt)",
        ge=0,
        le=LONG,
    )
    prompt_loss_weight: float = F(
        0.0,
        "weight of next-token loss on prompt tokens (0 = response tokens only; "
        ">0 helps a from-scratch model learn to read observations)",
        ge=0,
    )
    think: str = F(
        "reason",
        "<think> text of the expert responses: 'reason' (a one-line reason naming the "
        "action's target) or 'empty' (<think></think>: every decision is made in the action text, "
        "where rollout.constrain_actions applies)",
    )
    output_dir: str = F("", "where to save the SFT model ('' = cache keyed by the SFT config)")

    def check(self):
        from gigpo.agent.expert import THINK_STYLES

        _check(self.think in THINK_STYLES, "sft.think", f"must be one of {THINK_STYLES}, got {self.think!r}")


@dataclass
class GuardConfig(Section):
    PREFIX = "guard"
    TITLE = "best-model selection and the collapse watchdog"

    val_every: int = F(
        0,
        "best-model selection: evaluate on guard.val_tasks validation tasks before training, "
        "every k iterations and after the last (0 = off); the run keeps model/ = the best by "
        "validation success (ties keep the earlier), model_last/ = the last",
        ge=0,
        le=LONG,
    )
    val_tasks: int = F(
        32, "validation tasks: eval-split tasks disjoint from the env.eval_tasks held-out ones", ge=1, le=MANY
    )
    select_margin_se: float = F(
        2.0,
        "model/ is the last model instead of the best by validation when the last's validation "
        "success is within this many standard errors of the best's (sqrt(p(1-p)/val_tasks); the "
        "start is a candidate too; 0 = always the best). 2: the best of several noisy validations "
        "is a lucky draw, and the difference of two has ~1.4 times one's standard error",
        ge=0,
    )
    watchdog: bool = F(
        True,
        "roll back to the best checkpoint and scale the learning rate by guard.lr_factor when "
        "training collapses (see guard.train_drop, guard.val_drop, guard.entropy_floor)",
    )
    train_drop: float = F(
        0.3,
        "collapse: training success below the best running mean (EMA, weight 0.5) by more "
        "than this for guard.patience iterations in a row",
        gt=0,
        le=1,
    )
    val_drop: float = F(0.25, "collapse: validation success below the best so far by more than this", gt=0, le=1)
    entropy_floor: float = F(
        0.0, "collapse: rollout/entropy_est below this for guard.patience iterations (0 = off)", ge=0
    )
    patience: int = F(2, "consecutive iterations a training-side collapse signal must hold", ge=1, le=1000)
    lr_factor: float = F(0.5, "learning-rate multiplier applied at each rollback", gt=0, le=1)
    max_rollbacks: int = F(3, "rollbacks after which the run stops early (keeping the best model)", ge=0, le=1000)


@dataclass
class LogConfig(Section):
    PREFIX = "log"
    TITLE = "evaluation, checkpoints and logs"

    eval_every: int = F(0, "evaluate every k iterations (0 = only before and after training)", ge=0, le=LONG)
    save_every: int = F(1, "checkpoint every k iterations (the last iteration is always saved)", ge=1, le=LONG)
    trajectories_every: int = F(
        5, "write sampled episodes with advantages every k iterations (0 = never)", ge=0, le=LONG
    )
    eval_before: bool = F(True, "evaluate before the first iteration")
    tensorboard: bool = F(True, "also log to TensorBoard (run_dir/tensorboard; a main dependency)")
    wandb_project: str = F("", "Weights & Biases project ('' = off)")
    progress: bool = F(True, "show progress bars")
