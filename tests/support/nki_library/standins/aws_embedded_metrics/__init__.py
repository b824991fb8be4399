"""Stand-in for AWS's ``aws_embedded_metrics`` (CloudWatch metrics): the nki-library harness imports it at start;
in simulation mode with no ``--metric-output`` it records metrics into a context that is never sent anywhere."""
