"""trnsim's conformance suite: PyTorch OpInfo sweep on the simulated `neuron` device, NKI instruction
conformance, and the reports (JSON, Markdown, baseline comparison) backend teams publish."""
