"""Kernel generation (`napkin kernel`): a diagram's configured kernels as Triton or CUDA source."""

from analyzer.kernel.generate import Generated, generate
from analyzer.kernel.predict import Prediction, predict

__all__ = ["Generated", "Prediction", "generate", "predict"]
