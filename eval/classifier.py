"""SentEval's logistic-regression classifier on frozen sentence embeddings, trained many-at-once.

SentEval (Conneau & Kiela, 2018) scores transfer tasks with ``senteval.tools.classifier.MLP`` with ``nhid=0``: one
``nn.Linear(d, C)`` trained with cross-entropy by Adam or RMSprop (PyTorch defaults: Adam lr 1e-3, RMSprop
lr 1e-2), the L2 penalty put in the optimiser's (coupled) ``weight_decay`` for every parameter, bias included,
and early stopping on a validation set. SimCSE (Gao et al., 2021, Appendix E) and the four follow-up
papers use it with two settings (REFERENCE.md, "Evaluation protocol"):

=========== ======= ========== ========== ============ =====
mode        optim   batch_size tenacity   epoch_size   kfold
=========== ======= ========== ========== ============ =====
test        adam    64         5          4            10
fasttest    rmsprop 128        3          2            5
=========== ======= ========== ========== ============ =====

The training loop reproduced here, from SentEval's ``PyTorchClassifier.fit``:

- every classifier re-seeds the RNGs with the same seed: the ``Linear`` gets PyTorch's default initialisation
  (``U(-1/sqrt(d), 1/sqrt(d))`` for weight then bias) from ``torch.manual_seed(seed)``, and every pass over the
  training set draws ``np.random.permutation(n)`` from ``np.random.seed(seed)``;
- without validation data, ``validation_split=0.05``: the first ``int(0.05 n)`` rows of a seeded permutation
  are held out for early stopping;
- one "epoch" is ``epoch_size`` passes; after each, the validation accuracy is measured; the best model is kept
  (strict improvement); every non-improving evaluation increments a counter that is *never reset*, and the
  evaluation that finds it already at ``tenacity`` stops training; at most ``max_epoch=200`` passes;
- the loss is the mean cross-entropy of a mini-batch. (SentEval sets ``loss_fn.size_average = False`` after
  construction, which PyTorch >= 0.4 ignores: with the PyTorch SimCSE ran, the loss is the batch mean.)

Because every classifier of a hyperparameter grid starts from the same seed, the grid (and the folds of a
cross-validation) can be trained side by side: :func:`fit_many` stacks ``M`` independent models into one
``[M, C, d]`` tensor, computes the softmax-regression gradient in closed form, and applies Adam/RMSprop
element-wise with a per-model mask, so each model follows exactly the trajectory it would follow alone (same
initialisation, same batches, same updates, up to float summation order) while the Python loop runs once per
step instead of once per model. ``tests/test_eval_transfer.py`` checks this against a one-model-at-a-time
``torch.optim`` reference. Nothing is hard-coded to a device: pass ``device`` or let it pick CUDA when present.

:class:`SklearnLogReg` is SentEval's other path (``usepytorch=False``: scikit-learn's ``LogisticRegression``,
its ``C`` grid), used to check the optimiser-trained classifier (see docs/evaluation.md).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

import numpy as np
import torch

from eval.encoder import evaluation_precision

OptimName = Literal["adam", "rmsprop"]


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's ``params['classifier']`` for ``nhid=0`` plus the cross-validation fold count."""

    optim: OptimName
    batch_size: int
    tenacity: int
    epoch_size: int
    kfold: int
    max_epoch: int = 200
    validation_split: float = 0.05


SENTEVAL_CONFIGS: dict[str, ClassifierConfig] = {
    # SimCSE's evaluation.py: "test" = SentEval's full setting, "fasttest"/"dev" = its fast setting.
    "test": ClassifierConfig(optim="adam", batch_size=64, tenacity=5, epoch_size=4, kfold=10),
    "fasttest": ClassifierConfig(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2, kfold=5),
    "dev": ClassifierConfig(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2, kfold=5),
}
"""Classifier settings by evaluation mode (SimCSE ``evaluation.py`` / ``trainers.py``)."""

L2_GRID: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)
"""SentEval's weight-decay grid for the PyTorch classifier: ``[10**t for t in range(-5, -1)]``."""

# PyTorch's default optimiser hyper-parameters, which SentEval's "adam" / "rmsprop" strings select.
_ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
_RMSPROP = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8}


@dataclass(frozen=True)
class FitSpec:
    """One classifier to train: rows of the shared feature matrix, and its L2 penalty (or ``C`` for sklearn).

    ``val_idx=None`` means SentEval's ``validation_split``: the classifier holds out a seeded 5% of
    ``train_idx`` for early stopping (the final fit of every protocol).
    """

    train_idx: np.ndarray
    val_idx: np.ndarray | None
    reg: float


class FittedModel(Protocol):
    """A trained classifier: its validation accuracy in [0, 1] (NaN if it had none) and a predictor."""

    val_accuracy: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        ...


