"""Collectives across NeuronCores and chips: topologies as data, the Neuron runtime's algorithms as timed step
schedules (the runtime's fixed costs, bandwidth, hop latency, link contention, HBM traffic), the physical bound
of each collective's paths, and functional collectives between simulated ranks in one process.  Layering:
imports ``trnsim.targets`` (and machine/memory) only."""

from . import functional
from .algorithms import ALGORITHMS, OPS, CollectiveCost, bus_factor, choose_algorithm, collective_time
from .bounds import Bound, physical_bound
from .topology import MACHINE_ALIASES, TOPOLOGIES, Placement, Topology, get_topology, machine_name

__all__ = ["functional", "TOPOLOGIES", "MACHINE_ALIASES", "machine_name", "Topology", "Placement", "get_topology",
           "collective_time", "CollectiveCost", "bus_factor", "choose_algorithm", "OPS", "ALGORITHMS", "Bound",
           "physical_bound"]
