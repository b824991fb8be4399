"""The simulated machine: NeuronCores with their memories, executing and recording instructions, the programs of a
launch running concurrently (with race detection and compiler-style capacity checks), and the scheduler that turns
the record into a :class:`Timeline`."""

from .capacity import CapacityError
from .core import Chip, InstrRecord, NeuronCore
from .programs import BarrierError, Programs
from .races import RaceDetector, RaceError, RaceWarning
from .scheduler import schedule
from .timeline import ENGINES, Row, Timeline

__all__ = ["Chip", "InstrRecord", "NeuronCore", "schedule", "Timeline", "Row", "ENGINES", "Programs",
           "BarrierError", "RaceDetector", "RaceError", "RaceWarning", "CapacityError"]
