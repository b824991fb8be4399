"""``neuronxcc.nki.compiler.backends``: the module path legacy kernels import helper names from (see ``neuron``)."""
