"""Cost estimation of training jobs on Trainium instances: ``trnsim.cost.estimate(...)`` and ``trnsim estimate``.

Layering: imports the backend (shape-only device) and collectives.  See :mod:`trnsim.cost.estimator`.
"""

from .estimator import INSTANCES, Estimate, Parallelism, estimate, load_prices
from .models import ModelSpec, builtin_names, load_model
from .search import pareto, search

__all__ = ["estimate", "search", "pareto", "Estimate", "Parallelism", "ModelSpec", "load_model", "builtin_names",
           "INSTANCES", "load_prices"]
