"""Collectives across NeuronCores and chips: topologies as data, the Neuron runtime's algorithms as timed step
schedules (bandwidth, hop latency, link contention, HBM traffic), and functional collectives between simulated
ranks in one process.  Layering: imports ``trnsim.targets`` (and machine/memory) only."""

from . import functional
from .algorithms import ALGORITHMS, OPS, CollectiveCost, bus_factor, choose_algorithm, collective_time
from .topology import TOPOLOGIES, Placement, Topology, get_topology

__all__ = ["functional", "TOPOLOGIES", "Topology", "Placement", "get_topology", "collective_time", "CollectiveCost", "bus_factor",
           "choose_algorithm", "OPS", "ALGORITHMS"]