class Fitter(Protocol):
    """Trains a batch of :class:`FitSpec` on one feature matrix (the protocols in :mod:`eval.transfer`)."""

    def grid(self, protocol: str) -> tuple[float, ...]:
        ...

    def fit(self, X: np.ndarray, y: np.ndarray, specs: Sequence[FitSpec], nclasses: int) -> list[FittedModel]:
        ...


def accuracy(model: FittedModel, X: np.ndarray, y: np.ndarray) -> float:
    """Fraction of correct predictions, SentEval's ``clf.score``."""
    return float(np.mean(model.predict(X) == np.asarray(y))) if len(y) else float("nan")


# ----------------------------------------------------------------------------------------------- torch path


@dataclass
class LinearModel:
    """A trained ``Linear(d, C)``: ``logits = X @ weight.T + bias``; numpy arrays, device-free."""

    weight: np.ndarray
    bias: np.ndarray
    val_accuracy: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        logits = np.asarray(X, dtype=np.float32) @ self.weight.T + self.bias
        return logits.argmax(axis=1)


def default_device() -> torch.device:
    """CUDA when available, else CPU (the classifier is tiny; the encoder decides where the work is)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def init_linear(in_features: int, out_features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``nn.Linear``'s default initialisation right after ``torch.manual_seed(seed)``, without global RNG state.

    ``kaiming_uniform_(a=sqrt(5))`` gives ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for the weight; the bias uses
    the same bound; both draw from the CPU generator, weight first.
    """
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
    weight = torch.empty(out_features, in_features).uniform_(-bound, bound, generator=generator)
    bias = torch.empty(out_features).uniform_(-bound, bound, generator=generator)
    return weight, bias


def split_validation(train_idx: np.ndarray, fraction: float, rng: np.random.RandomState) -> tuple[np.ndarray, ...]:
    """SentEval's ``validation_split``: permute, hold out the first ``int(fraction * n)`` rows for validation."""
    permutation = rng.permutation(len(train_idx))
    n_dev = int(fraction * len(train_idx))
    return train_idx[permutation[n_dev:]], train_idx[permutation[:n_dev]]


class _MaskedOptimizer:
    """Adam or RMSprop (``torch.optim`` formulas, coupled weight decay) over ``M`` stacked models.

    A model whose mask entry is False is left untouched this step - parameters and optimiser state - which is
    what "this model has no batch at this step" or "this model has stopped" means for a model trained alone.
    """

    def __init__(self, name: OptimName, params: Sequence[torch.Tensor], weight_decay: torch.Tensor) -> None:
        if name not in ("adam", "rmsprop"):
            raise ValueError(f"optimiser {name!r} is not supported; SentEval's settings use 'adam' or 'rmsprop'")
        self.name = name
        self.weight_decay = weight_decay  # [M]
        self.steps = torch.zeros_like(weight_decay)
        self.state = [[torch.zeros_like(p) for p in params] for _ in range(2 if name == "adam" else 1)]

    @staticmethod
    def _per_model(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return values.view(-1, *([1] * (like.dim() - 1)))

    def step(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], mask: torch.Tensor) -> None:
        self.steps += mask.to(self.steps.dtype)
        for i, (param, grad) in enumerate(zip(params, grads)):
            keep = self._per_model(mask, param)
            grad = grad + self._per_model(self.weight_decay, param) * param
            if self.name == "adam":
                self._adam(i, param, grad, keep)
            else:
                self._rmsprop(i, param, grad, keep)

    def _adam(self, i: int, param: torch.Tensor, grad: torch.Tensor, keep: torch.Tensor) -> None:
        exp_avg, exp_avg_sq = self.state[0][i], self.state[1][i]
        new_avg = exp_avg * _ADAM["beta1"] + grad * (1 - _ADAM["beta1"])
        new_sq = exp_avg_sq * _ADAM["beta2"] + grad * grad * (1 - _ADAM["beta2"])
        steps = self._per_model(self.steps.clamp_min(1.0), param)
        bias_correction1 = 1 - _ADAM["beta1"] ** steps
        bias_correction2 = 1 - _ADAM["beta2"] ** steps
        denom = new_sq.sqrt() / bias_correction2.sqrt() + _ADAM["eps"]
        param.copy_(torch.where(keep, param - (_ADAM["lr"] / bias_correction1) * new_avg / denom, param))
        exp_avg.copy_(torch.where(keep, new_avg, exp_avg))
        exp_avg_sq.copy_(torch.where(keep, new_sq, exp_avg_sq))

    def _rmsprop(self, i: int, param: torch.Tensor, grad: torch.Tensor, keep: torch.Tensor) -> None:
        square_avg = self.state[0][i]
        new_sq = square_avg * _RMSPROP["alpha"] + grad * grad * (1 - _RMSPROP["alpha"])
        update = _RMSPROP["lr"] * grad / (new_sq.sqrt() + _RMSPROP["eps"])
        param.copy_(torch.where(keep, param - update, param))
        square_avg.copy_(torch.where(keep, new_sq, square_avg))


