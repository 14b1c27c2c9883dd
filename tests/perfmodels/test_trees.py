"""Boosted trees as NumPy arrays: the same predictions as scikit-learn's regressor, and unit models that predict
(and unpickle) without importing it."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfmodels.trees import TreeEnsemble, compile_ensemble

pytest.importorskip("sklearn", reason="extra not installed")


def _fitted(seed: int = 0) -> tuple[object, np.ndarray]:
    from sklearn.ensemble import GradientBoostingRegressor

    rng = np.random.default_rng(seed)
    x = rng.lognormal(size=(80, 6))
    y = np.log(x[:, 0] * x[:, 1] + 1.0) + np.sin(x[:, 2])
    regressor = GradientBoostingRegressor(n_estimators=150, max_depth=3, subsample=0.8, random_state=0)
    return regressor.fit(x, y), x


def test_the_compiled_ensemble_predicts_what_the_regressor_does_on_unseen_points() -> None:
    regressor, x = _fitted()
    ensemble = compile_ensemble(regressor, x)
    assert isinstance(ensemble, TreeEnsemble)
    unseen = np.random.default_rng(1).lognormal(size=(300, 6))
    np.testing.assert_allclose(ensemble.predict(unseen), regressor.predict(unseen), rtol=1e-12, atol=1e-12)  # type: ignore[attr-defined]
    # a threshold sits between two float32 values: a point on it goes left, as in scikit-learn
    on_split = x.copy()
    on_split[:, 0] = regressor.estimators_[0, 0].tree_.threshold[0]  # type: ignore[attr-defined]
    np.testing.assert_allclose(ensemble.predict(on_split), regressor.predict(on_split), rtol=1e-12, atol=1e-12)  # type: ignore[attr-defined]


def test_something_that_is_not_a_boosted_ensemble_is_not_compiled() -> None:
    from sklearn.linear_model import LinearRegression

    x = np.arange(12.0).reshape(6, 2)
    assert compile_ensemble(LinearRegression().fit(x, x[:, 0]), x) is None


def test_unit_models_keep_compiled_trees_and_unpickle_without_scikit_learn(tmp_path: Path) -> None:
    from perfmodels.unitfit import KindModel

    regressor, x = _fitted()
    ensemble = compile_ensemble(regressor, x)
    path = tmp_path / "kind.pkl"
    path.write_bytes(pickle.dumps(KindModel("conv", len(x), ensemble)))
    np.save(tmp_path / "x.npy", x)
    code = (
        "import pickle, sys, numpy as np\n"
        f"model = pickle.loads(open({str(path)!r}, 'rb').read())\n"
        f"print(model.log_ratio(np.load({str(tmp_path / 'x.npy')!r}))[0])\n"
        "assert 'sklearn' not in sys.modules and 'scipy' not in sys.modules, 'imported scikit-learn'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == pytest.approx(float(regressor.predict(x[:1])[0]), rel=1e-12)  # type: ignore[attr-defined]
