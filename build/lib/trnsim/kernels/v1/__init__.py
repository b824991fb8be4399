"""The legacy NKI front end (``neuronxcc.nki``, Neuron SDK 2.26 and earlier) over trnsim's one engine."""
