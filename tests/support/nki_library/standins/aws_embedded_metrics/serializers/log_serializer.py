"""``LogSerializer``: the harness serialises a metrics context to JSON lines only when metrics output is enabled."""

import json


class LogSerializer:
    @staticmethod
    def serialize(context):
        return [json.dumps({"metrics": {k: [v for v, _ in vals] for k, vals in context.metrics.items()},
                            "properties": context.properties}, default=str)]