@dataclass
class _Batches:
    """Index matrix ``[M, steps, batch]`` of one pass over every model's training rows (``-1`` = padding)."""

    index: torch.Tensor
    valid: torch.Tensor


def _pass_batches(
    train_sets: Sequence[np.ndarray], rngs: Sequence[np.random.RandomState], active: np.ndarray, batch_size: int,
    device: torch.device,
) -> _Batches:
    """Each active model draws ``rng.permutation(n)`` (as SentEval's ``trainepoch``) and cuts it into batches."""
    n_steps = max(math.ceil(len(t) / batch_size) for t, a in zip(train_sets, active) if a)
    index = np.full((len(train_sets), n_steps * batch_size), -1, dtype=np.int64)
    for m, (rows, rng) in enumerate(zip(train_sets, rngs)):
        if active[m]:
            index[m, : len(rows)] = rows[rng.permutation(len(rows))]
    index_t = torch.from_numpy(index.reshape(len(train_sets), n_steps, batch_size)).to(device)
    return _Batches(index=index_t, valid=index_t >= 0)


def _softmax_regression_grads(
    weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor, y: torch.Tensor, index: torch.Tensor,
    valid: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of each model's mean cross-entropy over its batch: ``dL/dz = (softmax(z) - onehot(y)) / n``."""
    rows = index.clamp_min(0)
    xb = X[rows]  # [M, B, d]
    logits = torch.baddbmm(bias.unsqueeze(1), xb, weight.transpose(1, 2))  # [M, B, C]
    dlogits = torch.softmax(logits, dim=-1)
    dlogits.scatter_add_(-1, y[rows].unsqueeze(-1), -torch.ones_like(dlogits[..., :1]))
    weights = valid.to(X.dtype) / valid.sum(dim=1, keepdim=True).clamp_min(1).to(X.dtype)
    dlogits = dlogits * weights.unsqueeze(-1)
    return torch.bmm(dlogits.transpose(1, 2), xb), dlogits.sum(dim=1)


def _accuracies(
    weight: torch.Tensor, bias: torch.Tensor, X: torch.Tensor, y: torch.Tensor, val_sets: Sequence[torch.Tensor]
) -> np.ndarray:
    """Validation accuracy of every model on its own validation rows."""
    out = np.empty(len(val_sets))
    for m, rows in enumerate(val_sets):
        predictions = (X[rows] @ weight[m].T + bias[m]).argmax(dim=1)
        out[m] = (predictions == y[rows]).double().mean().item() if len(rows) else 0.0
    return out


class SentEvalLogReg:
    """SentEval's PyTorch logistic regression (``MLP`` with ``nhid=0``), trained grid-and-folds at once."""

    def __init__(self, config: ClassifierConfig, seed: int = 1111, device: str | torch.device | None = None) -> None:
        self.config = config
        self.seed = seed
        self.device = torch.device(device) if device is not None else default_device()

    def grid(self, protocol: str) -> tuple[float, ...]:
        """The L2 grid 1e-5 .. 1e-2, the same for every protocol."""
        return L2_GRID

    def fit(self, X: np.ndarray, y: np.ndarray, specs: Sequence[FitSpec], nclasses: int) -> list[FittedModel]:
        """Train one classifier per spec; see :func:`fit_many`."""
        return list(fit_many(X, y, specs, nclasses, self.config, self.seed, self.device))


@contextlib.contextmanager
def _cpu_threads(device: torch.device, num_threads: int | None):
    """Run with ``num_threads`` intra-op threads on CPU, restoring the previous setting afterwards.

    The classifier's tensors are tiny (``[M, batch, d]``): splitting them over threads saves little and, on a
    shared machine, waiting for a descheduled thread can cost 10x; one thread is the robust default.
    """
    if device.type != "cpu" or num_threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def fit_many(
    X: np.ndarray, y: np.ndarray, specs: Sequence[FitSpec], nclasses: int, config: ClassifierConfig,
    seed: int = 1111, device: str | torch.device | None = None, num_threads: int | None = 1,
) -> list[LinearModel]:
    """Train ``len(specs)`` independent SentEval classifiers side by side; each returns its best-validation model.

    Args:
        X: ``[n, d]`` features shared by all specs (rows are selected by each spec's indices).
        y: ``[n]`` integer labels in ``0 .. nclasses-1``.
        specs: what to train; ``reg`` is the weight decay.
        config: optimiser, batch size, tenacity, epoch size (:data:`SENTEVAL_CONFIGS`).
        seed: SentEval's seed (1111): same initialisation and batch order for every spec.
        device: where to train; CUDA when available by default.
        num_threads: CPU intra-op threads while training (None: leave PyTorch's setting).

    Training runs in IEEE float32 whatever the caller set (:func:`eval.encoder.evaluation_precision`'s fp32: no
    autocast, no TF32), as the sentence embeddings are computed: inside a GPU training run (``--eval_transfer``) the
    Trainer has turned TF32 on.
    """
    if not specs:
        return []
    device = torch.device(device) if device is not None else default_device()
    with _cpu_threads(device, num_threads), evaluation_precision("fp32", device):
        return _fit_many(X, y, specs, nclasses, config, seed, device)


def _fit_many(
    X: np.ndarray, y: np.ndarray, specs: Sequence[FitSpec], nclasses: int, config: ClassifierConfig, seed: int,
    device: torch.device,
) -> list[LinearModel]:
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float32), device=device)
    yt = torch.as_tensor(np.asarray(y, dtype=np.int64), device=device)
    rngs = [np.random.RandomState(seed) for _ in specs]
    train_sets, val_sets = [], []
    for spec, rng in zip(specs, rngs):
        train, val = (
            split_validation(np.asarray(spec.train_idx), config.validation_split, rng)
            if spec.val_idx is None
            else (np.asarray(spec.train_idx), np.asarray(spec.val_idx))
        )
        train_sets.append(train)
        val_sets.append(torch.as_tensor(val, dtype=torch.long, device=device))
    weight0, bias0 = init_linear(Xt.shape[1], nclasses, seed)
    weight = weight0.to(device).expand(len(specs), -1, -1).clone()
    bias = bias0.to(device).expand(len(specs), -1).clone()
    decay = torch.tensor([spec.reg for spec in specs], dtype=torch.float32, device=device)
    optimizer = _MaskedOptimizer(config.optim, (weight, bias), decay)

    best_acc = np.full(len(specs), -1.0)
    best_weight, best_bias = weight.clone(), bias.clone()
    stopped = np.zeros(len(specs), dtype=bool)
    misses = np.zeros(len(specs), dtype=int)
    n_epoch = 0
    while not stopped.all() and n_epoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            batches = _pass_batches(train_sets, rngs, ~stopped, config.batch_size, device)
            running = torch.as_tensor(~stopped, device=device)
            for step in range(batches.index.shape[1]):
                index, valid = batches.index[:, step], batches.valid[:, step]
                grad_w, grad_b = _softmax_regression_grads(weight, bias, Xt, yt, index, valid)
                optimizer.step((weight, bias), (grad_w, grad_b), valid.any(dim=1) & running)
        n_epoch += config.epoch_size
        acc = _accuracies(weight, bias, Xt, yt, val_sets)
        improved = ~stopped & (acc > best_acc)
        worse = ~stopped & ~improved
        best_acc[improved] = acc[improved]
        keep = torch.as_tensor(improved, device=device)
        best_weight[keep], best_bias[keep] = weight[keep], bias[keep]
        stopped |= worse & (misses >= config.tenacity)
        misses += worse
    return [
        LinearModel(best_weight[m].cpu().numpy(), best_bias[m].cpu().numpy(), float(best_acc[m]))
        for m in range(len(specs))
    ]


