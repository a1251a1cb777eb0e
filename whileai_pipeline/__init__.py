"""whileai-pipeline: simulated agent runs -> gated SFT and DPO training files, as a Dagster code location.

The exporter library is importable without Dagster: ``import whileai_pipeline.simulations as wai``.
"""

from .simulations import *  # noqa: F401,F403
from .simulations import __all__  # noqa: F401

__version__ = "0.1.0"
