"""Stand-in for PyTorch in the nanoGPT imitation: only the global seed that train.py sets."""
import random

_generator = random.Random()


def manual_seed(seed):
    _generator.seed(seed)
    return _generator


def initial_seed():
    return _generator.getstate()[1][0]


def randn():
    return _generator.gauss(0.0, 1.0)