# ----------------------------------------------------------------------------------------------- sklearn path


@dataclass
class _SklearnModel:
    estimator: object
    val_accuracy: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.estimator.predict(X)  # type: ignore[attr-defined]


class SklearnLogReg:
    """SentEval's ``usepytorch=False`` path: ``LogisticRegression(C=reg)`` (L-BFGS here), its ``C`` grids.

    SentEval's grids: ``2**t, t in -2..3`` for the nested k-fold and train/dev/test protocols, ``t in -1..5`` for
    k-fold + test. A spec without validation rows trains on all its rows (SentEval's sklearn path does not hold
    out 5%).
    """

    def __init__(self, seed: int = 1111, max_iter: int = 1000) -> None:
        self.seed = seed
        self.max_iter = max_iter

    def grid(self, protocol: str) -> tuple[float, ...]:
        exponents = range(-1, 6) if protocol == "kfold" else range(-2, 4)
        return tuple(2.0**t for t in exponents)

    def fit(self, X: np.ndarray, y: np.ndarray, specs: Sequence[FitSpec], nclasses: int) -> list[FittedModel]:
        from sklearn.linear_model import LogisticRegression

        models: list[FittedModel] = []
        for spec in specs:
            estimator = LogisticRegression(C=spec.reg, random_state=self.seed, max_iter=self.max_iter)
            estimator.fit(X[spec.train_idx], y[spec.train_idx])
            model = _SklearnModel(estimator, float("nan"))
            if spec.val_idx is not None:
                model.val_accuracy = accuracy(model, X[spec.val_idx], y[spec.val_idx])
            models.append(model)
        return models
