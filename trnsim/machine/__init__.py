"""The simulated machine: NeuronCores with their memories, executing and recording instructions, and the scheduler
that turns the record into a :class:`Timeline`."""

from .core import Chip, InstrRecord, NeuronCore
from .scheduler import schedule
from .timeline import ENGINES, Row, Timeline

__all__ = ["Chip", "InstrRecord", "NeuronCore", "schedule", "Timeline", "Row", "ENGINES"]
