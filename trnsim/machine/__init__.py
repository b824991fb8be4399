"""The simulated machine: NeuronCores with their memories, executing and recording instructions."""

from .core import Chip, InstrRecord, NeuronCore

__all__ = ["Chip", "InstrRecord", "NeuronCore"]
