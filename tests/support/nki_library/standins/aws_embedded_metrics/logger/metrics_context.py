"""``MetricsContext`` as the harness uses it: a container of metrics, dimensions and properties (kept in memory)."""


class MetricsContext:
    def __init__(self):
        self.namespace = None
        self.metrics = {}
        self.properties = {}
        self.dimensions = []
        self.default_dimensions = {}
        self.meta = {}

    @classmethod
    def empty(cls):
        return cls()

    def put_metric(self, key, value, unit=None, storage_resolution=None):
        self.metrics.setdefault(key, []).append((value, unit))

    def set_property(self, key, value):
        self.properties[key] = value

    def put_dimensions(self, dims):
        self.dimensions.append(dict(dims))

    def set_dimensions(self, dims, use_default=False):
        self.dimensions = [dict(d) for d in dims]

    def set_default_dimensions(self, dims):
        self.default_dimensions = dict(dims)

    def create_copy_with_context(self, *args, **kwargs):
        c = MetricsContext()
        c.namespace, c.properties = self.namespace, dict(self.properties)
        c.dimensions, c.default_dimensions = list(self.dimensions), dict(self.default_dimensions)
        return c
