"""NKI kernels trnsim itself ships: the demo kernels, and later the kernels behind PyTorch ops."""
