"""Shared by the fit tests (test_fit_options, test_custom_layers, test_training_state): a fresh
Keras session per test and a small deterministic regression set."""

import numpy as np
import pytest

import meshlayout as keras


@pytest.fixture(autouse=True)
def fresh_session():
    keras.clear_session()
    yield


def data(rows=16, width=4):
    i = np.arange(rows)[:, None]
    j = np.arange(width)[None, :]
    x = (((31 * i + 17 * j) % 23) - 11).astype(np.float32) / 8
    y = ((((13 * np.arange(rows)) % 7) - 3).astype(np.float32) / 4)[:, None]
    return x, y
